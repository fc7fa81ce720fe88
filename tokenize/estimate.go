package tokenize

import (
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/jsjson"
)

// estimateImageChars is what Pi adds for an image in a toolResult or custom message.
const estimateImageChars = 4800

type estimate struct {
	// userImages: images in user messages count (UserImagesWeigh); system: system messages
	// count (SystemMessagesWeigh).
	userImages, system bool
}

// Estimate returns Pi's estimateTokens as the newest Pi computes it (pi.Latest):
// ceil(chars/4) over UTF-16 code units, with the per-role rules in the package doc. It
// matches the real Pi on every message entry of the corpus (TestEstimateMatchesPi).
func Estimate() Counter { return EstimateFor(pi.Latest) }

// EstimateFor returns Pi's estimateTokens as Pi r computes it. Counters whose counts differ
// have different names.
func EstimateFor(r pi.Release) Counter {
	return estimate{userImages: r.Has(pi.UserImagesWeigh), system: r.Has(pi.SystemMessagesWeigh)}
}

// Name is "estimate" for the newest Pi's rules, else "estimate@" and the first release that
// counts that way: "estimate@0.73.0" (no images in user messages), "estimate@0.76.0" (no
// system messages).
func (e estimate) Name() string {
	switch {
	case e.system:
		return CounterEstimate
	case e.userImages:
		return CounterEstimate + "@" + pi.UserImagesWeigh.Since().String()
	}
	return CounterEstimate + "@0.73.0"
}

func (e estimate) Count(m *sessionio.Message) int {
	if m == nil {
		return 0
	}
	return (e.chars(m) + 3) / 4
}

// chars is the chars figure of Pi's estimateTokens. Where Pi would throw on a malformed
// message (an assistant block without text, a toolCall without arguments, a toolResult with
// no content) it counts what is there instead.
func (e estimate) chars(m *sessionio.Message) int {
	chars := 0
	switch m.Role {
	case sessionio.RoleUser:
		if m.Content.IsString {
			return jsjson.UTF16Len(m.Content.Text)
		}
		for _, b := range m.Content.Blocks {
			switch {
			case b.Type == sessionio.BlockText:
				chars += jsjson.UTF16Len(b.Text)
			case b.Type == sessionio.BlockImage && e.userImages:
				chars += estimateImageChars
			}
		}
	case sessionio.RoleSystem:
		if !e.system {
			return 0
		}
		if m.Content.IsString {
			chars = jsjson.UTF16Len(m.Content.Text)
		}
		for _, b := range m.Content.Blocks {
			switch b.Type {
			case sessionio.BlockText:
				chars += jsjson.UTF16Len(b.Text)
			case sessionio.BlockImage:
				chars += estimateImageChars
			}
		}
		for _, s := range m.Sections {
			if s.Value != nil {
				chars += jsjson.UTF16Len(*s.Value)
			}
		}
		chars += argumentsLen(m.ToolsAdded)
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
