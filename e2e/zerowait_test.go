//go:build e2e

package e2e

// Zero-wait compaction with the real Pi: compactor's workers prepare summaries
// in the background (job kind "prepare", bucket COMPACTOR_PREPARED) and the Pi extension in
// extensions/pi hands them to Pi's session_before_compact hook, so Pi appends the
// compaction itself without calling its summarizer. Compared with Pi alone on the same
// workload, and checked in every fallback: compactor down, NATS down, a stale preparation
// (the branch switched with /tree, other custom instructions): Pi compacts by itself and
// the agent sees no error.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor-dev/compactor/internal/scriptllm"
	"github.com/compactor-dev/compactor/internal/waitfor"
)

// zeroWaitSettings make Pi compact every few prompts: a 20k window with 4k reserved (the
// threshold is about 15.9k tokens) and about 4k kept verbatim. Agent turns take 1 s, as a
// model's do; summaries take the usual 5 s, for Pi and for compactor alike.
func zeroWaitSettings() Config {
	return Config{
		ContextWindow: 20000, MaxTokens: 4096, AgentDelay: time.Second,
		Compaction: Compaction{Enabled: true, ReserveTokens: 4096, KeepRecentTokens: 4000},
	}
}

// zeroWaitPrompts is enough prompts for at least 10 automatic compactions.
const zeroWaitPrompts = 60

// extensionPath is the Pi extension of this repository.
func extensionPath() string { return filepath.Join(repoRoot, "extensions", "pi", "index.ts") }

// withExtension loads the extension in Pi, pointed at the NATS url and at the env's
// session dir as store "default".
func withExtension(cfg Config, url string) Config {
	cfg.Extensions = append(cfg.Extensions, extensionPath())
	cfg.PiEnv = append(cfg.PiEnv, "COMPACTOR_NATS_URL="+url, "COMPACTOR_DEBUG=1", "COMPACTOR_NATS_NKEY="+natsKey(url, "agent-default"))
	cfg.piEnvFunc = func(e *Env) []string { return []string{"COMPACTOR_STORES=default=" + e.SessionDir} }
	return cfg
}

// piSummaryCalls counts the summary requests Pi made (streamed: compactor's own summary
// requests are not) that arrived during [from, to], with a second of slack before from
// (Pi's events are timestamped as the test reads them).
func piSummaryCalls(e *Env, from, to time.Time) int {
	n := 0
	for _, r := range e.LLM.Requests() {
		if r.Kind == scriptllm.KindSummary && r.Stream && !r.Time.Before(from.Add(-time.Second)) && !r.Time.After(to) {
			n++
		}
	}
	return n
}

// compactionSpans returns the (start, end) times and outcome of every compaction Pi ran,
// from its events.
type compactionSpan struct {
	Start, End    time.Time
	Reason, Error string
	Aborted       bool
}

func compactionSpans(e *Env) []compactionSpan {
	var out []compactionSpan
	var cur *compactionSpan
	for _, ev := range e.Pi.Events(0) {
		switch ev.Type {
		case "compaction_start":
			var s struct {
				Reason string `json:"reason"`
			}
			_ = ev.Decode(&s)
			cur = &compactionSpan{Start: ev.At, Reason: s.Reason}
		case "compaction_end":
			if cur == nil {
				continue
			}
			var end struct {
				Aborted      bool   `json:"aborted"`
				ErrorMessage string `json:"errorMessage"`
			}
			_ = ev.Decode(&end)
			cur.End, cur.Error, cur.Aborted = ev.At, end.ErrorMessage, end.Aborted
			out = append(out, *cur)
			cur = nil
		}
	}
	return out
}

// noErrorsShown fails if Pi reported an extension error or a failed compaction.
func noErrorsShown(t *testing.T, e *Env) {
	t.Helper()
	for _, ev := range e.Pi.Events(0) {
		if ev.Type == "extension_error" {
			t.Errorf("Pi reported an extension error: %s", tail(string(ev.Raw), 400))
		}
	}
	for _, c := range compactionSpans(e) {
		if c.Error != "" || c.Aborted {
			t.Errorf("a compaction ended with an error or aborted: %q", c.Error)
		}
	}
}

