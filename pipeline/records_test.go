package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/proctest"
	"github.com/compactor-dev/compactor/spend"
	"github.com/compactor-dev/compactor/sweep"
	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// putRaw writes value under key in bucket as a newer compactor would.
func (b *bundle) putRaw(bucket, key, value string) uint64 {
	b.t.Helper()
	rev, err := fleetops.OpenBucket(b.js, bucket).Put(context.Background(), key, []byte(value))
	if err != nil {
		b.t.Fatal(err)
	}
	return rev
}

// rawValue reads key in bucket as it is ("" when it holds none).
func (b *bundle) rawValue(bucket, key string) string {
	b.t.Helper()
	e, err := fleetops.OpenBucket(b.js, bucket).Get(context.Background(), key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ""
	}
	if err != nil {
		b.t.Fatal(err)
	}
	return string(e.Value())
}

// A newer compactor's records (schema version 2, a shape this one does not know) meet
// every reader of this one: none crashes, none overwrites a newer record with its older
// shape, and each says so. What each reader does instead is its record's rule
// (docs/upgrading.md, "Records of a newer version").
func TestNewerRecordsLeftAlone(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	logs := &proctest.Buffer{}
	cfg := b.config(&fakeHandler{})
	cfg.Assessor = leafAssessor
	cfg.Logger = logger(logs)
	cfg.SpendLimits = []spend.Limit{{Window: time.Hour, Tokens: 1000}}
	s := b.service(cfg)
	ctx := context.Background()
	unchanged := func(bucket, key, want string) {
		t.Helper()
		if got := b.rawValue(bucket, key); got != want {
			t.Errorf("%s %s was overwritten: %s, want the newer record %s", bucket, key, got, want)
		}
	}

	t.Run("sweep record", func(t *testing.T) {
		writeSession(t, b.dir, "newer.jsonl")
		key := sweep.Key("default", "newer.jsonl")
		newer := `{"v":2,"path":"newer.jsonl","state":{"size":1}}`
		b.putRaw(wire.BucketSweep, key, newer)
		gone := sweep.Key("default", "gone.jsonl") // a file this sweep does not see
		goneRec := `{"v":2,"path":"gone.jsonl"}`
		b.putRaw(wire.BucketSweep, gone, goneRec)
		st, err := s.Sweep(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if st.NewerRecords != 1 || st.Assessed != 0 {
			t.Errorf("sweep: %+v, want the file left to the newer compactor (1 newer record, none assessed)", st)
		}
		unchanged(wire.BucketSweep, key, newer)
		unchanged(wire.BucketSweep, gone, goneRec)
		s.noteOutcome(ctx, s.log, wire.Event{JobRef: wire.JobRef{Kind: wire.KindCompact, Store: "default", Path: "newer.jsonl"}, Tally: wire.Tally{Outcome: OutcomeFailed}})
		unchanged(wire.BucketSweep, key, newer)
	})
	t.Run("attempt count", func(t *testing.T) {
		key := fleetops.AttemptKey("default", 7, "job")
		newer := `{"v":2,"attempts":{"count":1}}`
		b.putRaw(wire.BucketAttempts, key, newer)
		var nr *fleetops.NewerRecordError
		if _, err := fleetops.AddAttempts(ctx, s.res.attempts, key, 1); !errors.As(err, &nr) || nr.V != 2 {
			t.Errorf("a count of a newer version added to: %v, want a NewerRecordError of v2", err)
		}
		unchanged(wire.BucketAttempts, key, newer)
	})
	t.Run("spend count", func(t *testing.T) {
		key, _ := spend.Key(spend.Limit{Window: time.Hour}, s.spendNow())
		newer := `{"v":2,"tokens":{"in":5}}`
		b.putRaw(wire.BucketSpend, key, newer)
		h := s.reserveSpend(ctx, &paidAccount{s: s, store: "default"}, func() int { return 10 })
		if h == nil {
			t.Error("a job paid against a spend window whose count is of a newer version: want it held until the window ends")
		}
		unchanged(wire.BucketSpend, key, newer)
	})
	t.Run("lease", func(t *testing.T) {
		key := leaseKey("default", "sess-newer")
		newer := `{"v":2,"holder":{"id":"w"}}`
		b.putRaw(wire.BucketLeases, key, newer)
		var busy *errLeaseBusy
		if _, err := acquireLease(ctx, s.res.leases, time.Minute, leaseKey("default", "sess-newer"), "sess-newer", "me", "job"); !errors.As(err, &busy) {
			t.Errorf("lease of a newer version: %v, want the session busy", err)
		}
		unchanged(wire.BucketLeases, key, newer)
	})
	t.Run("prepared value", func(t *testing.T) {
		newer := `{"v":2,"store":"default","sessionId":"sess-p"}`
		b.putRaw(wire.BucketPrepared, wire.PreparedKey("default", "sess-p"), newer)
		if err := s.Prepared().Put(ctx, "default", "sess-p", []byte(`{"v":1,"store":"default","sessionId":"sess-p"}`)); err != nil {
			t.Error(err)
		}
		unchanged(wire.BucketPrepared, wire.PreparedKey("default", "sess-p"), newer)
	})
	t.Run("owner record", func(t *testing.T) {
		newer := `{"v":2,"store":"other","where":{"id":"x"}}`
		b.putRaw(wire.BucketWorkers, fleetops.OwnerKey("other"), newer)
		id := fleetops.StoreIdentity{Store: "other", Host: "h", Root: "/r", Marker: "m"}
		for _, claim := range []bool{true, false} { // a worker's start, a sweep's check
			if err := fleetops.CheckOwner(ctx, s.res.workers, id, claim, nil); err == nil || !strings.Contains(err.Error(), "schema version 2") {
				t.Errorf("claim %v of a store whose owner record is of a newer version: %v, want a refusal that says so", claim, err)
			}
		}
		unchanged(wire.BucketWorkers, fleetops.OwnerKey("other"), newer)
	})
	t.Run("beat", func(t *testing.T) {
		newer := `{"v":2,"worker":"w-newer","store":"default","at":"` + time.Now().UTC().Format(time.RFC3339Nano) + `","jobVersions":{"list":[3]}}`
		b.putRaw(wire.BucketWorkers, fleetops.WorkerKey("default", "w-newer"), newer)
		beats, _, err := fleetops.ReadBeats(ctx, s.res.workers, "default")
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, bt := range beats {
			if bt.Worker == "w-newer" {
				found = true
				if !bt.Newer() || bt.Store != "default" || len(bt.JobVersionsOf()) != 0 {
					t.Errorf("newer beat read as %+v (job versions %v), want its worker and store only", bt, bt.JobVersionsOf())
				}
			}
		}
		if !found {
			t.Errorf("the newer worker's beat is not listed: %+v", beats)
		}
	})
	t.Run("said", func(t *testing.T) {
		for _, want := range []string{"left to its sweeps", "takes its window as full", "newer schema version, which is kept"} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("the log does not say %q", want)
			}
		}
	})
	t.Run("fleet settings", func(t *testing.T) {
		old := b.rawValue(wire.BucketSettings, wire.SettingsKey)
		var f map[string]any
		if err := json.Unmarshal([]byte(old), &f); err != nil {
			t.Fatal(err)
		}
		f["v"] = 2
		nb, _ := json.Marshal(f)
		newer := string(nb)
		b.putRaw(wire.BucketSettings, wire.SettingsKey, newer)
		defer b.putRaw(wire.BucketSettings, wire.SettingsKey, old)
		if _, err := fleetops.Setup(ctx, b.nc, fleetops.SetupConfig{Stores: []string{"default"}}, false, false, nil); err == nil {
			t.Error("an older setup rewrote the fleet settings of a newer version")
		}
		unchanged(wire.BucketSettings, wire.SettingsKey, newer)
		wcfg := b.config(&fakeHandler{})
		wcfg.Setup = false
		w, err := New(wcfg)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if err := w.Start(ctx); err == nil || !strings.Contains(err.Error(), "newer") {
			t.Errorf("a worker started on fleet settings of a newer version: %v, want a refusal that says so", err)
		}
	})
}
