//go:build e2e

package e2e

// The zero-wait workload matrix (docs/live-agents.md "The workload matrix"): windows of 20k, 128k and 200k tokens
// with summary latencies that grow with them (5, 30 and 60 s); tool outputs of about 1k, 10k
// and 30k tokens a turn, and bursty (mostly 1k, sometimes 30k); agent turns fast (1 s) and
// slow (10 s). Time is scaled down where a cell would take too long: the summary latency and
// the agent's turns by the same factor, so that what decides readiness (the time between two
// compactions over the summary's latency) stays. Each cell runs the same script twice, Pi
// alone and Pi with extensions/pi and `compactor run`, and reports per cell: the cycle over
// the latency, compactions, how many came from a preparation, from the extract, or from Pi's
// own summary, the agent's blocked time (median and maximum; over the prepared ones too),
// summary requests and their input tokens, and the modelled cost against Pi alone.
//
//   make e2e-matrix                         # every cell, Pi 1.6.0 (PI_VERSION=0.73.1: that Pi)
//   make e2e-matrix E2E_RUN=TestZeroWaitMatrix/200k-30k-fast

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/scriptllm"
)

// matrixCell is one workload of the matrix.
type matrixCell struct {
	name                  string
	window, reserve, keep int
	realSummary, realTurn time.Duration // the latency and turn the cell stands for
	scale                 int           // both are divided by it in the run
	chars                 func(n int) int
	prompts               int
	outputs, turns        string // for the table
}

const (
	k1  = 4_000   // characters of tool output for about 1k tokens
	k10 = 40_000  // about 10k
	k30 = 120_000 // about 30k (three files: Pi's read tool returns at most 50 KB of one)
)

func constant(chars int) func(int) int { return func(int) int { return chars } }

// bursty is mostly 1k-token reads and, about one prompt in eight, a 30k-token one.
func bursty(seed uint64) func(int) int {
	return func(n int) int {
		if (uint64(n)*0x9e3779b97f4a7c15+seed)%8 == 3 {
			return k30
		}
		return k1
	}
}

// matrixCells are the cells: every value of every axis at least once, the hardest
// combinations (a 200k window filled by 30k reads at a fast pace against 60 s summaries)
// among them.
func matrixCells() []matrixCell {
	return []matrixCell{
		{name: "20k-1k-fast", window: 20_000, reserve: 4_096, keep: 4_000, realSummary: 5 * time.Second, realTurn: time.Second, scale: 1,
			chars: constant(k1), prompts: 52, outputs: "1k", turns: "fast"},
		{name: "128k-10k-fast", window: 128_000, reserve: 16_384, keep: 20_000, realSummary: 30 * time.Second, realTurn: time.Second, scale: 5,
			chars: constant(k10), prompts: 48, outputs: "10k", turns: "fast"},
		{name: "128k-10k-slow", window: 128_000, reserve: 16_384, keep: 20_000, realSummary: 30 * time.Second, realTurn: 10 * time.Second, scale: 5,
			chars: constant(k10), prompts: 48, outputs: "10k", turns: "slow"},
		{name: "200k-30k-fast", window: 200_000, reserve: 16_384, keep: 20_000, realSummary: 60 * time.Second, realTurn: time.Second, scale: 5,
			chars: constant(k30), prompts: 28, outputs: "30k", turns: "fast"},
		{name: "200k-30k-slow", window: 200_000, reserve: 16_384, keep: 20_000, realSummary: 60 * time.Second, realTurn: 10 * time.Second, scale: 5,
			chars: constant(k30), prompts: 28, outputs: "30k", turns: "slow"},
		{name: "200k-bursty-fast", window: 200_000, reserve: 16_384, keep: 20_000, realSummary: 60 * time.Second, realTurn: time.Second, scale: 5,
			chars: bursty(1), prompts: 118, outputs: "bursty", turns: "fast"},
		{name: "200k-bursty-slow", window: 200_000, reserve: 16_384, keep: 20_000, realSummary: 60 * time.Second, realTurn: 10 * time.Second, scale: 10,
			chars: bursty(1), prompts: 118, outputs: "bursty", turns: "slow"},
	}
}

func (c matrixCell) config() Config {
	summary := c.realSummary / time.Duration(c.scale)
	return Config{
		ContextWindow: c.window, MaxTokens: 4096, AgentDelay: c.realTurn / time.Duration(c.scale), SummaryDelay: &summary,
		Compaction: Compaction{Enabled: true, ReserveTokens: c.reserve, KeepRecentTokens: c.keep},
		Reads:      &scriptllm.Reads{Seed: 1, Chars: c.chars}, Prompts: c.prompts + 1,
	}
}

