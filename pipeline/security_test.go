package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/agents"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/proctest"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/sweep"
	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Hosts with their own lease TTLs: host A works with a lease TTL of 6 s (60 s scaled down),
// host C starts for another store with 1 s (10 s). Were a start to set the streams and
// buckets up from its own flags, the lease bucket's TTL would become 1 s for everyone, A's
// leases would expire before A renews them (every 2 s), and every attempt of A's job, a paid
// summary of 5 s, would be cancelled (measured on 21abee5: 5 attempts, 5 leases lost, the job
// dead-lettered, no compaction). A worker that is not the admin changes no shared setting
// and follows the fleet's lease TTL whatever its own flag: A's job ends at its first attempt.
func TestLeaseTTLIsTheFleets(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	file := filepath.Join(b.dir, "s.jsonl")
	sid, leaf := writeSession(t, b.dir, "s.jsonl")
	var calls atomic.Int32
	started := make(chan struct{}, 8)
	h := &fakeHandler{before: func(ctx context.Context, job wire.Job, f string) error {
		calls.Add(1)
		started <- struct{}{}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Second): // a paid summary
		}
		return nil
	}}
	var logs proctest.Buffer
	cfg := b.config(h)
	cfg.LeaseTTL, cfg.AckWait, cfg.Logger = 6*time.Second, 30*time.Second, logger(&logs)
	a := b.service(cfg) // the admin's setup (run --setup): the fleet's lease TTL is 6 s
	b.run(a)
	b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf})
	<-started

	var clog proctest.Buffer
	c := b.config(&fakeHandler{})
	c.Stores, c.Setup, c.LeaseTTL, c.Logger = []Store{{Name: "default", Dir: b.dir}}, false, time.Second, logger(&clog)
	cs := b.service(c) // a worker: binds, changes nothing
	b.run(cs)
	str, err := b.js.Stream(context.Background(), "KV_"+wire.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	if ttl := str.CachedInfo().Config.MaxAge; ttl != 6*time.Second {
		t.Errorf("lease bucket TTL after a worker with --lease-ttl 1s started: %s, want 6s", ttl)
	}
	if f, err := fleetops.ReadFleet(context.Background(), b.nc); err != nil || time.Duration(f.LeaseTTL) != 6*time.Second {
		t.Errorf("fleet settings after the worker started: %+v, %v", f, err)
	}
	if cs.leaseTTL() != 6*time.Second || !strings.Contains(clog.String(), "using the fleet's lease TTL") {
		t.Errorf("the worker's lease TTL is %s; its log:\n%s", cs.leaseTTL(), clog.String())
	}
	waitfor.Until(t, "the job to end", func() bool { return countType(t, file, "compaction") == 1 && b.pending() == 0 })
	if n := calls.Load(); n != 1 || strings.Contains(logs.String(), "lease lost") || strings.Contains(clog.String(), "lease lost") {
		t.Errorf("handler calls %d (want 1), lease lost: %v", n, strings.Contains(logs.String()+clog.String(), "lease lost"))
	}
	t.Logf("lease bucket TTL stayed %s; the job ended at attempt %d with no lease lost", str.CachedInfo().Config.MaxAge, calls.Load())
}

