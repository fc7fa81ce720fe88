package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/waitfor"

	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/operator"
)

// The issue's "done when": a dead-lettered session is compacted after `compactor dlq
// retry` and, without it, by a later sweep after the backoff. `compactor run` (the real
// engine: tiktoken, nearest policy, the OpenAI summarizer against a fake endpoint over
// HTTP; its embedded nats-server on a free port) sweeps every 250 ms; the endpoint refuses
// the key (401: a permanent failure, dead-lettered at once) until it is fixed. Not
// parallel: the real engine is built only while no test holds the NewPipelineHandler hook.
func TestDeadLetterRetriedByHandAndBySweep(t *testing.T) {
	root := repoRoot(t)
	src, err := os.ReadFile(filepath.Join(root, "testdata/corpus/12-tricky-custom-message-cut.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	store, data := t.TempDir(), t.TempDir()
	ids := map[string]string{"byHand": "019a0000-0000-7000-8000-00000000d001", "bySweep": "019a0000-0000-7000-8000-00000000d002"}
	files := map[string]string{}
	old := time.Now().Add(-time.Hour)
	for name, id := range ids {
		f := filepath.Join(store, "--home-u-p--", "2026-01-01T00-00-00-000Z_"+id+".jsonl")
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, bytes.Replace(src, []byte("019ad9b0-0000-7000-8000-00000000aaaa"), []byte(id), 1), 0o644); err != nil {
			t.Fatal(err)
		}
		_ = os.Chtimes(f, old, old)
		files[name] = f
	}
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("sk-test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	llm := fakellm.Start(t)
	llm.SetDefault(fakellm.Behavior{Status: 401})

	const backoff = 3 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan struct{})
	var runErr bytes.Buffer
	go func() {
		defer close(exited)
		env := &Env{Args: []string{"run", "--store", "default=" + store, "--data-dir", data, "--listen", "127.0.0.1:0",
			"--sweep-every", "250ms", "--sweep-retry-base", backoff.String(), "--sweep-retry-max", "1m", "--idle", "0",
			"--summarizer", "openai", "--base-url", llm.URL(), "--model", "fake-model", "--api-key-file", key,
			"--context-window", "20000", "--keep-recent-tokens", "2000", "--log-format", "json"},
			Stdout: &bytes.Buffer{}, Stderr: &runErr, Getenv: func(string) string { return "" }}
		if code := Run(ctx, env); code != ExitOK {
			t.Errorf("run: exit %d", code)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-exited
		if t.Failed() {
			t.Logf("compactor run's log:\n%s", runErr.String())
		}
	})

	dd := "--data-dir=" + data
	var failedAt map[string]time.Time
	waitfor.Until(t, "two dead letters listed by dlq list", func() bool {
		code, out, _ := runCLI(t, "dlq", "list", dd, "--json")
		var recs []operator.DeadLetterRecord
		if code != ExitOK || json.Unmarshal([]byte(out), &recs) != nil || len(recs) != 2 {
			return false
		}
		failedAt = map[string]time.Time{}
		for _, r := range recs {
			failedAt[r.SessionID] = r.At
		}
		return true
	})
	compactions := func(name string) int {
		b, err := os.ReadFile(files[name])
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), `"type":"compaction"`)
	}
	if compactions("byHand")+compactions("bySweep") != 0 {
		t.Fatal("compacted while the endpoint refused every request")
	}

	llm.SetDefault(fakellm.Behavior{}) // the endpoint is fixed
	code, out, errOut := runCLI(t, "dlq", "retry", "--session", ids["byHand"], "--wait", "--timeout", "2m", dd)
	if code != ExitOK || !strings.Contains(out, "1 retried, 0 not queued") {
		t.Fatalf("dlq retry --wait: exit %d\n%s\n%s", code, out, errOut)
	}
	if n := compactions("byHand"); n != 1 {
		t.Fatalf("after dlq retry: %d compactions, want 1", n)
	}

	waitfor.Until(t, "the dead-lettered session compacted by a sweep", func() bool { return compactions("bySweep") > 0 })
	compactedAt := time.Now()
	waited := compactedAt.Sub(failedAt[ids["bySweep"]])
	t.Logf("compacted by a sweep %s after its dead letter (backoff %s)", waited.Round(10*time.Millisecond), backoff)
	if waited < backoff-500*time.Millisecond {
		t.Errorf("compacted %s after the failure, before the backoff of %s", waited, backoff)
	}
	time.Sleep(time.Second) // more sweeps: nothing compacted twice
	for name := range files {
		if n := compactions(name); n != 1 {
			t.Errorf("%s: %d compactions, want 1", name, n)
		}
	}
}