// cellRun is one run of a cell: its economics and what each compaction was.
type cellRun struct {
	Economics
	// Prepared, Extract and Own count the compactions by what answered Pi's hook (a
	// preparation, the extract, nothing: Pi's own summary).
	Prepared, Extract, Own int
	// Blocked is every compaction's blocked time; BlockedPrepared the prepared ones'.
	Blocked, BlockedPrepared []time.Duration
	// Cycles are the times from the end of one compaction to the start of the next.
	Cycles []time.Duration
	// PiCallsPrepared counts Pi's own summary requests during the prepared compactions.
	PiCallsPrepared int
	Reasons         map[string]int
	Metrics         []string
	Wall            time.Duration
	// SpanModel and SpanExtract sum, over the compactions, the tokens of the summarized
	// spans a model read and those only extracted (the hook's debug line; Pi's own summary is
	// a model's); Shares is each compaction's model share.
	SpanModel, SpanExtract int
	Shares                 []string
	// Coverage is what the summaries the agent continued from hold of the spans before them,
	// measured on the scripted model's requests (coverage_test.go).
	Coverage coverage
	// reqs and comps are the run's model requests and compactions, for economics up to a
	// given compaction (through).
	reqs  []scriptllm.Request
	comps []AutoCompaction
}

// through is the run's economics up to the end of its n-th compaction: the same work in both
// runs of a cell when n is the smaller number of compactions (a run ends in the middle of a
// cycle, and what either run spent on that cycle's compaction is not comparable).
func (r cellRun) through(n int) Economics {
	if n <= 0 || n > len(r.comps) {
		return r.Economics
	}
	// The agent's requests before the n-th compaction started (Pi sends none while it
	// compacts), the summary requests up to its end: an agent request sent right as the
	// compaction ended is on either side of the event's time as the test received it
	// (another pipe), and one 4k-token request moved the 20k-1k-fast cell's ratio by 0.02.
	end := r.comps[n-1].End
	start := end.Add(-r.comps[n-1].Blocked)
	var reqs []scriptllm.Request
	for _, q := range r.reqs {
		if q.Kind == scriptllm.KindAgent && q.Time.Before(start) || q.Kind != scriptllm.KindAgent && !q.Time.After(end) {
			reqs = append(reqs, q)
		}
	}
	return economicsOf(r.Name, reqs, r.comps[:n])
}

