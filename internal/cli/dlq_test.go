package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/wire"
)

// startDLQService runs a service of store "default" at store, with its embedded NATS in
// data (which `compactor dlq --data-dir` finds), working jobs with h; stopped when t ends.
func startDLQService(t *testing.T, store, data string, h pipeline.Handler) *pipeline.Service {
	t.Helper()
	svc, err := pipeline.New(pipeline.Config{Stores: []pipeline.Store{{Name: "default", Dir: store}}, DataDir: data, EmbeddedPort: -1, Idle: -1,
		BackoffBase: 50 * time.Millisecond, BackoffMax: time.Second, Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = svc.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; svc.Close() })
	return svc
}

// A dead-lettered session is compacted after `compactor dlq retry`: list, show, the
// refusals of bad usage, retry --wait, purge. The command finds the service's NATS through
// its data directory (no --nats-url).
func TestDLQCommand(t *testing.T) {
	t.Parallel()
	data, store := t.TempDir(), t.TempDir()
	const sid = "019a48fc-d300-72c8-a6b9-f316c6e7dead"
	file := filepath.Join(store, "s.jsonl")
	if err := os.WriteFile(file, []byte(`{"type":"session","version":3,"id":"`+sid+`","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}`+"\n"+
		`{"type":"message","id":"a1b2c3d4","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var failing atomic.Bool
	failing.Store(true)
	h := pipeline.HandlerFunc(func(ctx context.Context, job wire.Job, f string) (wire.Result, error) {
		if failing.Load() {
			return wire.Result{}, pipeline.Permanent(errors.New("the endpoint refused the model"))
		}
		fh, err := os.OpenFile(f, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return wire.Result{}, err
		}
		defer fh.Close()
		_, err = fmt.Fprintf(fh, `{"type":"compaction","id":"c0ffee00","parentId":%q}`+"\n", job.ExpectLeafID)
		return wire.Result{Tally: wire.Tally{EntryID: "c0ffee00"}}, err
	})
	svc := startDLQService(t, store, data, h)
	r, err := pipeline.Enqueue(context.Background(), svc.Conn(), wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl",
		SessionID: sid, ExpectLeafID: "a1b2c3d4", Reason: "sweep"}, true, 20*time.Second)
	if err != nil || r.Event.Outcome != pipeline.OutcomeFailed {
		t.Fatalf("job: %+v %v", r.Event, err)
	}

	dd := "--data-dir=" + data
	code, out, errOut := runCLI(t, "dlq", "list", dd, "--json")
	var recs []pipeline.DeadLetterRecord
	if code != ExitOK || json.Unmarshal([]byte(out), &recs) != nil || len(recs) != 1 || recs[0].SessionID != sid || recs[0].Path != "s.jsonl" {
		t.Fatalf("dlq list --json: exit %d\n%s\n%s", code, out, errOut)
	}
	seq := strconv.FormatUint(recs[0].Seq, 10)
	if code, out, _ := runCLI(t, "dlq", "list", dd, "--reason", "REFUSED THE MODEL"); code != ExitOK || !strings.Contains(out, "1 dead letters") || !strings.Contains(out, sid) {
		t.Errorf("dlq list: exit %d\n%s", code, out)
	}
	if code, out, _ := runCLI(t, "dlq", "list", dd, "--reason", "nothing like this"); code != ExitOK || !strings.Contains(out, "no dead letters") {
		t.Errorf("dlq list with no match: exit %d\n%s", code, out)
	}
	if code, out, errOut := runCLI(t, "dlq", "show", seq, dd); code != ExitOK || !strings.Contains(out, "reason:     the endpoint refused the model") || !strings.Contains(out, `"sessionId":"`+sid) {
		t.Errorf("dlq show: exit %d\n%q\n%s", code, out, errOut)
	}
	for _, bad := range [][]string{{"dlq"}, {"dlq", "frob"}, {"dlq", "retry", dd}, {"dlq", "purge", dd}, {"dlq", "show", dd}, {"dlq", "show", "x1", dd}} {
		if code, _, errOut := runCLI(t, bad...); code != ExitBadUse {
			t.Errorf("%v: exit %d, want 2 (%s)", bad, code, errOut)
		}
	}
	if code, out, _ := runCLI(t, "dlq", "purge", "--all", "--dry-run", dd); code != ExitOK || !strings.Contains(out, sid) {
		t.Errorf("purge --dry-run: exit %d\n%s", code, out)
	}

	failing.Store(false) // the endpoint is fixed
	code, out, errOut = runCLI(t, "dlq", "retry", "--session", sid, "--wait", "--timeout", "2m", dd)
	if code != ExitOK || !strings.Contains(out, "done") || !strings.Contains(out, "1 retried, 0 not queued") {
		t.Fatalf("dlq retry --wait: exit %d\n%s\n%s", code, out, errOut)
	}
	if b, _ := os.ReadFile(file); strings.Count(string(b), `"type":"compaction"`) != 1 {
		t.Errorf("after retry:\n%s", b)
	}
	if code, out, _ := runCLI(t, "dlq", "list", dd); code != ExitOK || !strings.Contains(out, "no dead letters") {
		t.Errorf("after retry: exit %d\n%s", code, out)
	}
	if code, out, _ := runCLI(t, "dlq", "purge", "--all", "--json", dd); code != ExitOK || strings.TrimSpace(out) != `{"purged":0}` {
		t.Errorf("purge: exit %d %s", code, out)
	}
}
