//go:build e2e

package e2e

// Which spans of a session a model has read, in the summary the agent continues from
// (extract now, model later: docs/live-agents.md). Measured from outside compactor, on what the
// scripted model received and answered: every summary it writes names itself ("Scripted
// summary <digest>", a digest of its request), and every summary request holds the
// conversation the model reads (<conversation>) and the previous summary it builds on
// (<previous-summary>). A prompt of the Reads workload ("Read task NNN: ...") was read by a
// model in a summary text when one of the model's summaries named in that text read it in
// its conversation, or built on a text where that holds, and so on back. An extract names
// the model's summary it was built on (it carries the previous summary's items), never one
// of its own: the spans it only extracted are not read by a model, as they were not.

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/internal/scriptllm"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
)

var (
	scriptedDigestRe = regexp.MustCompile(`Scripted summary ([0-9a-f]{12})`)
	readTaskRe       = regexp.MustCompile(`Read task (\d+):`)
)

// provenance knows, for each summary the scripted model wrote, which prompts it read.
type provenance struct {
	byDigest map[string]*scriptllm.Request
	memo     map[string]map[int]bool
	produced map[string]time.Time // when the summary was answered
}

func newProvenance(reqs []scriptllm.Request) *provenance {
	p := &provenance{byDigest: map[string]*scriptllm.Request{}, memo: map[string]map[int]bool{}, produced: map[string]time.Time{}}
	for i := range reqs {
		r := &reqs[i]
		if r.Kind != scriptllm.KindSummary || !r.Completed || r.Reply == nil {
			continue
		}
		if m := scriptedDigestRe.FindStringSubmatch(r.Reply.Text); m != nil {
			p.byDigest[m[1]] = r
			p.produced[m[1]] = r.AnsweredAt
		}
	}
	return p
}

// tasks are the prompts a text names as read tasks.
func tasks(text string) map[int]bool {
	out := map[int]bool{}
	for _, m := range readTaskRe.FindAllStringSubmatch(text, -1) {
		n, _ := strconv.Atoi(m[1])
		out[n] = true
	}
	return out
}

// between is the text between open and close in s ("" when absent).
func between(s, open, close string) string {
	_, rest, ok := strings.Cut(s, open)
	if !ok {
		return ""
	}
	in, _, _ := strings.Cut(rest, close)
	return in
}

// conversationOf is the conversation a summary request gives the model to read: inside
// <conversation> tags, or (Pi 1.x's turn-prefix request) under "# Conversation".
func conversationOf(prompt string) string {
	if c := between(prompt, "<conversation>", "</conversation>"); c != "" {
		return c
	}
	return between(prompt, "# Conversation\n", "\n# Instructions\n")
}

// readBy is what the summary with digest d read, its own conversation and what the texts it
// built on read (nil when d is not a summary the model wrote).
func (p *provenance) readBy(d string) map[int]bool {
	if got, ok := p.memo[d]; ok {
		return got
	}
	r := p.byDigest[d]
	if r == nil {
		return nil
	}
	p.memo[d] = map[int]bool{} // a cycle reads nothing more
	prompt := ""
	if len(r.Messages) > 0 {
		prompt = r.Messages[len(r.Messages)-1].Content
	}
	out := tasks(conversationOf(prompt))
	for n := range p.read(between(prompt, "<previous-summary>", "</previous-summary>")) {
		out[n] = true
	}
	p.memo[d] = out
	return out
}

// read is what a model read of the prompts a summary text covers: what every model summary
// the text names read.
func (p *provenance) read(text string) map[int]bool {
	out := map[int]bool{}
	for _, m := range scriptedDigestRe.FindAllStringSubmatch(text, -1) {
		for n := range p.readBy(m[1]) {
			out[n] = true
		}
	}
	return out
}