// A store has one owner: a second worker serving the same name from another directory
// refuses to start and names the first one's host and root; a copy of the directory (its
// marker with another inode) too; the same directory again (a restart, a second process)
// starts, and a store declared shared starts from anywhere.
func TestStoreHasOneOwner(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	first := b.config(&fakeHandler{})
	first.Stores = []Store{{Name: "hostA", Dir: b.dir}}
	b.service(first)
	host, _ := os.Hostname()

	other := t.TempDir()
	second := first
	second.Stores, second.Setup = []Store{{Name: "hostA", Dir: other}}, false
	s2, err := New(second)
	if err != nil {
		t.Fatal(err)
	}
	err = s2.Start(context.Background())
	s2.Close()
	var oe *fleetops.OwnerError
	if !errors.As(err, &oe) || oe.Other.Host != host || !strings.Contains(err.Error(), "store hostA is already served from another directory: host "+host) ||
		!strings.Contains(err.Error(), b.dir) || !strings.Contains(err.Error(), "--shared-store hostA") {
		t.Fatalf("a second root for store hostA: %v", err)
	}
	t.Logf("refused: %v", err)

	// A copy of the first root, marker included: another inode.
	copied := t.TempDir()
	marker, err := os.ReadFile(filepath.Join(b.dir, fleetops.MarkerFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(copied, fleetops.MarkerFile), marker, 0o644); err != nil {
		t.Fatal(err)
	}
	third := second
	third.Stores = []Store{{Name: "hostA", Dir: copied}}
	s3, _ := New(third)
	err = s3.Start(context.Background())
	s3.Close()
	if !errors.As(err, &oe) || !strings.Contains(err.Error(), "the same marker seen through another mount") {
		t.Fatalf("a copy of the root: %v", err)
	}

	again := second
	again.Stores = []Store{{Name: "hostA", Dir: b.dir}}
	b.service(again) // the same directory: a restart, a second process

	shared := second
	shared.SharedStores = []string{"hostA"}
	b.service(shared) // declared shared: one directory mounted on several hosts
}

// A prepared summary lives no longer than it is needed: deleted when the extension
// reports that Pi's hook ran (used, or Pi compacted past it), and when a job compacts
// the session.
func TestPreparedDeletedOnceUsed(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	sid, leaf := writeSession(t, b.dir, "s.jsonl")
	s := b.service(b.config(&fakeHandler{}))
	b.run(s)
	ctx := context.Background()
	put := func() {
		if err := s.Prepared().Put(ctx, "default", sid, []byte(`{"v":1,"summary":"someone's code"}`)); err != nil {
			t.Fatal(err)
		}
	}
	gone := func() bool { v, err := s.Prepared().Get(ctx, "default", sid); return err == nil && v == nil }
	put()
	rep, _ := json.Marshal(wire.HookReport{V: 1, Store: "default", SessionID: sid, Outcome: wire.HookHit, LatencyMs: 3})
	if err := b.nc.Publish(wire.HookSubject("default", sid), rep); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, "the used summary deleted", gone)

	put()
	r, err := fleetops.Enqueue(ctx, b.nc, wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf}, true, 20*time.Second)
	if err != nil || r.Event.Outcome != OutcomeDone {
		t.Fatalf("compact: %+v, %v", r, err)
	}
	waitfor.Until(t, "the summary compacted past deleted", gone)
}