// runCell runs a workload (prompts of cfg's script) with Pi alone or with the extension and
// compactor, and returns what each compaction was.
func runCell(t *testing.T, cfg Config, prompts int, with bool) cellRun {
	start := time.Now()
	name := "pi-alone"
	var svc *Proc
	if with {
		name = "with-extension"
		url := StartNATS(t)
		cfg = withExtension(cfg, url)
		// A preparation is taken to take the summaries' latency until one was measured.
		latency := scriptllm.DefaultSummaryDelay
		if cfg.SummaryDelay != nil {
			latency = *cfg.SummaryDelay
		}
		cfg.PiEnv = append(cfg.PiEnv, fmt.Sprintf("COMPACTOR_PREPARE_LATENCY_MS=%d", latency.Milliseconds()))
		keep := fmt.Sprint(cfg.Compaction.KeepRecentTokens)
		args := []string{"--metrics-addr", "127.0.0.1:0", "--keep-recent-tokens", keep, "--counter", "estimate"}
		if os.Getenv("E2E_REWRITE_EXTRACTS") == "off" {
			args = append(args, "--rewrite-extracts=false") // the extract alone, without the base
		}
		cfg.beforePi = func(env *Env) { svc = env.StartService(url, args...) }
	}
	e, comps := RunAutoCompactions(t, cfg, prompts)
	if len(comps) < 2 {
		t.Fatalf("%d automatic compactions over %d prompts, want at least 2", len(comps), prompts)
	}
	spans := compactionSpans(e)
	if len(spans) < len(comps) {
		t.Fatalf("%d compaction spans in Pi's events, %d compactions", len(spans), len(comps))
	}
	spans = spans[:len(comps)]
	r := cellRun{Economics: economicsOf(name, e.LLM.Requests(), comps), Reasons: map[string]int{}, reqs: e.LLM.Requests(), comps: comps}
	hooks := hookLines(e)
	for i, comp := range comps {
		r.Blocked = append(r.Blocked, comp.Blocked)
		if i > 0 {
			r.Cycles = append(r.Cycles, spans[i].Start.Sub(spans[i-1].End))
		}
		if !with {
			r.Own++
			continue
		}
		if i >= len(hooks) {
			t.Fatalf("%d hook lines for %d compactions", len(hooks), len(comps))
		}
		result, reason := hookResult(hooks[i])
		r.Reasons[result+"/"+reason]++
		if m, x, ok := spanShare(hooks[i]); ok {
			r.SpanModel += m
			r.SpanExtract += x
			r.Shares = append(r.Shares, fmt.Sprintf("%.0f%%", 100*float64(m)/float64(max(m+x, 1))))
		} else {
			r.Shares = append(r.Shares, "?")
		}
		calls := piSummaryCalls(e, spans[i].Start, spans[i].End)
		switch {
		case result == "prepared" && fromHook(comp.Entry):
			r.Prepared++
			r.BlockedPrepared = append(r.BlockedPrepared, comp.Blocked)
			r.PiCallsPrepared += calls
		case result == "extract" && fromHook(comp.Entry):
			r.Extract++
		default:
			r.Own++
		}
		figure(t, name+".compaction", fmt.Sprintf("after prompt %d: %s, blocked %s, %d summary calls by Pi; %s",
			comp.Prompt, result+"/"+reason, comp.Blocked.Round(100*time.Microsecond), calls, hooks[i]))
	}
	noErrorsShown(t, e)
	latency := scriptllm.DefaultSummaryDelay
	if cfg.SummaryDelay != nil {
		latency = *cfg.SummaryDelay
	}
	r.Coverage = coverageOf(t, e, comps, spans, latency)
	for _, l := range summaryRequestsFigure(e.LLM.Requests(), start) {
		figure(t, name+".summary_request", l)
	}
	figure(t, name+".coverage", r.Coverage.String())
	for _, miss := range r.Coverage.Missed {
		figure(t, name+".coverage.missed", miss)
	}
	for _, miss := range r.Coverage.MissedOlder {
		figure(t, name+".coverage.missed-older", miss)
	}
	keepSession(t, e, name)
	if svc != nil {
		for _, m := range []string{"compactor_prepared_hook_total", "compactor_bridges_total", "compactor_llm_input_tokens_total", "compactor_llm_cached_input_tokens_total",
			"compactor_summary_span_tokens_total", "compactor_summary_base_total", "compactor_jobs_total"} {
			r.Metrics = append(r.Metrics, scrapeMetric(t, svc, m)...)
		}
		// Every hook the extension reported is counted by the service, by what answered it.
		counted := 0
		for _, l := range r.Metrics {
			var n int
			if strings.HasPrefix(l, "compactor_prepared_hook_total{") {
				if _, err := fmt.Sscanf(l[strings.LastIndexByte(l, ' ')+1:], "%d", &n); err == nil {
					counted += n
				}
			}
		}
		if counted < len(comps) {
			t.Errorf("the service counted %d hooks for %d compactions: %v", counted, len(comps), r.Metrics)
		}
		svc.Stop()
	}
	r.Wall = time.Since(start)
	return r
}