// hookLines returns the extension's debug lines about its hook ("hit (...)", "stale (...)").
func hookLines(e *Env) []string {
	var out []string
	for _, l := range strings.Split(e.Pi.Stderr(), "\n") {
		if i := strings.Index(l, "session_before_compact: "); i >= 0 {
			out = append(out, l[i+len("session_before_compact: "):])
		}
	}
	return out
}

var metricsAddrRe = regexp.MustCompile(`"msg":"metrics listening","addr":"([^"]+)"`)

// scrapeMetric returns the lines of the service's /metrics that start with name.
func scrapeMetric(t *testing.T, svc *Proc, name string) []string {
	t.Helper()
	m := metricsAddrRe.FindStringSubmatch(svc.Stderr())
	if m == nil {
		t.Fatalf("compactor run did not log its metrics address")
	}
	resp, err := http.Get("http://" + m[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	var out []string
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, name) {
			out = append(out, l)
		}
	}
	return out
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// zeroWaitCompare runs the workload with Pi alone and with the extension and compactor,
// prints the economics table (the whole run, and through the last compaction both runs
// reached) and holds the run with the extension to the zero-wait bar for a workload whose cycle
// is several times the summary's latency (checkEconomics, on the figures through that
// compaction).
func zeroWaitCompare(t *testing.T, cfg Config, prompts int, about string) {
	var alone, with cellRun
	t.Run("pi-alone", func(t *testing.T) { alone = runCell(t, cfg, prompts, false) })
	t.Run("with-extension", func(t *testing.T) { with = runCell(t, cfg, prompts, true) })
	if alone.Compactions == 0 || with.Compactions == 0 {
		t.Fatal("a run did not complete")
	}
	n := min(alone.Compactions, with.Compactions)
	aloneN, withN := alone.through(n), with.through(n)
	t.Logf("FIGURE %s economics (%s), whole run:\n%s", t.Name(), about, economicsTable(alone.Economics, with.Economics))
	t.Logf("FIGURE %s economics through compaction %d:\n%s", t.Name(), n, economicsTable(aloneN, withN))
	figure(t, "reasons", with.Reasons)
	withN.Compactions, withN.FromHook = with.Compactions, with.Prepared
	aloneN.Compactions = alone.Compactions
	checkEconomics(t, aloneN, withN)
	if with.PiCallsPrepared > 0 {
		t.Errorf("%d summary calls by Pi during prepared compactions", with.PiCallsPrepared)
	}
}

// TestZeroWaitAutoCompaction: the same workload with Pi alone and with compactor preparing
// summaries for the extension, in one run. With the extension the agent is blocked for
// milliseconds and Pi makes no summary call during its compactions, and the workload costs
// no more than with Pi alone. The table goes to docs/live-agents.md.
func TestZeroWaitAutoCompaction(t *testing.T) {
	zeroWaitCompare(t, zeroWaitSettings(), zeroWaitPrompts, fmt.Sprintf("window 20000, reserve 4096, keep 4000, %d prompts", zeroWaitPrompts))
}

// largeWindowSettings are a larger model: a 128k window with Pi's default reserve and
// keep, and notes files of about 40,000 characters read back by every prompt.
func largeWindowSettings() Config {
	return Config{
		ContextWindow: 128000, MaxTokens: 16384, AgentDelay: time.Second, Lines: 440,
		Compaction: Compaction{Enabled: true, ReserveTokens: 16384, KeepRecentTokens: 20000},
	}
}

// largeWindowPrompts is enough prompts for about 5 compactions of Pi alone.
const largeWindowPrompts = 30

// TestZeroWaitLargeWindow: the comparison of TestZeroWaitAutoCompaction on a 128k window.
func TestZeroWaitLargeWindow(t *testing.T) {
	zeroWaitCompare(t, largeWindowSettings(), largeWindowPrompts, fmt.Sprintf("window 128000, reserve 16384, keep 20000, %d prompts, ~40k-character files", largeWindowPrompts))
}

// preparedBucket is COMPACTOR_PREPARED as the admin of the server at url sees it, and the
// close of the admin's connection.
func preparedBucket(t *testing.T, url string) (jetstream.KeyValue, func()) {
	t.Helper()
	nc, err := natsAdmin(t, url)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	var kv jetstream.KeyValue
	waitfor.Until(t, "the bucket COMPACTOR_PREPARED", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		kv, err = js.KeyValue(ctx, "COMPACTOR_PREPARED")
		return err == nil
	})
	return kv, nc.Close
}

