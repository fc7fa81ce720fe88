package scriptllm

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// Turn is one answer of the scripted model to an agent request: text, tool calls, or
// both (text first, as models stream it).
type Turn struct {
	Text      string `json:"text,omitempty"`
	ToolCalls []Call `json:"toolCalls,omitempty"`
	// Delay holds the answer back (on top of the server's agent delay).
	Delay time.Duration `json:"delay,omitempty"`
}

// Call is a tool call the model makes. ID may be empty: the server then derives a
// deterministic one from the request.
type Call struct {
	ID   string `json:"id,omitempty"`
	Name string `json:"name"`
	Args any    `json:"args"`
}

// Bash is a call of Pi's built-in bash tool.
func Bash(command string) Call { return Call{Name: "bash", Args: map[string]any{"command": command}} }

// Read is a call of Pi's built-in read tool.
func Read(path string) Call { return Call{Name: "read", Args: map[string]any{"path": path}} }

// Script decides the agent's next turn from the request it answers. Implementations
// must be safe for concurrent use and should be deterministic: the same request gets the
// same turn, so a run can be repeated.
type Script interface {
	Next(r *Request) Turn
}

// ScriptFunc adapts a function to Script.
type ScriptFunc func(r *Request) Turn

// Next calls f.
func (f ScriptFunc) Next(r *Request) Turn { return f(r) }

// Plan is a script keyed by prompt: the turns registered for a prompt's text are played
// one per model call of that prompt (Request.Step), and once they are used up the model
// answers with a short final text. Prompts without turns go to Fallback. Because the
// position comes from the request itself (not from a counter in the server), the script
// still answers correctly after a compaction or a reload changed what the client sends.
type Plan struct {
	// Fallback answers prompts that were not added (nil: a short final text).
	Fallback Script

	mu    sync.Mutex
	turns map[string][]Turn
}

// NewPlan returns an empty plan with a fallback (nil allowed).
func NewPlan(fallback Script) *Plan {
	return &Plan{Fallback: fallback, turns: map[string][]Turn{}}
}

// Add registers the turns for prompt (replacing earlier ones).
func (p *Plan) Add(prompt string, turns ...Turn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.turns[prompt] = turns
}

// Next implements Script.
func (p *Plan) Next(r *Request) Turn {
	prompt := r.Prompt()
	p.mu.Lock()
	turns, ok := p.turns[prompt]
	p.mu.Unlock()
	switch {
	case ok && r.Step() < len(turns):
		return turns[r.Step()]
	case ok || p.Fallback == nil:
		return Turn{Text: FinalText(prompt)}
	default:
		return p.Fallback.Next(r)
	}
}

// FinalText is the answer that ends a prompt's work when the script has nothing more.
func FinalText(prompt string) string {
	first, _, _ := strings.Cut(prompt, "\n")
	return "Done: " + first
}

// Workload is a script that works on any prompt like a coding agent exploring a
// repository: it writes a file of generated notes into the workspace with bash, reads it
// back with read (together with a bash listing, two calls in one turn), sometimes greps
// it, and ends with a text answer. Everything is derived from Seed and the prompt text,
// so a run is reproducible and the outputs are large (Lines lines of about 90
// characters, some non-ASCII), which makes a session grow by about 2,300 tokens per prompt
// at the default size (24 prompts: about 55k tokens).
type Workload struct {
	Seed  uint64
	Lines int // lines per generated file (default DefaultLines)
}

// DefaultLines is the notes file size of a Workload that does not set Lines.
const DefaultLines = 28

// Prompt is the n-th prompt (from 1) of a workload run: distinct, deterministic text.
func (w Workload) Prompt(n int) string {
	topics := []string{"the session reader", "token counting", "cut points", "the summary prompt",
		"the job queue", "leases", "retries", "the event stream", "sweeps", "branch summaries",
		"file lists", "the CLI", "metrics", "the extractive summarizer", "unicode handling", "the config loader"}
	r := w.rng("prompt", fmt.Sprint(n))
	return fmt.Sprintf("Task %02d: look into %s and write down what you find (notes #%d).",
		n, topics[r.IntN(len(topics))], r.IntN(900)+100)
}

