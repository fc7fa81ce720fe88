package cli

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/waitfor"

	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/internal/natstest"
)

// drainRun starts `compactor run` on an over-budget store with the OpenAI summarizer on
// the fake endpoint; extra are the settings of the case.
func drainRun(t *testing.T, bin, natsURL, store, llmURL string, extra ...string) *process {
	t.Helper()
	args := append([]string{"run", "--setup", "--nats-url", natsURL, "--store", "default=" + store, "--data-dir", t.TempDir(),
		"--idle", "0", "--summarizer", "openai", "--base-url", llmURL, "--model", "fake-model",
		"--context-window", "20000", "--keep-recent-tokens", "2000", "--log-format", "json"}, extra...)
	return startProcess(t, bin, args...)
}

// drained runs the restart scenario: n sessions over budget, the model answering
// after latency, SIGTERM once every summary is in flight at the endpoint, then a restart
// (`run --once`, which sweeps and works what is queued) to finish what was handed back.
// It returns the LLM requests made in all and the compactions per file.
func drained(t *testing.T, n int, latency time.Duration, extra ...string) (requests, total int, stopped time.Duration, logs string) {
	t.Helper()
	bin, _ := compactorBinary(t)
	url := natstest.StartServer(t).ClientURL()
	llm := fakellm.Start(t)
	llm.SetDefault(fakellm.Behavior{Latency: latency})
	store, files := overBudgetStore(t, n)
	p := drainRun(t, bin, url, store, llm.URL(), append([]string{"--sweep-every", "1h"}, extra...)...)
	waitfor.Until(t, "every summary in flight at the endpoint", func() bool {
		if p.Exited() {
			t.Fatalf("run exited (%d):\n%s", p.Code(), p.logs.String())
		}
		return llm.Count() >= n
	})
	start := time.Now()
	p.signal(t, syscall.SIGTERM)
	if code := p.Await(t); code != 0 {
		t.Fatalf("run exit %d after SIGTERM:\n%s", code, p.logs.String())
	}
	stopped = time.Since(start)
	first, _ := compactions(t, files)
	again := drainRun(t, bin, url, store, llm.URL(), append([]string{"--once"}, extra...)...)
	if code := again.Await(t); code != 0 {
		t.Fatalf("run --once after the restart: exit %d:\n%s", code, again.logs.String())
	}
	total, perFile := compactions(t, files)
	for i, c := range perFile {
		if c != 1 {
			t.Errorf("%s: %d compactions, want 1", files[i], c)
		}
	}
	t.Logf("%d sessions, summaries of %s: %d compactions before the restart, %d after; %d LLM requests in all; SIGTERM to exit %.1fs",
		n, latency, first, total, llm.Count(), stopped.Seconds())
	return llm.Count(), total, stopped, p.logs.String() + again.logs.String()
}

// The reproduction, its times scaled down ten times with the ratio to the defaults
// kept: the model answers after 4 s (40 s), the LLM timeout is 12 s (120 s: its default),
// the drain limit is left at its default (the LLM timeout); SIGTERM comes once the three
// summaries are in flight (the issue: 3 s into them). Before, with --shutdown-timeout at
// its default of 30 s (3 s here), the three summaries were cancelled and given back, and
// sent again after the restart: 6 requests for 3 compactions. Now they finish before the
// process exits: 3 requests.
func TestSIGTERMLetsSummariesFinish(t *testing.T) {
	t.Parallel()
	requests, total, _, logs := drained(t, 3, 4*time.Second, "--llm-timeout", "12s")
	if requests != 3 || total != 3 {
		t.Errorf("%d LLM requests for %d compactions, want 3 for 3", requests, total)
	}
	if !hasLine(logs, "stopping: no more fetches", `"drain_timeout_s":12`) {
		t.Errorf("the stop does not say what it waits for:\n%s", logs)
	}
}

// What a drain cannot finish is handed back at once: the drain limit (1 s) is shorter than
// the summaries (4 s), so the three are cancelled and handed back, and the restarted
// worker gets them at once (with --ack-wait 1h it would otherwise wait an hour: the test
// would hang and fail). They are paid twice: the limit is the operator's choice.
func TestDrainLimitHandsBackAtOnce(t *testing.T) {
	t.Parallel()
	requests, total, _, logs := drained(t, 3, 4*time.Second, "--llm-timeout", "12s", "--drain-timeout", "1s", "--ack-wait", "1h")
	if requests != 6 || total != 3 {
		t.Errorf("%d LLM requests for %d compactions, want 6 for 3 (each summary cut at the limit and made again)", requests, total)
	}
	if !hasLine(logs, "drain limit reached: cancelling running jobs; they are handed back") || !hasLine(logs, "job given back at shutdown") {
		t.Errorf("the hand-back is not logged:\n%s", logs)
	}
}

// The "done when": SIGTERM during 20 summaries that take 10 s each, with the
// default settings (drain limit = LLM timeout = 2 min, AckWait 60 s; --concurrency and
// --llm-concurrency 20 so that the 20 are in flight at once): 20 summaries appended, 0
// LLM requests repeated (the restart finds nothing left to do).
func TestSIGTERMDuringTwentySummaries(t *testing.T) {
	t.Parallel()
	requests, total, stopped, _ := drained(t, 20, 10*time.Second, "--concurrency", "20", "--llm-concurrency", "20")
	if requests != 20 || total != 20 {
		t.Errorf("%d LLM requests for %d compactions, want 20 for 20 (0 repeated)", requests, total)
	}
	t.Logf("SIGTERM to exit: %.1fs (summaries of 10s, in flight when it came)", stopped.Seconds())
}

// --shutdown-timeout is the former name of --drain-timeout: alone it is taken, with a
// warning; with --drain-timeout it is refused.
func TestShutdownTimeoutIsTheDrainsFormerName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, _, errs := runCLI(t, "run", "--once", "--store", "default="+dir, "--data-dir", t.TempDir(), "--drain-timeout", "5s", "--shutdown-timeout", "5s")
	if code != 2 || !strings.Contains(errs, "--shutdown-timeout is the former name of --drain-timeout: give only --drain-timeout") {
		t.Errorf("both: exit %d, %q", code, errs)
	}
	code, _, errs = runCLI(t, "run", "--once", "--store", "default="+dir, "--data-dir", t.TempDir(), "--log-format", "json", "--shutdown-timeout", "5s")
	if code != 0 || !hasLine(errs, "--shutdown-timeout is deprecated: it is now --drain-timeout", `"drain_timeout_s":5`) {
		t.Errorf("alone: exit %d, %q", code, errs)
	}
}