// A user that may create a consumer on its own records can have it deliver them to any
// subject (NATS does not check where a consumer delivers against its creator's
// permissions). A bridge request or a hook report that arrives that way, not from a
// client, is ignored.
func TestDeliveredRequestsIgnored(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	sid, _ := writeSession(t, b.dir, "s.jsonl")
	var bridges atomic.Int32
	cfg := b.config(&fakeHandler{})
	cfg.Bridger = agents.BridgerFunc(func(ctx context.Context, req wire.BridgeRequest, file string, prepared []byte) ([]byte, error) {
		bridges.Add(1)
		return prepared, nil
	})
	s := b.service(cfg)
	b.run(s)
	ctx := context.Background()
	if err := s.Prepared().Put(ctx, "default", sid, []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	req, _ := json.Marshal(wire.BridgeRequest{V: 1, Store: "default", Path: "s.jsonl", SessionID: sid, LeafID: "x", FirstKeptEntryID: "y"})
	// Another store's records, delivered into this store's bridge subject.
	kv := fleetops.OpenBucket(b.js, wire.BucketSweep)
	if _, err := kv.Put(ctx, "other.forged", req); err != nil {
		t.Fatal(err)
	}
	seen := make(chan *nats.Msg, 4)
	sub, err := b.nc.ChanSubscribe(wire.BridgeSubject("default", sid), seen)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if _, err := b.js.CreateConsumer(ctx, "KV_"+wire.BucketSweep, jetstream.ConsumerConfig{Name: "forger", FilterSubject: "$KV." + wire.BucketSweep + ".other.>",
		DeliverSubject: wire.BridgeSubject("default", sid), AckPolicy: jetstream.AckNonePolicy}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-seen:
		if !fleetops.Delivered(m) {
			t.Fatalf("a consumer's delivery not told apart: reply %q", m.Reply)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the forged request was not delivered at all")
	}
	// A client's request is answered; it went after the forged one on the same subject.
	if _, err := b.nc.Request(wire.BridgeSubject("default", sid), req, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := bridges.Load(); n != 1 {
		t.Fatalf("%d bridges, want 1 (the client's; the delivered one ignored)", n)
	}
}

// The embedded server requires a token it generates into the data directory (its
// owner's alone), which a client on this machine finds; --insecure-local lets anyone in.
func TestEmbeddedServerRequiresItsToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeSession(t, dir, "s.jsonl")
	data := t.TempDir()
	cfg := Config{Stores: []Store{{Name: "default", Dir: dir}}, DataDir: data, EmbeddedPort: -1, Idle: -1, Handler: &fakeHandler{}}
	s := startService(t, cfg)
	fi, err := os.Stat(filepath.Join(data, access.TokenFileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, %v", fi, err)
	}
	if nc, err := nats.Connect(s.ClientURL()); err == nil {
		nc.Close()
		t.Fatal("an anonymous connection was let in")
	}
	local := access.LocalNATS(data, access.NATSConfig{})
	if local.URL != s.ClientURL() || local.TokenFile == "" {
		t.Fatalf("LocalNATS = %+v", local)
	}
	nc, err := local.Connect()
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	if info := access.RunningService(data); info == nil || info.Auth != "token" || info.TokenFile == "" {
		t.Errorf("service file: %+v", info)
	}
	s.Close()

	open := cfg
	open.DataDir, open.InsecureLocal = t.TempDir(), true
	o := startService(t, open)
	nc2, err := nats.Connect(o.ClientURL())
	if err != nil {
		t.Fatalf("--insecure-local: %v", err)
	}
	nc2.Close()
	if _, err := os.Stat(filepath.Join(open.DataDir, access.TokenFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("--insecure-local wrote a token: %v", err)
	}
}

// An existing deployment upgrades with one step, `compactor setup --migrate`, and loses
// no queued job: layout 1 (keys not under their store's name, a
// consumer bounding deliveries, no settings record) is refused by workers and by a plain
// setup; the migration moves the sweep records and attempt counts, drops the stale
// leases, sets up the rest, and a worker then works every job that was queued.
func TestMigrationKeepsQueuedJobs(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	// Layout 1, as the service before it created it.
	for _, sc := range []jetstream.StreamConfig{
		{Name: wire.StreamJobs, Subjects: []string{wire.JobsPrefix + ">"}, Retention: jetstream.WorkQueuePolicy, MaxMsgsPerSubject: 1, Discard: jetstream.DiscardNew, DiscardNewPerSubject: true, Duplicates: 2 * time.Minute},
		{Name: wire.StreamEvents, Subjects: []string{wire.EventsPrefix + ">"}, MaxAge: fleetops.DefaultEventsMaxAge, MaxMsgsPerSubject: 32},
		{Name: wire.StreamDLQ, Subjects: []string{wire.DLQPrefix + ">"}, MaxAge: fleetops.DefaultDLQMaxAge},
	} {
		if _, err := b.js.CreateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	for _, kc := range []jetstream.KeyValueConfig{{Bucket: wire.BucketWorkers, TTL: fleetops.WorkerBeatTTL}, {Bucket: wire.BucketLeases, TTL: fleetops.DefaultLeaseTTL},
		{Bucket: wire.BucketSweep}, {Bucket: wire.BucketAttempts, TTL: fleetops.AttemptsTTL}, {Bucket: wire.BucketPrepared, TTL: fleetops.DefaultPreparedTTL}} {
		kc.History = 1
		if _, err := b.js.CreateKeyValue(ctx, kc); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.js.CreateConsumer(ctx, wire.StreamJobs, jetstream.ConsumerConfig{Durable: fleetops.ConsumerName("default"), FilterSubject: wire.JobsPrefix + "default.>",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute, MaxDeliver: fleetops.DefaultMaxDeliver + 50, MaxAckPending: 10000}); err != nil {
		t.Fatal(err)
	}
	const queued = 5
	var seqs []uint64
	for i := range queued {
		rel := fmt.Sprintf("p/s%d.jsonl", i)
		sid, leaf := writeSession(t, b.dir, rel)
		r := b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: rel, SessionID: sid, ExpectLeafID: leaf})
		seqs = append(seqs, r.Seq)
		if i == 0 {
			var job wire.Job
			str, _ := b.js.Stream(ctx, wire.StreamJobs) // the old stream allows no direct get
			m, err := str.GetLastMsgForSubject(ctx, wire.JobSubject("default", sid, wire.KindCompact))
			if err != nil {
				t.Fatal(err)
			}
			_ = json.Unmarshal(m.Data, &job)
			kv, _ := b.js.KeyValue(ctx, wire.BucketAttempts)
			sum := strings.TrimPrefix(fleetops.AttemptKey("x", r.Seq, job.ID), "x.")
			if _, err := kv.Put(ctx, "a."+sum, []byte("1")); err != nil {
				t.Fatal(err)
			}
			lk, _ := b.js.KeyValue(ctx, wire.BucketLeases)
			if _, err := lk.Put(ctx, "s.default."+wire.SessionToken(sid), []byte(`{"worker":"gone"}`)); err != nil {
				t.Fatal(err)
			}
			sw, _ := b.js.KeyValue(ctx, wire.BucketSweep)
			rec, _ := json.Marshal(sweep.Record{Path: rel, Size: 1, At: time.Now()})
			if _, err := sw.Put(ctx, "f."+sweep.Key("default", rel), rec); err != nil {
				t.Fatal(err)
			}
		}
	}

	worker := b.config(&fakeHandler{})
	worker.Setup = false
	w, _ := New(worker)
	if err := w.Start(ctx); !strings.Contains(fmt.Sprint(err), "compactor setup --migrate") {
		t.Fatalf("a worker on the old layout: %v", err)
	}
	w.Close()
	if _, err := fleetops.Setup(ctx, b.nc, fleetops.SetupConfig{Stores: []string{"default"}}, false, false, nil); !errors.As(err, new(*fleetops.OldLayoutError)) {
		t.Fatalf("setup without --migrate: %v", err)
	}
	res, err := fleetops.Setup(ctx, b.nc, fleetops.SetupConfig{}, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := res.Migrated; m == nil || m.SweepRecords != 1 || m.AttemptCounts != 1 || m.LeasesDropped != 1 || m.ConsumersFound != 1 || !slices.Equal(res.Stores, []string{"default"}) {
		t.Fatalf("migration: %+v %+v", res.Migrated, res)
	}
	if _, err := fleetops.OpenBucket(b.js, wire.BucketSweep).Get(ctx, sweep.Key("default", "p/s0.jsonl")); err != nil {
		t.Errorf("the sweep record under its store's name: %v", err)
	}
	if got := b.pending(); got != queued {
		t.Fatalf("%d jobs queued after the migration, want %d", got, queued)
	}
	w2 := b.service(worker)
	b.run(w2)
	waitfor.Until(t, "every queued job worked", func() bool {
		done := 0
		for i := range queued {
			done += countType(t, filepath.Join(b.dir, fmt.Sprintf("p/s%d.jsonl", i)), "compaction")
		}
		return done == queued && b.pending() == 0
	})
	var attempts []int
	for _, ev := range b.events() {
		if ev.JobSeq == seqs[0] {
			attempts = append(attempts, ev.Attempt)
		}
	}
	if !slices.Equal(attempts, []int{2}) {
		t.Errorf("the first job's events' attempts %v, want [2] (its migrated count went on)", attempts)
	}
}

// The embedded server beyond loopback: --insecure-local would take any connection that
// reaches it, and a token or password without TLS would cross the network in clear text:
// both are refused, naming what to do; the clear text only when explicitly allowed, and a
// certificate makes it TLS. On loopback (IPv4, IPv6, localhost) all of it is as before.
func TestEmbeddedListenerBeyondLoopback(t *testing.T) {
	t.Parallel()
	dir, data := t.TempDir(), t.TempDir()
	cert, key := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	for _, f := range []string{cert, key} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	base := Config{Stores: []Store{{Name: "default", Dir: dir}}, DataDir: data, EmbeddedPort: -1}
	for _, c := range []struct {
		host            string
		insecure, clear bool
		tls             bool
		field, mustSay  string
	}{
		{host: "0.0.0.0", insecure: true, field: "InsecureLocal", mustSay: "beyond this machine"},
		{host: "192.0.2.1", field: "EmbeddedHost", mustSay: "clear text"},
		{host: "::", field: "EmbeddedHost", mustSay: "clear text"},
		{host: "0.0.0.0", clear: true},
		{host: "0.0.0.0", tls: true},
		{host: "127.0.0.1", insecure: true},
		{host: "::1"},
		{host: "localhost"},
	} {
		cfg := base
		cfg.EmbeddedHost, cfg.InsecureLocal, cfg.InsecureCleartextAuth = c.host, c.insecure, c.clear
		if c.tls {
			cfg.ServeTLSCert, cfg.ServeTLSKey = cert, key
		}
		err := cfg.Validate()
		var ce *access.ConfigError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%+v: %v", c, err)
		case c.field != "" && (!errors.As(err, &ce) || ce.Field != c.field || !strings.Contains(err.Error(), c.mustSay)):
			t.Errorf("%+v: %v, want %s refused saying %q", c, err, c.field, c.mustSay)
		}
	}
}
