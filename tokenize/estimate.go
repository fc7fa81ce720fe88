package tokenize

import (
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/jsjson"
)

// estimateImageChars is what Pi adds for an image in a toolResult or custom message.
const estimateImageChars = 4800

type estimate struct{}

// Estimate returns Pi's estimateTokens: ceil(chars/4) over UTF-16 code units, with the
// per-role rules in the package doc. It matches the real Pi on every message entry of the
// corpus (TestEstimateMatchesPi).
func Estimate() Counter { return estimate{} }

func (estimate) Name() string { return CounterEstimate }

func (estimate) Count(m *sessionio.Message) int {
	if m == nil {
		return 0
	}
	return (estimateChars(m) + 3) / 4
}

// estimateChars is the chars figure of Pi's estimateTokens. Where Pi would throw on a
// malformed message (an assistant block without text, a toolCall without arguments, a
// toolResult with no content) it counts what is there instead.
func estimateChars(m *sessionio.Message) int {
	chars := 0
	switch m.Role {
	case sessionio.RoleUser:
		if m.Content.IsString {
			return jsjson.UTF16Len(m.Content.Text)
		}
		for _, b := range m.Content.Blocks {
			if b.Type == sessionio.BlockText {
				chars += jsjson.UTF16Len(b.Text)
			}
		}
	case sessionio.RoleAssistant:
		// Pi iterates content blocks only; a string content has none.
		for _, b := range m.Content.Blocks {
			switch b.Type {
			case sessionio.BlockText:
				chars += jsjson.UTF16Len(b.Text)
			case sessionio.BlockThinking:
				chars += jsjson.UTF16Len(b.Thinking)
			case sessionio.BlockToolCall:
				chars += jsjson.UTF16Len(b.Name) + argumentsLen(b.Arguments)
			}
		}
	case sessionio.RoleCustom, sessionio.RoleToolResult:
		if m.Content.IsString {
			return jsjson.UTF16Len(m.Content.Text)
		}
		for _, b := range m.Content.Blocks {
			switch b.Type {
			case sessionio.BlockText:
				chars += jsjson.UTF16Len(b.Text)
			case sessionio.BlockImage:
				chars += estimateImageChars
			}
		}
	case sessionio.RoleBashExecution:
		chars = jsjson.UTF16Len(m.Command) + jsjson.UTF16Len(m.Output)
	case sessionio.RoleBranchSummary, sessionio.RoleCompactionSummary:
		chars = jsjson.UTF16Len(m.Summary)
	}
	return chars
}

// argumentsLen is JSON.stringify(arguments).length. Arguments that are absent or not
// valid JSON (Pi could not have loaded such a line) count 0.
func argumentsLen(raw []byte) int {
	if len(raw) == 0 {
		return 0
	}
	n, err := jsjson.CanonicalLen(raw)
	if err != nil {
		return 0
	}
	return n
}