// landed is when a model's summary that read every one of want was first answered (zero:
// never).
func (p *provenance) landed(want []int) time.Time {
	var first time.Time
	for d, at := range p.produced {
		got := p.readBy(d)
		if len(want) == 0 || !allIn(want, got) {
			continue
		}
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return first
}

func allIn(want []int, got map[int]bool) bool {
	for _, n := range want {
		if !got[n] {
			return false
		}
	}
	return true
}

// compactionSpan is one compaction of the session's path: the prompts its span holds and
// its summary.
type compactionSpanTasks struct {
	ID      string
	Tasks   []int
	Summary string
}

// spansOf reads the compactions on the path of the session file and the prompts each span
// holds (as Pi summarized it, under the Pi release of the run).
func spansOf(t *testing.T, file string) []compactionSpanTasks {
	t.Helper()
	s, err := sessionio.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	path, err := s.Path("")
	if err != nil {
		t.Fatal(err)
	}
	d, err := pi.ParseRelease(piVersion)
	if err != nil {
		t.Fatal(err)
	}
	var out []compactionSpanTasks
	for i, e := range path {
		if e.Type != sessionio.TypeCompaction {
			continue
		}
		sp, err := cutpoint.SpanAt(path[:i], d, e.FirstKeptEntryID)
		if err != nil {
			t.Fatalf("compaction %s: %v", e.ID, err)
		}
		var ts []int
		for _, m := range sp.Messages {
			if m.Role != sessionio.RoleUser {
				continue
			}
			text := m.Content.Text
			for _, b := range m.Content.Blocks {
				text += "\n" + b.Text
			}
			for n := range tasks(text) {
				ts = append(ts, n)
			}
		}
		slices.Sort(ts)
		out = append(out, compactionSpanTasks{ID: e.ID, Tasks: slices.Compact(ts), Summary: e.Summary})
	}
	return out
}

// coverage is what the summaries the agent continued from hold of the spans before them.
type coverage struct {
	// OwnShare is, per compaction, the share of its own span's prompts a model read.
	OwnShare []float64
	// Pairs count (earlier span, later compaction) pairs: Landed those whose span a model's
	// summary had read before the later compaction started (the summary had time to land),
	// OlderL and Older2L those whose span had ended one (two) summary latencies before it;
	// the Covered counts are the pairs whose later summary holds a model's reading of
	// every prompt of the span.
	Landed, LandedCovered   int
	OlderL, OlderLCovered   int
	Older2L, Older2LCovered int
	Pairs, PairsCovered     int
	// Missed lists the landed pairs not covered (for the report); MissedOlder the pairs older
	// than one latency not covered, with when the span's model summary was answered.
	Missed, MissedOlder []string
}

func pct(n, of int) string {
	if of == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f%% (%d/%d)", 100*float64(n)/float64(of), n, of)
}

// String is the figures in one line.
func (c coverage) String() string {
	mean := 0.0
	for _, s := range c.OwnShare {
		mean += s
	}
	if len(c.OwnShare) > 0 {
		mean /= float64(len(c.OwnShare))
	}
	return fmt.Sprintf("own span read by a model %.0f%% (mean over %d); earlier spans covered: landed %s, older than 1 latency %s, than 2 %s, all %s",
		100*mean, len(c.OwnShare), pct(c.LandedCovered, c.Landed), pct(c.OlderLCovered, c.OlderL), pct(c.Older2LCovered, c.Older2L), pct(c.PairsCovered, c.Pairs))
}

// coverageOf measures a run: its compactions (in order, with their times) against the
// session file and every request the scripted model received.
func coverageOf(t *testing.T, e *Env, comps []AutoCompaction, spans []compactionSpan, latency time.Duration) coverage {
	t.Helper()
	p := newProvenance(e.LLM.Requests())
	cs := spansOf(t, e.SessionFile())
	byID := map[string]int{}
	for i, c := range cs {
		byID[c.ID] = i
	}
	var c coverage
	for m, comp := range comps {
		k, ok := byID[comp.Entry.ID]
		if !ok || m >= len(spans) {
			continue
		}
		read := p.read(cs[k].Summary)
		own := 0
		for _, n := range cs[k].Tasks {
			if read[n] {
				own++
			}
		}
		if len(cs[k].Tasks) > 0 {
			c.OwnShare = append(c.OwnShare, float64(own)/float64(len(cs[k].Tasks)))
		}
		for n := range m {
			j, ok := byID[comps[n].Entry.ID]
			if !ok || j >= k || len(cs[j].Tasks) == 0 || n >= len(spans) {
				continue
			}
			covered := allIn(cs[j].Tasks, read)
			age := spans[m].Start.Sub(spans[n].End)
			count := func(total, cov *int) {
				*total++
				if covered {
					*cov++
				}
			}
			count(&c.Pairs, &c.PairsCovered)
			if age >= latency {
				count(&c.OlderL, &c.OlderLCovered)
				if !covered {
					landed := "not answered"
					if at := p.landed(cs[j].Tasks); !at.IsZero() {
						landed = fmt.Sprintf("answered %s after compaction %d's end", at.Sub(spans[n].End).Round(time.Millisecond), n+1)
					}
					c.MissedOlder = append(c.MissedOlder, fmt.Sprintf("span of compaction %d (prompts %v), %s before compaction %d, its model summary %s",
						n+1, cs[j].Tasks, age.Round(time.Millisecond), m+1, landed))
				}
			}
			if age >= 2*latency {
				count(&c.Older2L, &c.Older2LCovered)
			}
			if at := p.landed(cs[j].Tasks); !at.IsZero() && at.Before(spans[m].Start) {
				count(&c.Landed, &c.LandedCovered)
				if !covered {
					c.Missed = append(c.Missed, fmt.Sprintf("span of compaction %d (prompts %v) landed %s before compaction %d, not in its summary",
						n+1, cs[j].Tasks, spans[m].Start.Sub(at).Round(time.Millisecond), m+1))
				}
			}
		}
	}
	return c
}

// spanShare reads "span N tokens: M model, E extract" from the extension's debug line.
var spanShareRe = regexp.MustCompile(`; span (\d+) tokens: (\d+) model, (\d+) extract`)

func spanShare(line string) (model, extract int, ok bool) {
	m := spanShareRe.FindStringSubmatch(line)
	if m == nil {
		return 0, 0, false
	}
	model, _ = strconv.Atoi(m[2])
	extract, _ = strconv.Atoi(m[3])
	return model, extract, true
}

// TestProvenance pins the measure on hand-made requests: a model's summary reads its
// conversation and what its previous summary's model summaries read; an extract that carries
// a model's summary reads what that one read, and nothing of its own notes.
func TestProvenance(t *testing.T) {
	at := time.Unix(1000, 0)
	req := func(seq int, conversation, previous string) scriptllm.Request {
		prompt := "<conversation>\n" + conversation + "\n</conversation>\n\n"
		if previous != "" {
			prompt += "<previous-summary>\n" + previous + "\n</previous-summary>\n\n"
		}
		r := scriptllm.Request{Seq: seq, Kind: scriptllm.KindSummary, Completed: true, AnsweredAt: at.Add(time.Duration(seq) * time.Second),
			Messages: []scriptllm.Message{{Role: "system", Content: "sys"}, {Role: "user", Content: prompt}}}
		r.Reply = &scriptllm.Turn{Text: scriptllm.SummaryText(&r)}
		return r
	}
	r1 := req(1, "[User]: Read task 001: read\n[User]: Read task 002: read", "")
	extract := r1.Reply.Text + "\n- Read task 003: read the files (an extract's note)"
	r2 := req(2, "[User]: Read task 004: read", extract)
	p := newProvenance([]scriptllm.Request{r1, r2})
	if got := p.read(r1.Reply.Text); !maps(got, 1, 2) {
		t.Fatalf("the first summary read %v", got)
	}
	if got := p.read(extract); !maps(got, 1, 2) {
		t.Fatalf("the extract read %v, want only what its model summary read", got)
	}
	if got := p.read(r2.Reply.Text); !maps(got, 1, 2, 4) {
		t.Fatalf("the second summary read %v", got)
	}
	if got := p.landed([]int{1, 2}); !got.Equal(r1.AnsweredAt) {
		t.Fatalf("span 1-2 landed %v", got)
	}
	if got := p.landed([]int{3}); !got.IsZero() {
		t.Fatalf("the extracted prompt landed %v", got)
	}
	prefix := scriptllm.Request{Seq: 3, Kind: scriptllm.KindSummary, Completed: true, AnsweredAt: at.Add(3 * time.Second),
		Messages: []scriptllm.Message{{Role: "system", Content: "sys"}, {Role: "user", Content: "# Conversation\n[User]: Read task 005: read\n\n# Instructions\nSummarize the prefix."}}}
	prefix.Reply = &scriptllm.Turn{Text: scriptllm.SummaryText(&prefix)}
	split := r2.Reply.Text + "\n\n---\n\n**Turn Context (split turn):**\n\n" + prefix.Reply.Text
	if got := newProvenance([]scriptllm.Request{r1, r2, prefix}).read(split); !maps(got, 1, 2, 4, 5) {
		t.Fatalf("a split turn's summary (Pi 1.x's prefix request) read %v", got)
	}
	if m, x, ok := spanShare("hit (...) [extract/not-ready, threshold; base model; span 1200 tokens: 200 model, 1000 extract] in 3.1 ms"); !ok || m != 200 || x != 1000 {
		t.Fatalf("span share %d %d %v", m, x, ok)
	}
}

func maps(got map[int]bool, want ...int) bool {
	if len(got) != len(want) {
		return false
	}
	for _, n := range want {
		if !got[n] {
			return false
		}
	}
	return true
}

// summaryRequestsFigure lists the run's summary requests: when, whose (Pi's are streamed),
// their size, and which prompts they read in their conversation and through the summaries
// they built on.
func summaryRequestsFigure(reqs []scriptllm.Request, start time.Time) []string {
	p := newProvenance(reqs)
	var out []string
	for i := range reqs {
		r := &reqs[i]
		if r.Kind != scriptllm.KindSummary || len(r.Messages) == 0 {
			continue
		}
		who := "compactor"
		if r.Stream {
			who = "Pi"
		}
		prompt := r.Messages[len(r.Messages)-1].Content
		conv := sortedKeys(tasks(conversationOf(prompt)))
		prev := sortedKeys(p.read(between(prompt, "<previous-summary>", "</previous-summary>")))
		out = append(out, fmt.Sprintf("+%s %s %d tokens (%d cached): reads %v, on a summary that read %v", r.Time.Sub(start).Round(10*time.Millisecond), who, r.PromptTokens, r.CachedTokens, conv, prev))
	}
	return out
}

func sortedKeys(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