// preparedValue polls COMPACTOR_PREPARED for the session until pred accepts the value.
func preparedValue(t *testing.T, url, sessionID string, pred func(map[string]any) bool) map[string]any {
	t.Helper()
	kv, closeConn := preparedBucket(t, url)
	defer closeConn()
	var v map[string]any
	waitfor.Until(t, "a prepared summary for "+sessionID, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		e, err := kv.Get(ctx, "default."+sessionID)
		var got map[string]any
		if err != nil || json.Unmarshal(e.Value(), &got) != nil || !pred(got) {
			return false
		}
		v = got
		return true
	})
	return v
}

// preparedGone waits until the session has no prepared summary (compactor deletes it once
// the hook reported that Pi compacted), and then puts value back, as if that report had
// been lost (reports are fire-and-forget): the extension must still refuse it.
func preparedGoneThenBack(t *testing.T, url, sessionID string, value map[string]any) {
	t.Helper()
	kv, closeConn := preparedBucket(t, url)
	defer closeConn()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waitfor.Until(t, "the prepared summary of "+sessionID+" deleted after Pi compacted past it", func() bool {
		_, err := kv.Get(ctx, "default."+sessionID)
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	b, _ := json.Marshal(value)
	if _, err := kv.Put(ctx, "default."+sessionID, b); err != nil {
		t.Fatal(err)
	}
}

// sessionID reads the header id of Pi's session file.
func sessionID(t *testing.T, file string) string {
	t.Helper()
	b := readFile(t, file)
	line, _, _ := strings.Cut(string(b), "\n")
	var h struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(line), &h); err != nil {
		t.Fatal(err)
	}
	return h.ID
}

// manualCompact runs RPC compact and returns how long the agent was blocked, Pi's summary
// calls meanwhile and the compaction entry.
func manualCompact(t *testing.T, e *Env, instructions string) (time.Duration, int, Entry) {
	t.Helper()
	cmd := map[string]any{"type": "compact"}
	if instructions != "" {
		cmd["customInstructions"] = instructions
	}
	mark := e.Pi.Mark()
	if _, err := e.Pi.Call(e.Ctx(2*time.Minute), cmd); err != nil {
		t.Fatal(err)
	}
	startEv, endEv := compactionEvents(t, e, mark)
	comp := lastEntry(t, e.SessionFile())
	if comp.Type != "compaction" {
		t.Fatalf("the last entry is %s, not a compaction", comp.Type)
	}
	return endEv.At.Sub(startEv.At), piSummaryCalls(e, startEv.At, endEv.At), comp
}

func fromHook(c Entry) bool {
	var v bool
	_ = c.Field("fromHook", &v)
	return v
}

// manualSettings: a 40k window with 4k reserved and auto-compaction off, so the
// extension's trigger (0.7 of the 35.9k threshold) fires during the workload and the
// compactions are the test's own.
func manualSettings() Config {
	return Config{ContextWindow: 40000, MaxTokens: 4096, Compaction: Compaction{Enabled: false, ReserveTokens: 4096, KeepRecentTokens: 8000}}
}

// manualEnv is Pi with the extension on manualSettings, pointed at the NATS url, and a
// compactor service preparing summaries on it; extensions are loaded after this one.
func manualEnv(t *testing.T, url string, extensions ...string) *Env {
	t.Helper()
	cfg := withExtension(manualSettings(), url)
	cfg.Extensions = append(cfg.Extensions, extensions...)
	cfg.beforePi = func(env *Env) { env.StartService(url, "--keep-recent-tokens", "8000") }
	return NewEnv(t, cfg)
}

// TestZeroWaitManualCompact: RPC compact with a prepared summary ready takes milliseconds
// and no summary call; with custom instructions (the preparation was made without them)
// the preparation is not valid and Pi compacts by itself, using the instructions.
func TestZeroWaitManualCompact(t *testing.T) {
	url := StartNATS(t)
	e := manualEnv(t, url)
	e.Workload(1, 14)
	file := e.SessionFile()
	sid := sessionID(t, file)
	pr := preparedValue(t, url, sid, func(map[string]any) bool { return true })
	figure(t, "manual.prepared_leaf", pr["leafId"])
	before := e.LastAgentRequest()
	blocked, calls, comp := manualCompact(t, e, "")
	figure(t, "manual.blocked", blocked.Round(100*time.Microsecond))
	figure(t, "manual.pi_summary_calls", calls)
	if !fromHook(comp) || calls != 0 || blocked > time.Second {
		t.Errorf("manual compact with a preparation ready: fromHook %v, %d summary calls, blocked %s; hook: %v", fromHook(comp), calls, blocked, hookLines(e))
	}
	llmMark := e.LLM.Count()
	if _, err := e.Pi.Prompt(e.Ctx(2*time.Minute), e.Work.Prompt(15)); err != nil {
		t.Fatal(err)
	}
	checkCompactedRequest(t, e.NextAgentRequest(llmMark), file, comp, before)

	// Again, once a preparation builds on that compaction, now with custom instructions.
	e.Workload(16, 30)
	preparedValue(t, url, sid, func(v map[string]any) bool { return v["previousCompactionId"] == comp.ID })
	const focus = "Focus on the retry counts in the notes."
	before = e.LastAgentRequest()
	blocked, calls, comp2 := manualCompact(t, e, focus)
	figure(t, "manual.instructions.blocked", blocked.Round(time.Millisecond))
	figure(t, "manual.instructions.pi_summary_calls", calls)
	if fromHook(comp2) || calls == 0 {
		t.Errorf("custom instructions: fromHook %v, %d summary calls; want Pi's own compaction", fromHook(comp2), calls)
	}
	if !slices.ContainsFunc(hookLines(e), func(l string) bool { return strings.HasPrefix(l, "stale") && strings.Contains(l, "instructions") }) {
		t.Errorf("the extension did not refuse the preparation for its instructions: %v", hookLines(e))
	}
	with := 0
	for _, r := range e.LLM.Requests() {
		if r.Kind == scriptllm.KindSummary && r.Stream && strings.Contains(r.Messages[len(r.Messages)-1].Content, focus) {
			with++
		}
	}
	if with == 0 {
		t.Errorf("Pi's summary request lacks the custom instructions")
	}
	llmMark = e.LLM.Count()
	if _, err := e.Pi.Prompt(e.Ctx(2*time.Minute), e.Work.Prompt(31)); err != nil {
		t.Fatal(err)
	}
	checkCompactedRequest(t, e.NextAgentRequest(llmMark), file, comp2, before)
	noErrorsShown(t, e)
	CheckContextsEqual(t, file)
	CheckAllOnPath(t, file)
}

// piCompactsItself runs RPC compact with no preparation usable and checks that Pi
// compacted by itself (its summarizer called, fromHook false); it reports the figure
// fallback.<name>, prefixed by note, and returns how long the agent was blocked and how
// many summary requests Pi made (Pi 0.73 makes a split turn's two at once, Pi 1.6 one after
// the other).
func piCompactsItself(t *testing.T, e *Env, name, note string) (time.Duration, int) {
	t.Helper()
	blocked, calls, comp := manualCompact(t, e, "")
	figure(t, "fallback."+name, fmt.Sprintf("%sblocked %s, %d summary calls, fromHook %v; hook %v", note, blocked.Round(time.Millisecond), calls, fromHook(comp), hookLines(e)))
	if fromHook(comp) || calls == 0 {
		t.Errorf("fromHook %v, %d summary calls; want Pi's own compaction", fromHook(comp), calls)
	}
	return blocked, calls
}

// treeExtension is a test-only Pi extension: the command /e2e-tree ID moves the leaf to
// ID as /tree does (no summary), since RPC has no tree navigation.
const treeExtension = `export default function (pi) {
	pi.registerCommand("e2e-tree", {
		description: "move the leaf like /tree (e2e tests)",
		handler: async (args, ctx) => { await ctx.navigateTree(args.trim(), { summarize: false }); },
	});
}
`

// TestZeroWaitFallbacks: whenever no valid preparation can be had, Pi compacts by itself
// (its summarizer is called) and the agent sees no error: compactor down (NATS up, no
// worker), NATS down (stopped mid-session), the branch switched with /tree after the
// preparation.
func TestZeroWaitFallbacks(t *testing.T) {
	t.Run("compactor down", func(t *testing.T) {
		url := StartNATS(t)
		e := NewEnv(t, withExtension(manualSettings(), url))
		e.Workload(1, 14)
		piCompactsItself(t, e, "compactor_down", "")
		noErrorsShown(t, e)
	})
	t.Run("nats down", func(t *testing.T) {
		ns := startNATSServer(t)
		e := manualEnv(t, ns.ClientURL())
		e.Workload(1, 14)
		preparedValue(t, ns.ClientURL(), sessionID(t, e.SessionFile()), func(map[string]any) bool { return true })
		ns.Shutdown()
		ns.WaitForShutdown()
		blocked, calls := piCompactsItself(t, e, "nats_down", "")
		if most := time.Duration(calls)*scriptllm.DefaultSummaryDelay + 2*time.Second; blocked < scriptllm.DefaultSummaryDelay || blocked > most {
			t.Errorf("blocked %s: want Pi's own summaries (%d of %s, at once or one after the other) plus at most the hook's deadline, at most %s", blocked, calls, scriptllm.DefaultSummaryDelay, most)
		}
		noErrorsShown(t, e)
	})
	t.Run("session moved on", func(t *testing.T) {
		// The preparation builds on no compaction; then Pi compacts by itself (custom
		// instructions), and the agent goes on: the preparation now builds on the wrong
		// compaction, and the next /compact must not use it. compactor deleted it when the
		// hook reported Pi's compaction; it is put back, as if that report had been lost.
		url := StartNATS(t)
		e := manualEnv(t, url)
		e.Workload(1, 14)
		file := e.SessionFile()
		pr := preparedValue(t, url, sessionID(t, file), func(map[string]any) bool { return true })
		if _, calls, comp := manualCompact(t, e, "Keep the notes."); fromHook(comp) || calls == 0 {
			t.Fatalf("the compaction with instructions was not Pi's own")
		}
		preparedGoneThenBack(t, url, sessionID(t, file), pr)
		e.Workload(15, 15)
		piCompactsItself(t, e, "session_moved_on", fmt.Sprintf("prepared at %v before Pi compacted; ", pr["leafId"]))
		if !slices.ContainsFunc(hookLines(e), func(l string) bool { return strings.HasPrefix(l, "stale (previous-compaction") }) {
			t.Errorf("the extension did not refuse the preparation as built on another compaction: %v", hookLines(e))
		}
		noErrorsShown(t, e)
		CheckContextsEqual(t, file)
	})
	t.Run("branch switched", func(t *testing.T) {
		url := StartNATS(t)
		tree := filepath.Join(t.TempDir(), "tree.js")
		if err := os.WriteFile(tree, []byte(treeExtension), 0o644); err != nil {
			t.Fatal(err)
		}
		e := manualEnv(t, url, tree)
		e.Workload(1, 14)
		file := e.SessionFile()
		pr := preparedValue(t, url, sessionID(t, file), func(map[string]any) bool { return true })
		// Back to an early assistant answer, then on along another branch.
		var target string
		for _, en := range ReadEntries(t, file) {
			if messageRole(en) == "assistant" && target == "" {
				target = en.ID
			}
		}
		if _, err := e.Pi.Call(e.Ctx(time.Minute), map[string]any{"type": "prompt", "message": "/e2e-tree " + target}); err != nil {
			t.Fatal(err)
		}
		// Enough on the new branch for Pi 1.6 to have something to compact (it refuses a
		// branch whose every entry fits in keepRecentTokens; Pi 0.73 compacted nothing).
		e.Workload(15, 24)
		piCompactsItself(t, e, "branch_switched", fmt.Sprintf("prepared at %v; ", pr["leafId"]))
		if !slices.ContainsFunc(hookLines(e), func(l string) bool { return strings.HasPrefix(l, "stale") }) {
			t.Errorf("the extension did not refuse the preparation as stale: %v", hookLines(e))
		}
		noErrorsShown(t, e)
		CheckContextsEqual(t, file)
	})
}
