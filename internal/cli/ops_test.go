package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/waitfor"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/sweep"
	"github.com/compactor-dev/compactor/wire"
)

// The operations flags end to end through the command line: run on --listen with port 0
// and a token, JetStream settings from a --config file, a second service on the data
// directory refused at once, run --once joining the running service (and refused without
// its token), sweep and dlq finding it through --data-dir. Not parallel: it sets the hook.
func TestRunListenLockAndJoin(t *testing.T) {
	dir, data := t.TempDir(), t.TempDir()
	file := filepath.Join(dir, "s.jsonl")
	if err := os.WriteFile(file, []byte(`{"type":"session","version":3,"id":"abc","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "ops.json")
	if err := os.WriteFile(conf, []byte(`{"ack-wait": "2m", "max-deliver": 7, "lease-ttl": "30s", "duplicate-window": "5m", "replicas": 1, "startup-timeout": "10s"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	useSkippingHandler(t)
	run := func(ctx context.Context, token string, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Run(ctx, &Env{Args: args, Stdout: &out, Stderr: &errb, Getenv: func(k string) string {
			if k == "NATS_TOKEN" {
				return token
			}
			return ""
		}})
		return code, out.String(), errb.String()
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan int, 1)
	go func() {
		code, _, errOut := run(ctx, "tok-123", "run", "--store", "default="+dir, "--data-dir", data, "--listen", "127.0.0.1:0",
			"--config", conf, "--log-format", "json")
		if code != ExitOK {
			t.Errorf("run: exit %d\n%s", code, errOut)
		}
		served <- code
	}()
	defer func() { cancel(); <-served }()
	var info *access.ServiceInfo
	waitfor.Until(t, "the service file", func() bool {
		info = access.RunningService(data)
		return info != nil
	})
	if info.Auth != "token" || strings.HasSuffix(info.ClientURL, ":4222") {
		t.Fatalf("service file: %+v", info)
	}

	// The settings from the config file are the consumer's.
	nc, err := nats.Connect(info.ClientURL, nats.Token("tok-123"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	var ci *jetstream.ConsumerInfo
	waitfor.Until(t, "the consumer", func() bool {
		c, err := js.Consumer(context.Background(), wire.StreamJobs, fleetops.ConsumerName("default"))
		if err == nil {
			ci = c.CachedInfo()
		}
		return err == nil
	})
	if ci.Config.AckWait != 2*time.Minute || ci.Config.MaxDeliver != -1 {
		t.Fatalf("consumer config: %+v", ci)
	}
	var fleet string // written last by the setup
	waitfor.Until(t, "the fleet settings", func() bool {
		if e, err := js.Stream(context.Background(), "KV_"+wire.BucketSettings); err == nil {
			if m, err := e.GetLastMsgForSubject(context.Background(), "$KV."+wire.BucketSettings+".fleet"); err == nil {
				fleet = string(m.Data)
			}
		}
		return fleet != ""
	})
	if !strings.Contains(fleet, `"maxDeliver":7`) || !strings.Contains(fleet, `"leaseTtl":"30s"`) {
		t.Fatalf("fleet settings: %s", fleet)
	}
	if st, err := js.Stream(context.Background(), wire.StreamJobs); err != nil || st.CachedInfo().Config.Duplicates != 5*time.Minute {
		t.Errorf("jobs stream: %v %+v", err, st)
	}

	start := time.Now()
	code, _, errOut := run(context.Background(), "tok-123", "run", "--store", "default="+dir, "--data-dir", data, "--log-format", "json")
	if code != ExitFailed || !strings.Contains(errOut, "is in use by another compactor") || !strings.Contains(errOut, info.ClientURL) {
		t.Errorf("second service: exit %d\n%s", code, errOut)
	}
	// A retried refusal would last the start-up timeout (a minute by default).
	if d := time.Since(start); d >= pipeline.DefaultStartupTimeout/2 {
		t.Errorf("second service refused after %s: it was retried", d)
	}
	code, _, errOut = run(context.Background(), "", "run", "--once", "--store", "default="+dir, "--data-dir", data, "--idle", "0", "--log-format", "json")
	if code != ExitFailed || !strings.Contains(errOut, "requires token authentication") {
		t.Errorf("run --once without the token: exit %d\n%s", code, errOut)
	}
	code, out, errOut := run(context.Background(), "tok-123", "run", "--once", "--store", "default="+dir, "--data-dir", data, "--idle", "0", "--log-format", "json")
	if code != ExitOK || !strings.Contains(out, "sweep: 1 files") || !strings.Contains(errOut, "working through its NATS as a client") {
		t.Errorf("run --once next to the service: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = run(context.Background(), "tok-123", "sweep", "--store", "default="+dir, "--data-dir", data, "--idle", "0", "--config", conf, "--log-format", "json")
	if code != ExitOK || !strings.Contains(out, "sweep: 1 files") {
		t.Errorf("sweep through --data-dir: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = run(context.Background(), "tok-123", "dlq", "list", "--data-dir", data)
	if code != ExitOK || !strings.Contains(out, "no dead letters") {
		t.Errorf("dlq through --data-dir: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := run(context.Background(), "", "run", "--store", "default="+dir, "--data-dir", t.TempDir(), "--listen", "nonsense"); code != ExitBadUse || !strings.Contains(errOut, "--listen") {
		t.Errorf("bad --listen: exit %d %s", code, errOut)
	}
}

// useSkippingHandler sets the NewPipelineHandler hook, until the test ends, to a handler
// that skips every job and an assessor that finds session "abc" over budget.
func useSkippingHandler(t *testing.T) {
	old := NewPipelineHandler
	t.Cleanup(func() { NewPipelineHandler = old })
	NewPipelineHandler = func(cfg pipeline.Config) (pipeline.Handler, sweep.Assessor, error) {
		h := pipeline.HandlerFunc(func(ctx context.Context, job wire.Job, f string) (wire.Result, error) {
			return wire.Result{Tally: wire.Tally{Outcome: pipeline.OutcomeSkipped, Reason: "nothing to do"}}, nil
		})
		a := sweep.AssessorFunc(func(ctx context.Context, f string) (sweep.Assessment, error) {
			return sweep.Assessment{SessionID: "abc", LeafID: "l1", OverBudget: true, Version: 3, HasAssistant: true}, nil
		})
		return h, a, nil
	}
}
