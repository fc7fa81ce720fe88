// Package tokenize counts the tokens of Pi session messages: exactly, with OpenAI's tiktoken
// vocabularies embedded in the binary, or with Pi's own chars/4 estimate; and caches the
// counts per entry, since an entry never changes once written.
//
// # What a message costs (the one place these rules are written down)
//
// Two counters implement Counter.
//
// "estimate" is Pi's estimateTokens (pi-coding-agent compaction.ts), reproduced exactly so
// that the "pi" cut policy picks the cut Pi picks: ceil(chars/4), chars counted in UTF-16
// code units (JavaScript's String length). The releases differ in two roles
// (EstimateFor(r); pi.UserImagesWeigh, pi.SystemMessagesWeigh): "estimate"
// counts as the newest Pi, "estimate@0.76.0" as 0.76.0 to 0.86.x, "estimate@0.73.0" as older:
//
//	user               content string, or the sum of the text blocks; images 4800 chars
//	                   each (before 0.76.0: images 0)
//	assistant          text + thinking + for each toolCall name + JSON.stringify(arguments)
//	toolResult, custom content string, or the sum of the text blocks + 4800 per image
//	bashExecution      command + output
//	branchSummary,
//	compactionSummary  summary
//	system             content (as user) + every section's text +
//	                   JSON.stringify(toolsAdded) (before 0.87.0: 0)
//	any other role     0
//
// "tiktoken:<encoding>" counts what the model reads, with tiktoken (o200k_base or
// cl100k_base, chosen per model by the configs catalog). Per message:
//
//	MessageOverhead (4)  every message of a known role: the chat framing around it
//	                     (start marker, role, separator, end marker: 3 in OpenAI's
//	                     published accounting, plus 1 for the role name)
//	text blocks          tiktoken(text), in every role; a string content likewise
//	thinking blocks      tiktoken(thinking) (signatures are opaque and not counted)
//	toolCall blocks      tiktoken(name) + tiktoken(JSON.stringify(arguments)) (the
//	                     arguments exactly as JavaScript serializes them, jsjson.Canonical)
//	toolResult           its text blocks (toolCallId and toolName ride in the overhead)
//	bashExecution        tiktoken(command) + tiktoken(output); 0 in total, overhead
//	                     included, when excludeFromContext is set (Pi never sends it)
//	custom               content string or text blocks
//	branchSummary,
//	compactionSummary    tiktoken(summary)
//	system (Pi 1.x)      content text blocks or string + every section's text +
//	                     tiktoken(JSON.stringify(toolsAdded)): the prompt and the tool
//	                     declarations the model reads
//	image blocks         ImageTokens (1200) each, in every role
//	any other role       0 (Pi sends it nowhere)
//
// ImageTokens is 1200 because that is Pi's own figure (4800 chars / 4), and it sits between
// what providers charge for a typical screenshot: Anthropic ~ width*height/750 (about 1600
// for a 1092x1092 image, the largest before resizing), OpenAI high detail 765 for 1024x1024.
// Images are not decoded, so their size is not known; a fixed cost is the honest choice.
//
// Counts are sums of per-part counts (tiktoken of each string separately), never of a
// concatenation: this is what makes the count of a message independent of its neighbours
// and cacheable per entry. Token boundaries across parts can differ by a token or two from
// a provider's count of the rendered prompt; the overhead absorbs that on average.
package tokenize

import (
	"fmt"
	"strings"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
)

// Counter counts the tokens of one message. Implementations are safe for concurrent use.
type Counter interface {
	// Name identifies the counting rules ("estimate", "tiktoken:o200k_base"); counts from
	// counters with the same name are interchangeable (Cache keys on it).
	Name() string
	// Count returns the tokens m costs. A nil message costs 0.
	Count(m *sessionio.Message) int
}

// Cost constants of the tiktoken counter (see the package doc).
const (
	// MessageOverhead is added once per message of a known role.
	MessageOverhead = 4
	// ImageTokens is the fixed cost of one image block.
	ImageTokens = 1200
)

// Counter names accepted by New.
const (
	CounterEstimate = "estimate"
	CounterTiktoken = "tiktoken"
)

// CheckCounter reports whether name is a counter New knows, without making one (a
// tiktoken counter loads its vocabulary).
func CheckCounter(name string) error {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case CounterEstimate, CounterTiktoken:
		return nil
	}
	return fmt.Errorf("tokenize: unknown counter %q (want %q or %q)", name, CounterEstimate, CounterTiktoken)
}

// New returns the counter called name for the newest Pi: NewFor with pi.Latest.
func New(name, encoding string) (Counter, error) {
	return NewFor(name, encoding, pi.Latest)
}

// NewFor returns the counter called name: "estimate" (Pi r's rules; encoding ignored) or
// "tiktoken" with encoding "o200k_base" or "cl100k_base" ("" means o200k_base).
func NewFor(name, encoding string, r pi.Release) (Counter, error) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case CounterEstimate:
		return EstimateFor(r), nil
	case CounterTiktoken:
		if encoding == "" {
			encoding = O200KBase
		}
		return NewTiktoken(encoding)
	default:
		return nil, fmt.Errorf("tokenize: unknown counter %q (want %q or %q)", name, CounterEstimate, CounterTiktoken)
	}
}

// OverBudget is Pi's shouldCompact with compaction enabled: the context needs compacting
// when its tokens exceed the model's window minus the reserve kept free for the reply and
// the summary (strictly greater: a context exactly at the threshold still fits). A window
// of 0 (unknown to Pi) makes every non-negative context over budget, as in Pi.
func OverBudget(contextTokens, contextWindow, reserveTokens int) bool {
	return contextTokens > contextWindow-reserveTokens
}
