package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/proctest"
	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
)

// streamNames lists the streams on the server, sorted.
func streamNames(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l := js.StreamNames(ctx)
	var out []string
	for n := range l.Name() {
		out = append(out, n)
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// A client creates nothing: on a server no service has set up, Start fails at once naming
// the stream that is missing and that `compactor run` sets it up, and the server is left
// as it was. Once a service has set it up, the client opens it, and changes nothing.
func TestClientCreatesNothing(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	cfg := b.config(nil)
	cfg.Client, cfg.Setup, cfg.StartupTimeout = true, false, 30*time.Second
	worker := b.config(&fakeHandler{})
	worker.Setup, worker.StartupTimeout = false, 30*time.Second
	for _, c := range []Config{cfg, worker} {
		s, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = s.Start(context.Background())
		s.Close()
		var ns *fleetops.NotSetUpError
		if !errors.As(err, &ns) || !strings.Contains(err.Error(), "this NATS holds no fleet settings") || !strings.Contains(err.Error(), "compactor setup") {
			t.Fatalf("Start on an empty server (client %v): %v", c.Client, err)
		}
		// A retried refusal lasts StartupTimeout; half of it cannot be reached by a slow machine.
		if d := time.Since(start); d >= c.StartupTimeout/2 {
			t.Errorf("the refusal took %s: a missing setup was retried", d)
		}
		if names := streamNames(t, b.js); len(names) != 0 {
			t.Fatalf("a process without Setup created %v", names)
		}
	}

	svc := b.config(&fakeHandler{})
	startService(t, svc)
	before := streamNames(t, b.js)
	jobs := streamInfoOf(t, b.js, wire.StreamJobs)
	cfg.DuplicateWindow = 7 * time.Minute // what a client would have set before: now it is not its to set
	c3, _ := New(cfg)
	defer c3.Close()
	if err := c3.Start(context.Background()); err != nil {
		t.Fatalf("client Start after the setup: %v", err)
	}
	if after := streamNames(t, b.js); !slices.Equal(before, after) {
		t.Errorf("streams before the client %v, after %v", before, after)
	}
	if got := streamInfoOf(t, b.js, wire.StreamJobs); got.Config.Duplicates != jobs.Config.Duplicates || !got.Created.Equal(jobs.Created) {
		t.Errorf("the client changed COMPACTOR_JOBS: duplicate window %s -> %s", jobs.Config.Duplicates, got.Config.Duplicates)
	}
	if _, err := c3.startWorkers(context.Background()); err == nil {
		t.Error("a client started workers")
	}

	// A worker of a store that was never set up: its consumer is named, and the command.
	other := worker
	other.Stores = []Store{{Name: "other", Dir: b.dir}}
	o, _ := New(other)
	defer o.Close()
	if err := o.Start(context.Background()); !strings.Contains(fmt.Sprint(err), "consumer compactor-other of COMPACTOR_JOBS does not exist") ||
		!strings.Contains(fmt.Sprint(err), "compactor setup --store other") {
		t.Fatalf("worker of a store not set up: %v", err)
	}
	// A bucket gone: named.
	if err := b.js.DeleteKeyValue(context.Background(), wire.BucketSweep); err != nil {
		t.Fatal(err)
	}
	short := cfg
	short.StartupTimeout = time.Second // no answer may be an election: retried, said when it lasts
	c4, _ := New(short)
	defer c4.Close()
	if err := c4.Start(context.Background()); !strings.Contains(fmt.Sprint(err), "bucket COMPACTOR_SWEEP answers no direct get") || !strings.Contains(fmt.Sprint(err), "compactor setup") {
		t.Fatalf("client Start without the sweeps' bucket: %v", err)
	}
}

func streamInfoOf(t *testing.T, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo()
}

// A service changes a setting on the server only when its configuration differs, and says
// so in one log line per setting with the old and the new value; a second service with the
// same configuration changes and logs nothing.
func TestServiceChangesOnlyWhatDiffers(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	start := func(dup, ackWait time.Duration) string {
		var log proctest.Buffer
		cfg := b.config(&fakeHandler{})
		cfg.DuplicateWindow, cfg.AckWait, cfg.Logger = dup, ackWait, logger(&log)
		startService(t, cfg)
		return log.String()
	}
	changes := func(log string) []string {
		var out []string
		for l := range strings.Lines(log) {
			if strings.Contains(l, "updating a setting on the server") {
				out = append(out, strings.TrimSpace(l[strings.Index(l, "msg="):]))
			}
		}
		return out
	}
	if got := changes(start(2*time.Minute, time.Second)); len(got) != 0 {
		t.Fatalf("the first service (it creates) logged changes: %q", got)
	}
	if got := changes(start(2*time.Minute, time.Second)); len(got) != 0 {
		t.Fatalf("a second service with the same configuration changed: %q", got)
	}
	got := changes(start(5*time.Minute, 3*time.Second))
	want := []string{
		`msg="updating a setting on the server: this process's configuration differs" stream=COMPACTOR_JOBS setting=duplicate_window old=2m0s new=5m0s`,
		`msg="updating a setting on the server: this process's configuration differs" stream=COMPACTOR_DLQ setting=duplicate_window old=2m0s new=5m0s`,
		`msg="updating a setting on the server: this process's configuration differs" consumer=compactor-default setting=ack_wait old=1s new=3s`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("changes logged:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if d := streamInfoOf(t, b.js, wire.StreamJobs).Config.Duplicates; d != 5*time.Minute {
		t.Errorf("COMPACTOR_JOBS duplicate window %s after the update", d)
	}
}

// Setups of different stores at once (two hosts' `run --setup` starting together) each
// keep their store in the settings record: it is read and written as one step. Before, the
// last write won, and the operator's view, which shows the stores of the record, lost a
// store (TestStatusShowsVersionSkew failed 1 run in 3 under load).
func TestSetupsAtOnceKeepEveryStore(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	if _, err := fleetops.Setup(ctx, b.nc, fleetops.SetupConfig{Stores: []string{"first"}}, false, false, nil); err != nil {
		t.Fatal(err)
	}
	const n = 8
	var g errgroup.Group
	for i := range n {
		g.Go(func() error {
			nc, err := nats.Connect(b.url)
			if err != nil {
				return err
			}
			defer nc.Close()
			_, err = fleetops.Setup(ctx, nc, fleetops.SetupConfig{Stores: []string{fmt.Sprintf("s%d", i)}}, false, false, nil)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	f, err := fleetops.ReadFleet(ctx, b.nc)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Stores) != n+1 {
		t.Errorf("the settings record lists %d stores after %d setups at once: %v", len(f.Stores), n+1, f.Stores)
	}
}

// A settings record read as missing is read again before the start gives up: a replicated
// stream's followers answer direct gets, and one that has not applied a setup's write yet
// answers "no message" (TestReplicasNeverLowered's `run --setup` was refused so in CI:
// "this NATS holds no fleet settings" after its own setup had written them). Here the
// record is absent when ReadFleet first reads it and written once that read is seen.
func TestFleetSettingsAbsentAtFirstRead(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	// The settings bucket, as a bucket of the library's defaults, without the record (the
	// setup below makes it the setup's own).
	if _, err := b.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: wire.BucketSettings}); err != nil {
		t.Fatal(err)
	}
	key := wire.KVSubjectRoot + wire.BucketSettings + "." + wire.SettingsKey
	if _, err := fleetops.DirectLast(ctx, b.nc, "KV_"+wire.BucketSettings, key); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("the record is not absent before the read: %v", err)
	}
	// A second connection sees the reads (the server answers them; this one does not) and
	// sets up again after the first.
	watcher, err := nats.Connect(b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close()
	reads := make(chan struct{}, 64)
	if _, err := watcher.Subscribe(access.DirectGetPrefix+"KV_"+wire.BucketSettings+"."+key, func(*nats.Msg) { reads <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	if err := watcher.Flush(); err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() {
		<-reads
		_, err := fleetops.Setup(ctx, watcher, fleetops.SetupConfig{Stores: []string{"first"}}, false, false, nil)
		wrote <- err
	}()
	f, err := fleetops.ReadFleet(ctx, b.nc)
	if werr := <-wrote; werr != nil {
		t.Fatal(werr)
	}
	if err != nil {
		t.Fatalf("a record written after the first read was reported missing: %v", err)
	}
	if !slices.Equal(f.Stores, []string{"first"}) || len(reads) == 0 {
		t.Errorf("read %v after %d more reads", f.Stores, len(reads))
	}
}
