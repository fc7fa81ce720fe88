package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/wire"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor-dev/compactor/internal/cli/command"
	"github.com/compactor-dev/compactor/internal/cli/status"
	"github.com/compactor-dev/compactor/internal/natstest"
	"github.com/compactor-dev/compactor/pipeline"
)

// compactor status shows each store's workers with their version, job versions and jobs in
// flight, and says when versions differ: two services of different versions on store
// "default" (one working job versions 1 and 2), and a `compactor run` on store "other",
// whose beat carries this binary's version.
func TestStatusShowsVersionSkew(t *testing.T) {
	t.Parallel()
	url := natstest.StartServer(t).ClientURL()
	dir := t.TempDir()
	idle := pipeline.HandlerFunc(func(ctx context.Context, job wire.Job, f string) (wire.Result, error) {
		return wire.Result{Tally: wire.Tally{Outcome: pipeline.OutcomeSkipped}}, nil
	})
	for _, c := range []struct {
		version  string
		versions []int
	}{{"v0.9.0", []int{1}}, {"v0.10.0", []int{1, 2}}} {
		svc, err := pipeline.New(pipeline.Config{Stores: []pipeline.Store{{Name: "default", Dir: dir}}, NATS: access.NATSConfig{URL: url}, Setup: true,
			Idle: -1, Handler: idle, Version: c.version, JobVersions: c.versions})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done; svc.Close() })
	}
	run := startCLI([]string{"run", "--setup", "--nats-url", url, "--store", "other=" + t.TempDir(), "--data-dir", t.TempDir(), "--log-format", "json"})
	if err := run.ready(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.stop(t) })

	var rep status.Report
	waitfor.Until(t, "three workers reported", func() bool {
		code, out, errs := runCLI(t, "status", "--nats-url", url, "--json")
		if code != 0 {
			t.Fatalf("status --json: exit %d: %s", code, errs)
		}
		rep = status.Report{}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		n := 0
		for _, st := range rep.Stores {
			n += len(st.Workers)
		}
		return n == 3
	})
	code, out, errs := runCLI(t, "status", "--nats-url", url)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errs)
	}
	t.Logf("compactor status:\n%s", out)
	for _, want := range []string{
		"store default: 2 workers", "store other: 1 worker", "JOB VERSIONS", "v0.9.0", "v0.10.0", "1,2", command.Version(),
		"warning: the workers run different versions: " + command.Version() + " (1 worker), v0.10.0 (1 worker), v0.9.0 (1 worker)",
		"warning: store default: its workers work different job schema versions: 1 (1 worker), 1,2 (1 worker)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q", want)
		}
	}
	if strings.Contains(out, "store other: its workers") {
		t.Error("a store whose workers agree is warned about")
	}
	for _, st := range rep.Stores {
		for _, b := range st.Workers {
			if time.Since(b.At) > 30*time.Second || b.Concurrency == 0 || b.Host == "" || b.V != 1 {
				t.Errorf("beat %+v", b)
			}
		}
	}

	// A worker of a newer compactor whose beat is of a schema this one cannot read: listed
	// by its name, its version and job versions not read, and said.
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.Publish(context.Background(), "$KV.COMPACTOR_WORKERS.other.w-next", []byte(`{"v":2,"worker":"w-next","store":"other","host":{"name":"h"},"version":["v9"]}`)); err != nil {
		t.Fatal(err)
	}
	code, out, errs = runCLI(t, "status", "--nats-url", url, "--store", "other")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errs)
	}
	t.Logf("compactor status --store other:\n%s", out)
	for _, want := range []string{"store other: 2 workers", "w-next", "newer", "warning: worker w-next of store other reports in a beat of schema version 2"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q", want)
		}
	}
}

// The operator's commands read --config once their command line is parsed: a setting the
// command does not have is refused naming the file, and an argument they do not take is
// refused, before any connection is tried.
func TestOperatorCommandsReadTheirConfig(t *testing.T) {
	t.Parallel()
	conf := filepath.Join(t.TempDir(), "compactor.json")
	if err := os.WriteFile(conf, []byte(`{"no-such-setting": 1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"status"}, {"events", "--store", "a"}, {"console"}, {"pause", "a"}} {
		code, _, errOut := runCLI(t, append(args, "--config", conf)...)
		if code != ExitBadUse || !strings.Contains(errOut, "--config "+conf+`: unknown setting "no-such-setting"`) {
			t.Errorf("%v --config: exit %d, %q; want %d naming the file and the setting", args, code, errOut, ExitBadUse)
		}
		if args[0] == "pause" {
			continue
		}
		code, _, errOut = runCLI(t, append(args, "extra")...)
		if code != ExitBadUse || !strings.Contains(errOut, `unexpected argument "extra"`) {
			t.Errorf("%v extra: exit %d, %q; want %d, unexpected argument", args, code, errOut, ExitBadUse)
		}
	}
}