// Next implements Script.
func (w Workload) Next(r *Request) Turn {
	prompt := r.Prompt()
	h := hashHex(w.Seed, prompt)
	file := "work/notes-" + h[:8] + ".md"
	rnd := w.rng("plan", prompt)
	grep := rnd.IntN(2) == 0 // a third round of tools for about half the prompts
	switch step := r.Step(); {
	case step == 0:
		return Turn{
			Text: "I'll start by writing my notes to " + file + ".",
			ToolCalls: []Call{Bash("mkdir -p work && cat > " + file + " <<'NOTES_EOF'\n" + w.notes(prompt) +
				"NOTES_EOF\nwc -l -c " + file + " && sed -n '1,12p' " + file)},
		}
	case step == 1:
		return Turn{ToolCalls: []Call{Read(file), Bash("ls -la work | tail -n 25; echo; grep -c 'retry' " + file + " || true")}}
	case step == 2 && grep:
		return Turn{ToolCalls: []Call{Bash("grep -n -i -E 'cache|lease|résumé|日本' " + file + " | head -n 30; tr 'a-z' 'A-Z' < " + file + " | head -n 8")}}
	default:
		return Turn{Text: w.answer(prompt, file)}
	}
}

var words = []string{"parser", "session", "leaf", "entry", "token", "budget", "cut", "summary", "lease",
	"retry", "worker", "stream", "cache", "path", "branch", "append", "fsync", "offset", "résumé",
	"naïve", "日本語", "Ünïcode", "emoji🙂", "tool", "result", "call", "context", "window", "reserve",
	"policy", "sweep", "queue", "consumer", "subject", "header", "line", "byte", "counter"}

// notes is the generated file for a prompt: Lines lines of pseudo-random words.
func (w Workload) notes(prompt string) string {
	lines := w.Lines
	if lines <= 0 {
		lines = DefaultLines
	}
	r := w.rng("notes", prompt)
	var sb strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&sb, "- [%03d] ", i)
		for n := 0; n < 9; n++ {
			sb.WriteString(words[r.IntN(len(words))])
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "(%d ms, %d retries)\n", r.IntN(5000), r.IntN(7))
	}
	return sb.String()
}

func (w Workload) answer(prompt, file string) string {
	r := w.rng("answer", prompt)
	var sb strings.Builder
	fmt.Fprintf(&sb, "Finished. My notes are in %s. ", file)
	for i := 0; i < 3; i++ {
		fmt.Fprintf(&sb, "The %s %s the %s when the %s is %s. ", words[r.IntN(len(words))], []string{"checks", "keeps", "moves", "counts"}[r.IntN(4)],
			words[r.IntN(len(words))], words[r.IntN(len(words))], []string{"full", "stale", "busy", "idle"}[r.IntN(4)])
	}
	sb.WriteString("Next I would add a test for it.")
	return sb.String()
}

func (w Workload) rng(parts ...string) *rand.Rand {
	sum := sha256.Sum256([]byte(fmt.Sprint(w.Seed, "\x00", strings.Join(parts, "\x00"))))
	return rand.New(rand.NewPCG(binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16])))
}

func hashHex(seed uint64, parts ...string) string {
	sum := sha256.Sum256([]byte(fmt.Sprint(seed, "\x00", strings.Join(parts, "\x00"))))
	return hex.EncodeToString(sum[:])
}

// SummaryText is the default answer to a summarization request: Pi's section headings
// with a line that identifies the request (a digest of its messages), so a test can tell
// two summaries apart and find the one that was written. It depends only on the
// messages, never on timing.
func SummaryText(r *Request) string {
	b, _ := json.Marshal(r.Messages)
	sum := sha256.Sum256(b)
	id := hex.EncodeToString(sum[:6])
	return fmt.Sprintf(`## Goal
Scripted summary %s of %d messages (%d prompt tokens).

## Constraints & Preferences
- (none)

## Progress
### Done
- [x] Work summarized by the scripted model (%s).

### In Progress
- [ ] Continue with the next task.

### Blocked
- (none)

## Key Decisions
- **Scripted**: the summary is deterministic.

## Next Steps
1. Continue.

## Critical Context
- digest %s`, id, len(r.Messages), r.PromptTokens, id, id)
}
