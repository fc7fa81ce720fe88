package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/waitfor"

	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/internal/natstest"
)

// --spend-limit in `compactor run`, with the real engine and the service's summarizer on a
// fake endpoint: with a limit of 1 input token per hour and per day, the first job is
// admitted (the window is below its limit) and pays; the others are held, handed back
// without an attempt until the window ends: not failed, not dead-lettered; the metrics and
// the log say so, and the token metrics carry the model.
func TestSpendLimitHoldsJobsInRun(t *testing.T) {
	t.Parallel()
	url := natstest.StartServer(t).ClientURL()
	llm := fakellm.Start(t)
	store, files := overBudgetStore(t, 3)
	day := time.Now().UTC().Format("2006-01-02")
	run := startCLI([]string{"run", "--setup", "--nats-url", url, "--store", "default=" + store, "--data-dir", t.TempDir(), "--log-format", "json",
		"--idle", "0", "--sweep-every", "1h", "--summarizer", "openai", "--base-url", llm.URL(), "--model", "fake-model",
		"--context-window", "20000", "--keep-recent-tokens", "2000", "--metrics-addr", "127.0.0.1:0",
		"--spend-limit", "1/hour", "--spend-limit", "1/day"})
	if err := run.ready(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.stop(t) })
	var addr string
	waitfor.Until(t, "the metrics server", func() bool { addr = metricsAddr(run.log.String()); return addr != "" })
	metrics := func() string { _, body := httpGet(t, "http://"+addr+"/metrics"); return body }
	waitfor.Until(t, "one job done and the two others held", func() bool {
		// The admitted job is done once its event is recorded (its outcome, then its tokens),
		// which follows its append.
		n, _ := compactions(t, files)
		m := metrics()
		return n == 1 && strings.Contains(m, `compactor_jobs_handed_back_total{reason="spend",store="default"} 2`) &&
			strings.Contains(m, `compactor_jobs_total{kind="compact",outcome="done",store="default"} 1`) &&
			strings.Contains(m, `compactor_llm_input_tokens_total{kind="compact",model="fake-model",store="default"}`)
	})
	body := metrics()
	for _, want := range []string{`compactor_spend_limit_tokens{store="*",window="hour"} 1`, `compactor_spend_limit_tokens{store="*",window="day"} 1`,
		`compactor_llm_input_tokens_total{kind="compact",model="fake-model",store="default"}`, `compactor_spend_window_tokens{store="*",window="hour"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(body, `outcome="failed"`) || strings.Contains(body, `outcome="retry"`) {
		t.Error("a held job was counted as failed or retried")
	}
	if !hasLine(run.log.String(), "spend limit reached: jobs wait for the window to end", `"limit_tokens":1`) {
		t.Errorf("no log line says the limit was reached:\n%s", run.log.String())
	}
	// One request: the admitted job's. (A day that ended during the test opens new windows.)
	if n := llm.Count(); n != 1 && day == time.Now().UTC().Format("2006-01-02") {
		t.Errorf("%d LLM requests, want 1 (the others held)", n)
	}
	code, out, _ := runCLI(t, "dlq", "list", "--nats-url", url, "--json")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("dead letters: exit %d %s", code, out)
	}
}

// --spend-limit is checked at start and names the flag.
func TestSpendLimitFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct{ spec, want string }{
		{"10/week", `window "week" is not hour or day`},
		{"lots/hour", "TOKENS a positive number"},
		{"0/day", "TOKENS a positive number"},
		{"other=10/hour", `--spend-limit: store "other" is not one of this worker's stores`},
	} {
		code, _, errs := runCLI(t, "run", "--once", "--store", "default="+dir, "--data-dir", t.TempDir(), "--spend-limit", c.spec)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("--spend-limit %s: exit %d, %q; want 2 and %q", c.spec, code, errs, c.want)
		}
	}
}