// keepSession copies the run's session file to $E2E_KEEP_SESSIONS (for the recall probes of
// `compactor experiment --recorded --eval`, docs/quality.md) as <test>-<run>-pi<version>.jsonl.
func keepSession(t *testing.T, e *Env, run string) {
	dir := os.Getenv("E2E_KEEP_SESSIONS")
	if dir == "" {
		return
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + "-" + run + "-pi" + piVersion + ".jsonl"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), readFile(t, e.SessionFile()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// hookResult reads "[prepared/none, threshold; …]" from the extension's debug line.
func hookResult(line string) (result, reason string) {
	_, rest, ok := strings.Cut(line, " [")
	if !ok {
		return "?", "?"
	}
	word, _, _ := strings.Cut(rest, ",")
	result, reason, _ = strings.Cut(word, "/")
	return result, reason
}

func medianOr0(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return median(ds)
}

func maxOr0(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return slices.Max(ds)
}

// TestZeroWaitMatrix runs every cell (a subtest each) and prints the table of docs/live-agents.md "The workload matrix".
func TestZeroWaitMatrix(t *testing.T) {
	var rows []string
	for _, c := range matrixCells() {
		t.Run(c.name, func(t *testing.T) { rows = append(rows, runMatrixCell(t, c)) })
	}
	t.Logf("FIGURE %s table (Pi %s):\n%s\n%s", t.Name(), piVersion, matrixHeader, strings.Join(rows, "\n"))
}

// longRunPrompts is enough prompts of the matrix's fastest cell for at least 12 compactions.
const longRunPrompts = 86

// TestZeroWaitLongRun is the matrix's fastest cell (200k-30k-fast: a compaction every third
// of a summary's latency) over a session long enough for at least 12 compactions: the
// model's summaries of what the extracts answered keep up with the agent over a session
// (extract now, model later). Not in make e2e or the matrix: make e2e-matrix E2E_RUN=TestZeroWaitLongRun.
func TestZeroWaitLongRun(t *testing.T) {
	var c matrixCell
	for _, m := range matrixCells() {
		if m.name == "200k-30k-fast" {
			c = m
		}
	}
	c.name, c.prompts = c.name+"-long", longRunPrompts
	row := runMatrixCell(t, c)
	t.Logf("FIGURE %s table (Pi %s):\n%s\n%s", t.Name(), piVersion, matrixHeader, row)
}

// runMatrixCell runs a cell with Pi alone and with the extension, reports its figures, holds
// it to the bar (checkCell) and returns its row of the table.
func runMatrixCell(t *testing.T, c matrixCell) string {
	alone := runCell(t, c.config(), c.prompts, false)
	with := runCell(t, c.config(), c.prompts, true)
	latency := c.realSummary / time.Duration(c.scale)
	ratio := float64(medianOr0(with.Cycles)) / float64(latency)
	n := min(alone.Compactions, with.Compactions)
	aloneN, withN := alone.through(n), with.through(n)
	row := matrixRow(c.name, c.window, c.outputs+" "+c.turns, c.realSummary, c.realTurn, c.scale, ratio, alone, with, aloneN, withN)
	t.Logf("FIGURE %s row: %s", t.Name(), row)
	t.Logf("FIGURE %s economics (window %d, reserve %d, keep %d, %d prompts, summaries %s, turns %s), whole run:\n%s", t.Name(), c.window, c.reserve, c.keep, c.prompts,
		latency, c.realTurn/time.Duration(c.scale), economicsTable(alone.Economics, with.Economics))
	t.Logf("FIGURE %s economics through compaction %d:\n%s", t.Name(), n, economicsTable(aloneN, withN))
	figure(t, "reasons", with.Reasons)
	figure(t, "cycles", with.Cycles)
	figure(t, "metrics", strings.Join(with.Metrics, "; "))
	figure(t, "coverage", fmt.Sprintf("with the extension: %s; Pi alone: %s", with.Coverage, alone.Coverage))
	figure(t, "wall", fmt.Sprintf("Pi alone %s, with the extension %s", alone.Wall.Round(time.Second), with.Wall.Round(time.Second)))
	checkCell(t, ratio, alone, with, aloneN, withN)
	return row
}

// matrixRow is one cell's row of the table (matrixHeader).
func matrixRow(name string, window int, workload string, summary, turn time.Duration, scale int, ratio float64, alone, with cellRun, aloneN, withN Economics) string {
	share := "—"
	if with.SpanModel+with.SpanExtract > 0 {
		share = fmt.Sprintf("%.0f%% (%s)", 100*float64(with.SpanModel)/float64(with.SpanModel+with.SpanExtract), strings.Join(with.Shares, " "))
	}
	cv := with.Coverage
	return fmt.Sprintf("| %s | Pi %s | %dk, %s | %s / %s (1/%d) | %.1f | %d / %d | %d / %d / %d | %s / %s | %s / %s | %s / %s | %s | %s / %s / %s | %d / %d (%d) | %d / %d | %.0f / %.0f (%.2fx) | %.2fx | %.2fx |",
		name, piVersion, window/1000, workload, summary, turn, scale, ratio,
		alone.Compactions, with.Compactions, with.Prepared, with.Extract, with.Own,
		ms(medianOr0(alone.Blocked)), ms(maxOr0(alone.Blocked)), ms(medianOr0(with.Blocked)), ms(maxOr0(with.Blocked)),
		ms(medianOr0(with.BlockedPrepared)), ms(maxOr0(with.BlockedPrepared)),
		share, pct(cv.LandedCovered, cv.Landed), pct(cv.OlderLCovered, cv.OlderL), pct(cv.Older2LCovered, cv.Older2L),
		alone.SummaryRequests, with.InCycles, with.SummaryRequests, alone.SummaryInput, with.SummaryInput,
		aloneN.Cost(), withN.Cost(), withN.Cost()/aloneN.Cost(), withN.AnthropicCost()/aloneN.AnthropicCost(), with.Cost()/alone.Cost())
}

const matrixHeader = `| cell | Pi | window, outputs, turns | summary / turn (time scale) | cycle / latency | compactions alone / with | prepared / extract / Pi's own | blocked alone median / max | blocked with median / max | blocked prepared median / max | summarized span written by a model (each compaction) | earlier spans in a model's summary: landed before / older than 1 latency / 2 latencies | summary requests alone / with (incl. the unfinished cycle) | summary input alone / with | modelled cost alone / with, through the last compaction both reached | Anthropic-style | whole run |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|`

func ms(d time.Duration) string {
	if d >= time.Second {
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000)
}

// checkCell holds a cell to the zero-wait bar. In every cell: at most one compaction more than
// Pi alone, at most 2 summary requests per compaction (those made for the compactions of
// the run: a preparation for the cycle the run ends in is reported apart), a modelled cost
// no higher than Pi alone's through the last compaction both runs reached, and no
// compaction that blocks the agent longer than Pi alone's longest. Where the cycle is at
// least twice the summary's latency: at least 95% of the compactions from a preparation
// with no summary call by Pi, blocked at most 50 ms (median) and 200 ms (max) over them.
func checkCell(t *testing.T, ratio float64, alone, with cellRun, aloneN, withN Economics) {
	t.Helper()
	if with.Compactions > alone.Compactions+1 {
		t.Errorf("%d compactions with the extension, Pi alone %d", with.Compactions, alone.Compactions)
	}
	if with.InCycles > 2*with.Compactions {
		t.Errorf("%d summary requests for %d compactions", with.InCycles, with.Compactions)
	}
	if withN.Cost() > aloneN.Cost() {
		t.Errorf("modelled cost %.0f with the extension, Pi alone %.0f (%.3fx), through compaction %d", withN.Cost(), aloneN.Cost(), withN.Cost()/aloneN.Cost(), withN.Compactions)
	}
	if maxOr0(with.Blocked) > maxOr0(alone.Blocked) {
		t.Errorf("a compaction blocked the agent %s, Pi alone's longest %s", maxOr0(with.Blocked), maxOr0(alone.Blocked))
	}
	if m := medianOr0(with.Blocked); m > 50*time.Millisecond {
		t.Errorf("compactions blocked the agent %s (median), want <= 50 ms", m)
	}
	// The base: every span whose model summary had landed before a later compaction is read
	// by a model in that compaction's summary; and the measure itself holds on Pi alone's
	// run, whose summaries are all a model's.
	if cv := with.Coverage; cv.LandedCovered != cv.Landed {
		t.Errorf("%d of %d earlier spans whose model summary had landed are in a model's summary of the later compaction: %v", cv.LandedCovered, cv.Landed, cv.Missed)
	}
	// Extract now, model later: every span that ended one summary latency or more before a
	// later compaction is a model's in that compaction's summary (its base job, or the
	// preparation's own request, had the time to land).
	if cv := with.Coverage; cv.OlderLCovered != cv.OlderL {
		t.Errorf("%d of %d earlier spans older than one summary latency are in a model's summary of the later compaction: %v", cv.OlderLCovered, cv.OlderL, cv.MissedOlder)
	}
	if cv := alone.Coverage; cv.PairsCovered != cv.Pairs || cv.Pairs == 0 {
		t.Errorf("Pi alone: %d of %d earlier spans in a model's summary (the measure is wrong)", cv.PairsCovered, cv.Pairs)
	}
	if ratio < 2 {
		t.Logf("cycle / latency %.2f < 2: %d of %d compactions prepared, %d from the extract", ratio, with.Prepared, with.Compactions, with.Extract)
		return
	}
	if float64(with.Prepared) < 0.95*float64(with.Compactions) {
		t.Errorf("cycle / latency %.2f: %d of %d compactions from a preparation, want >= 95%%", ratio, with.Prepared, with.Compactions)
	}
	if with.PiCallsPrepared > 0 {
		t.Errorf("%d summary calls by Pi during prepared compactions", with.PiCallsPrepared)
	}
	if m := medianOr0(with.BlockedPrepared); m > 50*time.Millisecond {
		t.Errorf("prepared compactions blocked the agent %s (median), want <= 50 ms", m)
	}
	if m := maxOr0(with.BlockedPrepared); m > 200*time.Millisecond {
		t.Errorf("a prepared compaction blocked the agent %s, want <= 200 ms", m)
	}
}
