package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/sweep"
	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// A fleet of three stores, a, b and c, retires b and c: their consumers, keys in every
// bucket and queued jobs stay on the NATS until the admin removes them, never by
// themselves. `setup --prune` with the fleet's list (a) refuses while b's worker reports,
// naming it, and removes nothing; a dry run says what would go; once b's worker is gone,
// everything of b and c goes, and only that: a's consumers, keys and jobs, the fleet's
// spend count, and the dead letters of b and c (the operator's) stay.
func TestPruneRetiredStores(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	if _, err := fleetops.Setup(ctx, b.nc, fleetops.SetupConfig{Stores: []string{"a", "b", "c"}}, false, false, nil); err != nil {
		t.Fatal(err)
	}
	// Records and jobs of each store, as their workers and clients leave them.
	for _, st := range []string{"a", "b", "c"} {
		b.putRaw(wire.BucketSweep, sweep.Key(st, "s.jsonl"), `{"v":1,"path":"s.jsonl"}`)
		b.putRaw(wire.BucketAttempts, fleetops.AttemptKey(st, 9, "job"), `{"v":1,"n":1}`)
		b.putRaw(wire.BucketPrepared, wire.PreparedKey(st, "sess"), `{"v":1}`)
		b.putRaw(wire.BucketSpend, st+".spend.h2026010203", `{"v":1,"n":10}`)
		for i := range 2 {
			b.enqueue(wire.Job{Kind: wire.KindCompact, Store: st, Path: fmt.Sprintf("s%d.jsonl", i), SessionID: fmt.Sprintf("sess-%s-%d", st, i)})
		}
	}
	b.putRaw(wire.BucketSpend, wire.SpendFleetScope+".h2026010203", `{"v":1,"n":30}`)
	if err := publishDeadLetter(ctx, b.js, wire.NewDeadLetter(wire.JobSubject("c", "sess-c-9", wire.KindCompact), 99, []byte(`{}`), "test", nil, 1, "w")); err != nil {
		t.Fatal(err)
	}
	// b's worker reports.
	bcfg := b.config(&fakeHandler{})
	bcfg.Stores = []Store{{Name: "b", Dir: t.TempDir()}}
	bcfg.Setup = false
	bsvc := b.service(bcfg)
	stopB := b.run(bsvc)
	waitfor.Until(t, "b's worker reported", func() bool {
		beats, _, err := fleetops.ReadBeats(ctx, fleetops.OpenBucket(b.js, wire.BucketWorkers), "b")
		return err == nil && len(beats) == 1
	})

	var served *fleetops.ServedStoreError
	if _, err := fleetops.Prune(ctx, b.nc, []string{"a"}, false, nil); !errors.As(err, &served) || served.Store != "b" || len(served.Workers) != 1 {
		t.Fatalf("prune with b's worker reporting: %v, want it refused naming b's worker", err)
	}
	dry, err := fleetops.Prune(ctx, b.nc, []string{"a", "b"}, true, nil)
	if err != nil || len(dry) != 1 || dry[0].Store != "c" || dry[0].Removed || dry[0].Jobs != 2 || len(dry[0].Consumers) != 2 || dry[0].Keys[wire.BucketSweep] != 1 {
		t.Fatalf("dry run keeping a and b: %+v %v, want c's 2 consumers, keys and 2 jobs named, nothing removed", dry, err)
	}
	if _, err := b.js.Consumer(ctx, wire.StreamJobs, fleetops.ConsumerName("c")); err != nil {
		t.Fatalf("the dry run removed c's consumer: %v", err)
	}

	// b's worker stops; its keys expire 30 s later (deleted here, standing for that).
	stopB()
	bsvc.Close()
	for _, k := range []string{fleetops.WorkerKey("b", bsvc.WorkerID()), fleetops.OwnerKey("b")} {
		if err := fleetops.OpenBucket(b.js, wire.BucketWorkers).Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	pruned, err := fleetops.Prune(ctx, b.nc, []string{"a"}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pruned: %+v", pruned)
	if len(pruned) != 2 || pruned[0].Store != "b" || pruned[1].Store != "c" || !pruned[1].Removed || pruned[1].Dead != 1 {
		t.Fatalf("pruned %+v, want b and c removed, c's dead letter kept", pruned)
	}
	for _, st := range []string{"b", "c"} {
		for _, c := range []struct{ stream, name string }{{wire.StreamJobs, fleetops.ConsumerName(st)}, {wire.StreamDLQ, fleetops.DLQConsumerName(st)}} {
			if _, err := b.js.Consumer(ctx, c.stream, c.name); !errors.Is(err, jetstream.ErrConsumerNotFound) {
				t.Errorf("consumer %s: %v, want it gone", c.name, err)
			}
		}
		for _, bk := range access.StoreBuckets {
			if n := len(subjectsIn(t, b, "KV_"+bk, wire.KVSubjectRoot+bk+"."+st+".>")); n != 0 {
				t.Errorf("%s keeps %d keys of store %s", bk, n, st)
			}
		}
		if n := len(subjectsIn(t, b, wire.StreamJobs, wire.JobsPrefix+st+".>")); n != 0 {
			t.Errorf("%d jobs of store %s left", n, st)
		}
	}
	// a's, and the fleet's, are untouched.
	if _, err := b.js.Consumer(ctx, wire.StreamJobs, fleetops.ConsumerName("a")); err != nil {
		t.Errorf("a's consumer: %v", err)
	}
	for _, bk := range []string{wire.BucketSweep, wire.BucketAttempts, wire.BucketPrepared, wire.BucketSpend} {
		if n := len(subjectsIn(t, b, "KV_"+bk, wire.KVSubjectRoot+bk+".a.>")); n != 1 {
			t.Errorf("%s holds %d keys of store a, want 1", bk, n)
		}
	}
	if b.rawValue(wire.BucketSpend, wire.SpendFleetScope+".h2026010203") == "" {
		t.Error("the fleet's spend count was removed")
	}
	if n := len(subjectsIn(t, b, wire.StreamJobs, wire.JobsPrefix+"a.>")); n != 2 {
		t.Errorf("%d jobs of store a, want 2", n)
	}
	// b's worker dead-lettered b's two jobs (their files are not in its directory): the
	// dead letters of both stores stay.
	if n := len(b.deadLetters()); n != pruned[0].Dead+pruned[1].Dead || n != 3 {
		t.Errorf("%d dead letters, want b's 2 and c's 1 kept", n)
	}
	f, err := fleetops.ReadFleet(ctx, b.nc)
	if err != nil || !slices.Equal(f.Stores, []string{"a"}) {
		t.Errorf("fleet settings %+v %v, want stores [a]", f, err)
	}
	// Nothing left to prune.
	if again, err := fleetops.Prune(ctx, b.nc, []string{"a"}, false, nil); err != nil || len(again) != 0 {
		t.Errorf("second prune: %+v %v, want nothing", again, err)
	}
}

// subjectsIn are the subjects of a stream under filter.
func subjectsIn(t *testing.T, b *bundle, stream, filter string) map[string]uint64 {
	t.Helper()
	s, err := fleetops.SubjectsOf(context.Background(), b.js, stream, filter)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
