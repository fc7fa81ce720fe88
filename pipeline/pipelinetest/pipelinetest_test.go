package pipelinetest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/pipeline/pipelinetest"
	"github.com/compactor-dev/compactor/wire"
)

const session = `{"type":"session","version":3,"id":"019a48fc-d300-72c8-a6b9-f316c6e71060","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/tmp"}
{"type":"message","id":"a9835828","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}
`

func writeSession(t testing.TB, dir, rel string) string {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(session), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A handler under test gets the job with its resolved file, its effect is on disk, its
// result comes back as the job's event; a paused server queues jobs until Resume; Close
// removes what the server made.
func TestServer(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	h := pipeline.HandlerFunc(func(ctx context.Context, job wire.Job, file string) (wire.Result, error) {
		calls.Add(1)
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return wire.Result{}, err
		}
		defer f.Close()
		_, err = fmt.Fprintf(f, `{"type":"compaction","id":"c0ffee00","parentId":%q}`+"\n", job.ExpectLeafID)
		return wire.Result{Tally: wire.Tally{EntryID: "c0ffee00", TokensBefore: 900, TokensAfter: 90}}, err
	})
	srv, err := pipelinetest.New(pipelinetest.Options{Handler: h, Paused: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	file := writeSession(t, srv.StoreDir, "--tmp--/s.jsonl")
	job, err := srv.JobFor(file)
	if err != nil {
		t.Fatal(err)
	}
	if job.Store != "default" || job.Path != "--tmp--/s.jsonl" || job.SessionID != "019a48fc-d300-72c8-a6b9-f316c6e71060" || job.ExpectLeafID != "a9835828" {
		t.Fatalf("job %+v", job)
	}
	done := make(chan fleetops.EnqueueResult, 1)
	go func() {
		r, err := srv.Enqueue(context.Background(), job, true, 30*time.Second)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	// The job is queued, and waits: no worker runs.
	js, _ := srv.Conn.JetStream()
	waitfor.Until(t, "the job queued", func() bool {
		info, err := js.StreamInfo(wire.StreamJobs)
		return err == nil && info.State.Msgs == 1
	})
	if calls.Load() != 0 {
		t.Fatal("a paused server ran a job")
	}
	srv.Resume()
	r := <-done
	if r.Event == nil || r.Event.Outcome != pipeline.OutcomeDone || r.Event.EntryID != "c0ffee00" || r.Event.Path != job.Path || calls.Load() != 1 {
		t.Fatalf("event %+v after %d calls", r.Event, calls.Load())
	}
	data, _ := os.ReadFile(file)
	if !strings.HasSuffix(string(data), `{"type":"compaction","id":"c0ffee00","parentId":"a9835828"}`+"\n") {
		t.Fatalf("file:\n%s", data)
	}
	if !strings.HasPrefix(srv.URL(), "nats://127.0.0.1:") || strings.HasSuffix(srv.URL(), ":4222") {
		t.Errorf("URL %s: want a random loopback port", srv.URL())
	}
	dir := srv.StoreDir
	srv.Close()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("store dir %s left behind (%v)", dir, err)
	}
}

// Start fails the test when the service cannot start (here: a store name that cannot be a
// subject token).
func TestStartFailsTheTest(t *testing.T) {
	t.Parallel()
	ft := &fakeTB{TB: t}
	func() {
		defer func() { _ = recover() }()
		pipelinetest.Start(ft, pipelinetest.Options{StoreName: "bad.name"})
	}()
	if !strings.Contains(ft.fatal, "bad.name") {
		t.Fatalf("Start reported %q", ft.fatal)
	}
}

type fakeTB struct {
	testing.TB
	fatal string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	panic("fatal")
}

// A handler is tested against the real service: the job reaches it with its file, and its
// answer comes back as the job's event.
func Example() {
	h := pipeline.HandlerFunc(func(ctx context.Context, job wire.Job, file string) (wire.Result, error) {
		// A real handler plans, summarizes and appends; this one only says what it got.
		return wire.Result{Tally: wire.Tally{Outcome: pipeline.OutcomeSkipped, Reason: "seen " + job.Path + " of session " + job.SessionID}}, nil
	})
	srv, err := pipelinetest.New(pipelinetest.Options{Handler: h})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	file := filepath.Join(srv.StoreDir, "--home-u-proj--", "s.jsonl")
	_ = os.MkdirAll(filepath.Dir(file), 0o755)
	_ = os.WriteFile(file, []byte(session), 0o644)
	job, err := srv.JobFor(file)
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := srv.Enqueue(context.Background(), job, true, time.Minute)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Event.Outcome, res.Event.Reason)
	// Output: skipped seen --home-u-proj--/s.jsonl of session 019a48fc-d300-72c8-a6b9-f316c6e71060
}
