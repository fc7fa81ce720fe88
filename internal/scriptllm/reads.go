package scriptllm

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Reads is a script for read-heavy workloads, sized in tokens: prompt n makes the agent read
// the files of Files(n) (written into the workspace beforehand) in one turn, all at once,
// then answer in a few lines. The tool output a turn adds is what the sizes say, so a
// workload is "about 10k tokens of tool output a turn" or "mostly 1k, sometimes 30k", as the
// zero-wait matrix of the e2e suite asks (e2e/matrix_test.go). Everything is derived from
// Seed and n.
//
// Pi's read tool returns at most 2,000 lines or 50 KB of a file: a size above MaxReadChars
// is split into several files read in the same turn.
type Reads struct {
	Seed uint64
	// Chars gives the characters of tool output prompt n reads (about 4 per token).
	Chars func(n int) int
}

// MaxReadChars is the largest file a Reads prompt reads whole with Pi's read tool (under
// its 50 KB and 2,000-line limits: ASCII lines of about 90 characters).
const MaxReadChars = 40_000

var readsPrompt = regexp.MustCompile(`^Read task (\d+):`)

// Prompt is the n-th prompt (from 1).
func (w Reads) Prompt(n int) string {
	return fmt.Sprintf("Read task %03d: read the files under reads/%03d/ and sum up what they say.", n, n)
}

// Files is what prompt n reads: workspace-relative path to content.
func (w Reads) Files(n int) map[string]string {
	total := w.Chars(n)
	out := map[string]string{}
	for i := 0; total > 0; i++ {
		size := min(total, MaxReadChars)
		total -= size
		out[w.path(n, i)] = w.text(n, i, size)
	}
	return out
}

func (w Reads) path(n, i int) string { return fmt.Sprintf("reads/%03d/part-%d.md", n, i) }

// text is size characters of ASCII lines of about 90 characters (the last line padded to size).
func (w Reads) text(n, i, size int) string {
	r := Workload{Seed: w.Seed}.rng("reads", strconv.Itoa(n), strconv.Itoa(i))
	var sb strings.Builder
	for line := 1; sb.Len() < size; line++ {
		fmt.Fprintf(&sb, "%03d.%d.%04d ", n, i, line)
		for k := 0; k < 9; k++ {
			sb.WriteString(asciiWords[r.IntN(len(asciiWords))])
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "(%d ms, %d retries)\n", r.IntN(5000), r.IntN(7))
	}
	s := sb.String()[:size]
	return s[:len(s)-1] + "\n"
}

var asciiWords = []string{"parser", "session", "leaf", "entry", "token", "budget", "cut", "summary", "lease",
	"retry", "worker", "stream", "cache", "path", "branch", "append", "fsync", "offset", "tool", "result",
	"call", "context", "window", "reserve", "policy", "sweep", "queue", "consumer", "subject", "header"}

// Next implements Script: the reads in the prompt's first turn, then the answer. A request
// whose prompt is not one of these (after a compaction that summarized the prompt, the
// last user message is the summary) is answered with text: the reads are done by then.
func (w Reads) Next(r *Request) Turn {
	m := readsPrompt.FindStringSubmatch(r.Prompt())
	if m == nil || r.Step() > 0 {
		return Turn{Text: w.answer(r.Prompt())}
	}
	n, _ := strconv.Atoi(m[1])
	var calls []Call
	for i := range (w.Chars(n) + MaxReadChars - 1) / MaxReadChars {
		calls = append(calls, Read(w.path(n, i)))
	}
	return Turn{Text: fmt.Sprintf("Reading %d file(s) for task %03d.", len(calls), n), ToolCalls: calls}
}

func (w Reads) answer(prompt string) string {
	first, _, _ := strings.Cut(prompt, "\n")
	if len(first) > 60 {
		first = first[:60]
	}
	return "Done: " + first + ". The parser keeps the cache when the lease is idle; next I would add a test."
}
