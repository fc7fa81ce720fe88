package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/proctest"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/wire"
)

// jsonLog collects a service's JSON log lines.
type jsonLog struct{ proctest.Buffer }

// records are the log lines with msg (every line when msg is "").
func (l *jsonLog) records(msg string) []map[string]any {
	var out []map[string]any
	for line := range strings.Lines(l.String()) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && (msg == "" || rec["msg"] == msg) {
			out = append(out, rec)
		}
	}
	return out
}

func (l *jsonLog) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(&l.Buffer, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Every sweep logs one line at info level with its counts, and, when it enqueued nothing,
// why: a fresh copy of sessions is "active" under --idle and was left alone without a word.
// The start says whether the stores are swept at all.
func TestSweepSaysWhyNothingWasEnqueued(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	var logs jsonLog
	cfg := b.config(&fakeHandler{})
	cfg.Logger = logs.logger()
	cfg.Idle = 10 * time.Minute
	cfg.SweepEvery = time.Hour
	cfg.Assessor = leafAssessor
	writeSession(t, b.dir, "p/fresh.jsonl") // just written: active under --idle 10m
	s := b.service(cfg)
	b.run(s)
	waitfor.Until(t, "the first sweep's line", func() bool { return len(logs.records("sweep done")) == 1 })
	rec := logs.records("sweep done")[0]
	if rec["level"] != "INFO" || rec["files"] != 1.0 || rec["active"] != 1.0 || rec["enqueued"] != 0.0 {
		t.Errorf("sweep line: %v", rec)
	}
	why, _ := rec["nothing_enqueued"].(string)
	if !strings.Contains(why, "1 active (modified within --idle 10m0s") {
		t.Errorf("the sweep does not say why nothing was enqueued: %q", why)
	}
	if len(logs.records("sweeping the stores periodically: sessions over their budget are enqueued; those modified within the idle threshold are left alone until idle")) != 1 {
		t.Error("the start does not say the stores are swept, nor the idle threshold")
	}
	// A sweep that enqueues says so, and gives no reason for nothing.
	old := time.Now().Add(-time.Hour)
	_ = os.Chtimes(filepath.Join(b.dir, "p", "fresh.jsonl"), old, old)
	st, err := s.Sweep(context.Background(), nil)
	if err != nil || st.Enqueued != 1 {
		t.Fatalf("second sweep: %+v, %v", st, err)
	}
	recs := logs.records("sweep done")
	if last := recs[len(recs)-1]; last["enqueued"] != 1.0 || last["nothing_enqueued"] != nil {
		t.Errorf("second sweep line: %v", last)
	}
}

// A job that fails for good is logged at warn level with its reason and error: an
// operator looks for dead letters there (it was at info level).
func TestDeadLetterLoggedAtWarn(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	var logs jsonLog
	h := &fakeHandler{before: func(ctx context.Context, job wire.Job, file string) error {
		return Permanent(errors.New("the model refused the request"))
	}}
	cfg := b.config(h)
	cfg.Logger = logs.logger()
	s := b.service(cfg)
	b.run(s)
	sid, leaf := writeSession(t, b.dir, "p/dead.jsonl")
	b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: "p/dead.jsonl", SessionID: sid, ExpectLeafID: leaf})
	waitfor.Until(t, "the dead letter", func() bool { return len(b.deadLetters()) == 1 })
	waitfor.Until(t, "the failed job's line", func() bool { return len(logs.records("job failed")) == 1 })
	rec := logs.records("job failed")[0]
	if rec["level"] != "WARN" || !strings.Contains(rec["error"].(string), "the model refused the request") || rec["reason"] == "" {
		t.Errorf("failed job logged as %v", rec)
	}
}
