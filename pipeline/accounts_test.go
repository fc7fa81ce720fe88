package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/fleetops/move"
	"github.com/compactor-dev/compactor/internal/natstest"
	"github.com/compactor-dev/compactor/internal/proctest"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/sweep"
	"github.com/compactor-dev/compactor/wire"
)

// layout2 builds a deployment as a setup of layout 2 left it for stores: the
// streams without message limits, the buckets made by the client library (rollups
// allowed, no byte limits), the stores' consumers and the settings record.
func layout2(t *testing.T, js jetstream.JetStream, stores ...string) {
	t.Helper()
	ctx := context.Background()
	for _, sc := range []jetstream.StreamConfig{
		{Name: wire.StreamJobs, Subjects: []string{wire.JobsPrefix + ">"}, Retention: jetstream.WorkQueuePolicy, MaxMsgsPerSubject: 1, Discard: jetstream.DiscardNew,
			DiscardNewPerSubject: true, Duplicates: 2 * time.Minute, AllowDirect: true, MaxAge: fleetops.DefaultJobsMaxAge, MaxBytes: 1 << 30},
		{Name: wire.StreamEvents, Subjects: []string{wire.EventsPrefix + ">"}, MaxAge: fleetops.DefaultEventsMaxAge, MaxMsgsPerSubject: fleetops.EventsPerJob, AllowDirect: true, MaxBytes: 1 << 30},
		{Name: wire.StreamDLQ, Subjects: []string{wire.DLQPrefix + ">"}, MaxAge: fleetops.DefaultDLQMaxAge, Duplicates: 2 * time.Minute},
	} {
		if _, err := js.CreateStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	for _, kc := range []jetstream.KeyValueConfig{{Bucket: wire.BucketSettings}, {Bucket: wire.BucketWorkers, TTL: fleetops.WorkerBeatTTL}, {Bucket: wire.BucketLeases, TTL: fleetops.DefaultLeaseTTL},
		{Bucket: wire.BucketSweep}, {Bucket: wire.BucketAttempts, TTL: fleetops.AttemptsTTL}, {Bucket: wire.BucketPrepared, TTL: fleetops.DefaultPreparedTTL}, {Bucket: wire.BucketSpend, TTL: fleetops.SpendTTL}} {
		kc.History = 1
		if _, err := js.CreateKeyValue(ctx, kc); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range stores {
		if _, err := js.CreateConsumer(ctx, wire.StreamJobs, fleetops.StoreConsumerConfig(fleetops.SetupConfig{AckWait: time.Minute}, st)); err != nil {
			t.Fatal(err)
		}
		if _, err := js.CreateConsumer(ctx, wire.StreamDLQ, fleetops.DLQConsumerConfig(st)); err != nil {
			t.Fatal(err)
		}
	}
	rec, _ := json.Marshal(map[string]any{"v": 1, "layout": 2, "leaseTtl": "2s", "ackWait": "1s", "maxDeliver": 5, "duplicateWindow": "2m0s",
		"preparedTtl": "24h0m0s", "replicas": 1, "stores": stores, "at": time.Now().UTC()})
	if _, err := js.Publish(ctx, wire.KVSubjectRoot+wire.BucketSettings+"."+wire.SettingsKey, rec); err != nil {
		t.Fatal(err)
	}
}

// Layout 3 gives every stream and bucket the settings it needs and no other: no rollups
// (before, the buckets the client library made allowed them, and one publish with
// Nats-Rollup: all to a store's own key wiped every store's values), deletes through the
// API only on the dead letters, purges only where a prune purges, message TTLs only on the
// sweep records, no counters, schedules or atomic batches, and a byte and a message limit
// on every one. A deployment of layout 2 is refused by a worker and by a plain setup, and
// `setup --migrate` sets it up anew in place: every queued job stays, and a worker then
// works them all.
func TestStreamsHaveOnlyTheSettingsTheyNeed(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	layout2(t, b.js, "default")
	const queued = 3
	for i := range queued {
		rel := fmt.Sprintf("p/s%d.jsonl", i)
		sid, leaf := writeSession(t, b.dir, rel)
		b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: rel, SessionID: sid, ExpectLeafID: leaf})
	}
	// Before: a rollup to one key of the prepared values wipes the other's.
	kv := fleetops.OpenBucket(b.js, wire.BucketPrepared)
	for _, k := range []string{"default.a", "other.b"} {
		if _, err := kv.Put(ctx, k, []byte(`{"v":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	rollup := func(subject string) error {
		m := nats.NewMsg(subject)
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
		m.Data = []byte(`{"v":1}`)
		_, err := b.js.PublishMsg(ctx, m)
		return err
	}
	if err := rollup(wire.KVSubjectRoot + wire.BucketPrepared + ".default.a"); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "other.b"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("layout 2: another key after a rollup: %v (want gone: what layout 3 prevents)", err)
	}

	worker := b.config(&fakeHandler{})
	worker.Setup = false
	w, _ := New(worker)
	if err := w.Start(ctx); !strings.Contains(fmt.Sprint(err), "set up for layout 2") || !strings.Contains(fmt.Sprint(err), "compactor setup --migrate") {
		t.Fatalf("a worker on layout 2: %v", err)
	}
	w.Close()
	if _, err := fleetops.Setup(ctx, b.nc, fleetops.SetupConfig{Stores: []string{"default"}}, false, false, nil); !errors.As(err, new(*fleetops.OldLayoutError)) {
		t.Fatalf("setup without --migrate: %v", err)
	}
	var log proctest.Buffer
	res, err := fleetops.Setup(ctx, b.nc, fleetops.SetupConfig{}, true, false, logger(&log))
	if err != nil {
		t.Fatal(err)
	}
	if res.Migrated == nil || res.Migrated.From != 2 || !slices.Equal(res.Stores, []string{"default"}) || res.Fleet.Layout != fleetops.Layout {
		t.Fatalf("migration: %+v %+v", res.Migrated, res)
	}
	if !strings.Contains(log.String(), "setting=allow_rollup_hdrs old=true new=false") {
		t.Errorf("the rollups turned off without a word:\n%s", log.String())
	}
	if got := b.pending(); got != queued {
		t.Fatalf("%d jobs queued after the migration, want %d", got, queued)
	}

	// Every stream and bucket, as layout 3 wants it.
	sweepStream := "KV_" + wire.BucketSweep
	for _, name := range streamNames(t, b.js) {
		c := streamInfoOf(t, b.js, name).Config
		wantDelete, wantPurge := name != wire.StreamDLQ, name == wire.StreamEvents || name == wire.StreamDLQ || name == "KV_"+wire.BucketSettings
		switch {
		case c.AllowRollup:
			t.Errorf("%s allows rollups", name)
		case c.DenyDelete != wantDelete:
			t.Errorf("%s: deny_delete %v, want %v", name, c.DenyDelete, wantDelete)
		case c.DenyPurge != wantPurge && !(c.DenyPurge && name != sweepStream): // a deny once set stays
			t.Errorf("%s: deny_purge %v, want %v", name, c.DenyPurge, wantPurge)
		case c.AllowMsgTTL != (name == sweepStream):
			t.Errorf("%s: allow_msg_ttl %v", name, c.AllowMsgTTL)
		case c.AllowMsgCounter || c.AllowMsgSchedules || c.AllowAtomicPublish || c.AllowBatchPublish:
			t.Errorf("%s: counters %v, schedules %v, atomic %v, batches %v", name, c.AllowMsgCounter, c.AllowMsgSchedules, c.AllowAtomicPublish, c.AllowBatchPublish)
		case c.MaxBytes <= 0 || c.MaxMsgs <= 0:
			t.Errorf("%s: max_bytes %d, max_msgs %d", name, c.MaxBytes, c.MaxMsgs)
		case strings.HasPrefix(name, "KV_") && (c.Duplicates != fleetops.KVDuplicates || !c.AllowDirect):
			t.Errorf("%s: duplicate window %s, direct %v", name, c.Duplicates, c.AllowDirect)
		}
		if name == sweepStream && c.MaxConsumers != fleetops.SweepWatches(len(res.Stores)) {
			t.Errorf("%s: max_consumers %d", name, c.MaxConsumers)
		}
	}
	// What the headers may do now: a rollup, a counter, a schedule, a TTL (but on the
	// sweep records) are refused; the other key is untouched.
	if _, err := kv.Put(ctx, "other.b", []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := rollup(wire.KVSubjectRoot + wire.BucketPrepared + ".default.a"); err == nil || !strings.Contains(err.Error(), "rollup") {
		t.Errorf("a rollup on layout 3: %v", err)
	}
	for name, h := range map[string][2]string{"counter": {"Nats-Incr", "1"}, "schedule": {"Nats-Schedule", "@every 1s"}, "ttl": {"Nats-TTL", "1h"}} {
		m := nats.NewMsg(wire.KVSubjectRoot + wire.BucketPrepared + ".default.a")
		m.Header.Set(h[0], h[1])
		if name == "schedule" {
			m.Header.Set("Nats-Schedule-Target", wire.KVSubjectRoot+wire.BucketPrepared+".other.b")
		}
		if _, err := b.js.PublishMsg(ctx, m); err == nil {
			t.Errorf("a %s header on a prepared value was taken", name)
		}
	}
	if e, err := kv.Get(ctx, "other.b"); err != nil || string(e.Value()) != `{"v":1}` {
		t.Errorf("the other key after the refused headers: %v", err)
	}
	if _, err := b.js.Stream(ctx, wire.StreamJobs); err != nil {
		t.Fatal(err)
	}
	if err := b.js.DeleteStream(ctx, "none"); err == nil {
		t.Fatal("a stream that does not exist was deleted")
	}
	str, _ := b.js.Stream(ctx, wire.StreamJobs)
	if err := str.DeleteMsg(ctx, 1); err == nil || !strings.Contains(err.Error(), "not permitted") {
		t.Errorf("a job deleted through the API: %v", err)
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
}

// accountsServer starts a nats-server with a NATS account per name (each with JetStream
// limited to maxFile bytes, LEGACY's unlimited as layout 2's account was, and a user
// named after it with the password "pw"), and returns its URL.
func accountsServer(t *testing.T, maxFile int64, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	var b strings.Builder
	fmt.Fprintf(&b, "host: 127.0.0.1\nport: -1\njetstream { store_dir: %q }\naccounts {\n", filepath.Join(dir, "js"))
	for _, n := range names {
		js := fmt.Sprintf("{ max_file: %d, max_mem: 0, max_bytes_required: true }", maxFile)
		if n == "LEGACY" {
			js = "enabled"
		}
		fmt.Fprintf(&b, "  %s: { jetstream: %s, users: [ {user: %s, password: pw} ] }\n", n, js, n)
	}
	b.WriteString("}\n")
	conf := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(conf, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	return natstest.StartServerWith(t, opts).ClientURL()
}

func connectAs(t *testing.T, url, user string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.UserInfo(user, "pw"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	return nc, js
}

// A fleet whose hosts shared one NATS account (layout 2) moves into an account per host
// without losing a queued job: the export of the old account holds every queued job of
// both stores (in order), the attempt count of one, a dead letter, sweep records, a
// prepared summary and an owner record; the import into each new account writes its
// store's share (the other store's left, counted), and an import of the same file again
// writes no job twice. Workers in the new accounts then work every job, and the job whose
// attempt was counted goes on at attempt 2.
func TestMoveIntoAccounts(t *testing.T) {
	t.Parallel()
	url := accountsServer(t, 4<<30, "LEGACY", "A", "B")
	ctx := context.Background()
	lnc, ljs := connectAs(t, url, "LEGACY")
	layout2(t, ljs, "hostA", "hostB")
	dirs := map[string]string{"hostA": t.TempDir(), "hostB": t.TempDir()}
	const perStore = 3
	var firstA uint64
	for _, st := range []string{"hostA", "hostB"} {
		for i := range perStore {
			rel := fmt.Sprintf("p/s%d.jsonl", i)
			sid, leaf := writeSession(t, dirs[st], rel)
			r, err := fleetops.Enqueue(ctx, lnc, wire.Job{Kind: wire.KindCompact, Store: st, Path: rel, SessionID: sid, ExpectLeafID: leaf}, false, 0)
			if err != nil {
				t.Fatal(err)
			}
			if st == "hostA" && i == 0 {
				firstA = r.Seq
				m, _ := fleetops.DirectLast(ctx, lnc, wire.StreamJobs, wire.JobSubject(st, sid, wire.KindCompact))
				var job wire.Job
				_ = json.Unmarshal(m.Data, &job)
				if _, err := fleetops.OpenBucket(ljs, wire.BucketAttempts).Put(ctx, fleetops.AttemptKey(st, r.Seq, job.ID), fleetops.CountRecord{V: 1, N: 1}.Bytes()); err != nil {
					t.Fatal(err)
				}
			}
		}
		rec, _ := json.Marshal(sweep.Record{V: 1, Path: "p/s0.jsonl", Size: 1, At: time.Now()})
		put := func(bucket, key string, v []byte) {
			if _, err := fleetops.OpenBucket(ljs, bucket).Put(ctx, key, v); err != nil {
				t.Fatal(err)
			}
		}
		put(wire.BucketSweep, sweep.Key(st, "p/s0.jsonl"), rec)
		put(wire.BucketPrepared, wire.PreparedKey(st, "x-"+st), []byte(`{"v":1,"store":"`+st+`","sessionId":"x-`+st+`"}`))
		id, err := fleetops.Identify(st, dirs[st], false)
		if err != nil {
			t.Fatal(err)
		}
		owner, _ := json.Marshal(fleetops.OwnerRecord{V: fleetops.OwnerV, StoreIdentity: id})
		put(wire.BucketWorkers, fleetops.OwnerKey(st), owner) // the store's claim: its worker's directory
		put(wire.BucketLeases, leaseKey(st, "x-"+st), []byte(`{"v":1,"worker":"gone"}`))
		dl, _ := json.Marshal(wire.NewDeadLetter(wire.JobSubject(st, "dead-"+st, wire.KindCompact), 99, []byte(`{"v":1}`), "failed", nil, 1, "w"))
		if _, err := ljs.Publish(ctx, wire.DLQSubject(st, "dead-"+st), dl); err != nil {
			t.Fatal(err)
		}
	}

	var file bytes.Buffer
	c, err := move.Export(ctx, lnc, &file, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Jobs != 2*perStore || c.Attempts != 1 || c.DeadLetters != 2 || c.Keys[wire.BucketSweep] != 2 || c.Keys[wire.BucketPrepared] != 2 ||
		c.Keys[wire.BucketWorkers] != 2 || c.Dropped["leases"] != 2 || !slices.Equal(c.Stores, []string{"hostA", "hostB"}) {
		t.Fatalf("export: %+v", c)
	}
	for acct, st := range map[string]string{"A": "hostA", "B": "hostB"} {
		nc, js := connectAs(t, url, acct)
		for range 2 { // again: nothing twice
			_, ic, err := move.Import(ctx, nc, bytes.NewReader(file.Bytes()), fleetops.SetupConfig{Stores: []string{st}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if ic.Jobs+ic.Already != perStore || ic.Left[otherStore(st)] == 0 || ic.Keys[wire.BucketSweep] != 1 || ic.DeadLetters == 0 {
				t.Fatalf("import into %s: %+v", acct, ic)
			}
		}
		s, _ := js.Stream(ctx, wire.StreamJobs)
		if info, _ := s.Info(ctx); info.State.Msgs != perStore {
			t.Fatalf("account %s holds %d jobs after two imports, want %d", acct, info.State.Msgs, perStore)
		}
		if _, err := fleetops.OpenBucket(js, wire.BucketPrepared).Get(ctx, wire.PreparedKey(otherStore(st), "x-"+otherStore(st))); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("account %s holds the other store's prepared value: %v", acct, err)
		}
		// The workers of the new account.
		cfg := Config{Stores: []Store{{Name: st, Dir: dirs[st]}}, NATS: access.NATSConfig{URL: url, User: acct, Password: "pw"}, Concurrency: 2, Idle: -1,
			LeaseBusyDelay: 200 * time.Millisecond, BackoffBase: 50 * time.Millisecond, BackoffMax: time.Second, Handler: &fakeHandler{}}
		w := startService(t, cfg)
		runService(t, w)
		waitfor.Until(t, "every moved job of "+st+" worked", func() bool {
			done := 0
			for i := range perStore {
				done += countType(t, filepath.Join(dirs[st], fmt.Sprintf("p/s%d.jsonl", i)), "compaction")
			}
			return done == perStore
		})
		if st == "hostA" {
			// A job's final event is published after its compaction is written: wait for it.
			waitfor.Until(t, fmt.Sprintf("the final event of the job with a counted attempt (old seq %d) at attempt 2", firstA), func() bool {
				return slices.Contains(accountAttempts(t, js, st), 2)
			})
		}
	}
}

func otherStore(st string) string {
	if st == "hostA" {
		return "hostB"
	}
	return "hostA"
}

// accountAttempts returns the attempts of store's final events in the account of js.
func accountAttempts(t *testing.T, js jetstream.JetStream, store string) []int {
	t.Helper()
	var out []int
	err := fleetops.EachMsg(context.Background(), js, wire.StreamEvents, wire.EventsPrefix+store+".>", func(m *jetstream.RawStreamMsg) error {
		var ev wire.Event
		if json.Unmarshal(m.Data, &ev) == nil && ev.Final() {
			out = append(out, ev.Attempt)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The streams' and buckets' limits must fit the account's storage: setup says which to
// lower before it creates anything, and smaller limits fit.
func TestLimitsMustFitTheAccount(t *testing.T) {
	t.Parallel()
	url := accountsServer(t, 64<<20, "A")
	nc, js := connectAs(t, url, "A")
	ctx := context.Background()
	_, err := fleetops.Setup(ctx, nc, fleetops.SetupConfig{Stores: []string{"hostA"}}, false, false, nil)
	var le *fleetops.LimitsError
	if !errors.As(err, &le) || le.Account != 64<<20 || !strings.Contains(err.Error(), "--records-max-bytes") {
		t.Fatalf("default limits in a 64 MiB account: %v", err)
	}
	if names := streamNames(t, js); len(names) != 0 {
		t.Fatalf("a setup that did not fit created %v", names)
	}
	small := fleetops.SetupConfig{Stores: []string{"hostA"}, JobsMaxBytes: 8 << 20, EventsMaxBytes: 8 << 20, DLQMaxBytes: 8 << 20, RecordsMaxBytes: 4 << 20}
	if _, err := fleetops.Setup(ctx, nc, small, false, false, nil); err != nil {
		t.Fatalf("limits that fit: %v", err)
	}
	t.Logf("refused: %v", err)
}
