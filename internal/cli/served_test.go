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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor-dev/compactor/internal/natstest"
	"github.com/compactor-dev/compactor/operator"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sweep"
	"github.com/compactor-dev/compactor/wire"
)

// Two services on one NATS, each serving its own store (hostA, hostB):
// jobs go to the service of their store; a job for a store nobody serves ("default", what
// enqueue --store-dir names a store without --store) is refused, naming the stores that
// are served, by enqueue, sweep and dlq retry, and nothing is queued; with
// --allow-unserved it is queued, and the wait that times out says it is still queued, not
// taken, and why. A wait that times out on a job a worker holds says that too. Not
// parallel: it sets the NewPipelineHandler hook.
func TestUnservedStoreSaid(t *testing.T) {
	url := natstest.StartServer(t).ClientURL()
	release := make(chan struct{})
	old := NewPipelineHandler
	t.Cleanup(func() { NewPipelineHandler = old })
	NewPipelineHandler = func(cfg pipeline.Config) (pipeline.Handler, sweep.Assessor, error) {
		served := cfg.Stores[0].Name
		h := pipeline.HandlerFunc(func(ctx context.Context, job wire.Job, f string) (wire.Result, error) {
			if job.Reason == "hold" {
				select {
				case <-release:
				case <-ctx.Done():
					return wire.Result{}, ctx.Err()
				}
			}
			return wire.Result{Tally: wire.Tally{Outcome: pipeline.OutcomeSkipped, Reason: "worked by the service of " + served}}, nil
		})
		a := sweep.AssessorFunc(func(ctx context.Context, f string) (sweep.Assessment, error) {
			s, err := sessionio.ReadFile(f) // the session a job names is its file's
			if err != nil {
				return sweep.Assessment{}, err
			}
			return sweep.Assessment{SessionID: s.Header.ID, LeafID: "a1", OverBudget: true, Version: 3, HasAssistant: true}, nil
		})
		return h, a, nil
	}
	dirs := map[string]string{}
	files, ids := map[string]string{}, map[string]string{}
	for i, st := range []string{"hostA", "hostB", "default", "hold"} {
		dirs[st] = t.TempDir()
		if st == "hold" { // a second session of store hostB
			dirs[st] = dirs["hostB"]
		}
		id := "019a0000-0000-7000-8000-00000000000" + string(rune('1'+i))
		ids[st] = id
		files[st] = filepath.Join(dirs[st], "--p--", st+".jsonl")
		if err := os.MkdirAll(filepath.Dir(files[st]), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(files[st], []byte(`{"type":"session","version":3,"id":"`+id+`","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}`+"\n"+
			`{"type":"message","id":"a1","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}`+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var services []*cliProc
	for _, st := range []string{"hostA", "hostB"} {
		p := startCLI([]string{"run", "--setup", "--nats-url", url, "--store", st + "=" + dirs[st], "--data-dir", t.TempDir(), "--idle", "0",
			"--log-format", "json", "--drain-timeout", "1s"})
		services = append(services, p)
		if err := p.ready(); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		close(release)
		for _, p := range services {
			p.stop(t)
		}
	}()
	enqueue := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Run(context.Background(), &Env{Args: append([]string{"enqueue", "--nats-url", url}, args...), Stdout: &out, Stderr: &errb,
			Getenv: func(string) string { return "" }})
		return code, out.String(), errb.String()
	}

	// Each store's job is worked by its own service.
	for _, st := range []string{"hostA", "hostB"} {
		code, out, errOut := enqueue(files[st], "--store-dir", dirs[st], "--store", st, "--wait", "--timeout", "2m")
		var ev wire.Event
		if code != ExitOK || json.Unmarshal([]byte(out), &ev) != nil || ev.Store != st || ev.Reason != "worked by the service of "+st {
			t.Fatalf("enqueue for %s: exit %d\n%s\n%s", st, code, out, errOut)
		}
	}

	// Nobody serves "default": refused, the served stores named, nothing queued.
	const served = "stores served now: hostA (1 worker), hostB (1 worker)"
	code, _, errOut := enqueue(files["default"], "--store-dir", dirs["default"], "--wait", "--timeout", "30s")
	if code != ExitFailed || !strings.Contains(errOut, "not queued: no worker serves store default (it has no consumer compactor-default") ||
		!strings.Contains(errOut, served) || !strings.Contains(errOut, "--allow-unserved") {
		t.Fatalf("enqueue for an unserved store: exit %d\n%s", code, errOut)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if n := jobsOf(t, js, "default"); n != 0 {
		t.Fatalf("%d jobs queued for the unserved store", n)
	}

	// sweep: refused as a whole when one of its stores is not served.
	code, out, errOut := runCLI(t, "sweep", "--nats-url", url, "--store", "hostA="+dirs["hostA"], "--store", "default="+dirs["default"], "--idle", "0")
	if code != ExitFailed || out != "" || !strings.Contains(errOut, "no worker serves store default") || !strings.Contains(errOut, served) {
		t.Fatalf("sweep with an unserved store: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, "sweep", "--nats-url", url, "--store", "hostA="+dirs["hostA"], "--idle", "0"); code != ExitOK || !strings.Contains(out, "1 enqueued") {
		t.Fatalf("sweep of a served store: exit %d\n%s\n%s", code, out, errOut)
	}

	// With --allow-unserved the job is queued; its wait times out, saying why.
	code, _, errOut = enqueue(files["default"], "--store-dir", dirs["default"], "--allow-unserved", "--wait", "--timeout", "1s")
	for _, want := range []string{"warning: no worker serves store default", "queued anyway (--allow-unserved)", "did not end in time",
		"the job is still queued and no worker has taken it", served} {
		if !strings.Contains(errOut, want) {
			t.Errorf("enqueue --allow-unserved --wait: no %q in\n%s", want, errOut)
		}
	}
	if code != ExitFailed || jobsOf(t, js, "default") != 1 {
		t.Fatalf("enqueue --allow-unserved --wait: exit %d, %d jobs queued for default", code, jobsOf(t, js, "default"))
	}

	// A job a worker holds: the timed-out wait says the worker took it and the store is served.
	code, _, errOut = enqueue(files["hold"], "--store-dir", dirs["hostB"], "--store", "hostB", "--reason", "hold", "--wait", "--timeout", "1s")
	if code != ExitFailed || !strings.Contains(errOut, "the job is still queued and a worker has taken it") || !strings.Contains(errOut, "store hostB is served") {
		t.Fatalf("a held job's wait: exit %d\n%s", code, errOut)
	}

	// dlq retry: a dead letter of the unserved store stays, with the reason; one of a
	// served store is retried.
	for _, st := range []string{"default", "hostA"} {
		sid := ids[st] // the session its file holds
		job, _ := json.Marshal(wire.Job{V: 1, Kind: wire.KindCompact, Store: st, Path: "--p--/" + st + ".jsonl", SessionID: sid,
			ID: "dead-" + st, Reason: "test", RequestedAt: time.Now().UTC()})
		dl, _ := json.Marshal(wire.DeadLetter{V: 1, Subject: wire.JobSubject(st, sid, wire.KindCompact),
			Job: job, Reason: "failed", At: time.Now().UTC()})
		if _, err := js.Publish(context.Background(), wire.DLQSubject(st, sid), dl); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut = runCLI(t, "dlq", "retry", "--all", "--nats-url", url, "--json")
	var results []operator.RetryResult
	if err := json.Unmarshal([]byte(out), &results); err != nil || code != ExitFailed || len(results) != 2 {
		t.Fatalf("dlq retry: exit %d, %v\n%s\n%s", code, err, out, errOut)
	}
	for _, r := range results {
		switch r.Store {
		case "default":
			if r.Queued || !strings.Contains(r.Error, "no worker serves store default") {
				t.Errorf("dlq retry of the unserved store: %+v", r)
			}
		case "hostA":
			if !r.Queued || r.Error != "" {
				t.Errorf("dlq retry of a served store: %+v", r)
			}
		}
	}
	if !strings.Contains(errOut, served) {
		t.Errorf("dlq retry does not name the served stores:\n%s", errOut)
	}
	if code, out, _ := runCLI(t, "dlq", "list", "--nats-url", url, "--json"); code != ExitOK || !strings.Contains(out, `"store": "default"`) || strings.Contains(out, `"store": "hostA"`) {
		t.Errorf("dead letters left: exit %d\n%s", code, out)
	}
}

// jobsOf counts the jobs queued for a store.
func jobsOf(t *testing.T, js jetstream.JetStream, store string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, wire.StreamJobs)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("compactor.jobs."+store+".>"))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}
