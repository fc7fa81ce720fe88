package pipeline

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/sweep"
	"github.com/compactor-dev/compactor/wire"
)

// sweepRecords counts the records (values, not delete markers) in store's part of
// COMPACTOR_SWEEP, and the messages the bucket holds there (markers included).
func (b *bundle) sweepRecords(store string) (records, msgs int) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := fleetops.OpenBucket(b.js, wire.BucketSweep).Watch(ctx, store)
	if err != nil {
		b.t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	for e := range w.Updates() {
		if e == nil {
			return records, msgs
		}
		msgs++
		if e.Operation() == 0 { // jetstream.KeyValuePut
			records++
		}
	}
	b.t.Fatalf("the watch of store %s's sweep records ended early, after %d entries", store, msgs)
	return
}

// The "done when": after 10,000 sessions were swept and 5,000 of their files
// deleted, one sweep leaves 5,000 records. Here 1,000 and 500 (the same ratio;
// COMPACTOR_SWEEP_PRUNE_N=10000 for the full size). Records of another store, of a file
// that exists but was not walked (it became unreadable, or a symlink), and of a newer
// compactor are kept; the delete markers expire (here after 1 s instead of an hour).
func TestSweepRemovesRecordsOfDeletedFiles(t *testing.T) {
	t.Parallel()
	n := 1000
	if v := os.Getenv("COMPACTOR_SWEEP_PRUNE_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 2 {
			t.Fatalf("COMPACTOR_SWEEP_PRUNE_N=%q: want a number of sessions, at least 2", v)
		}
	}
	b := newBundle(t)
	var rels []string
	for i := range n {
		rel := fmt.Sprintf("sessions/--p%d--/s%05d.jsonl", i%20, i)
		writeSession(t, b.dir, rel)
		rels = append(rels, rel)
	}
	cfg := b.config(&fakeHandler{})
	cfg.Assessor = sweep.AssessorFunc(func(ctx context.Context, file string) (sweep.Assessment, error) {
		a, err := leafAssessor(ctx, file)
		a.OverBudget = false
		return a, err
	})
	cfg.sweepMarkerTTL = time.Second
	s := b.service(cfg)
	ctx := context.Background()
	t0 := time.Now()
	st, err := s.Sweep(ctx, nil)
	if err != nil || st.Assessed != n {
		t.Fatalf("first sweep: %+v %v", st, err)
	}
	t.Logf("first sweep of %d sessions: %s", n, time.Since(t0).Round(time.Millisecond))
	b.putRaw(wire.BucketSweep, sweep.Key("other", "x.jsonl"), `{"v":1,"path":"x.jsonl"}`)                     // another store's
	b.putRaw(wire.BucketSweep, sweep.Key("default", "gone-newer.jsonl"), `{"v":2,"path":"gone-newer.jsonl"}`) // a newer compactor's

	for _, rel := range rels[:n/2] {
		if err := os.Remove(filepath.Join(b.dir, rel)); err != nil {
			t.Fatal(err)
		}
	}
	// A file the walk does not take (no longer a regular file) but that is not gone.
	kept := rels[n-1]
	target := filepath.Join(b.dir, "elsewhere.json")
	if err := os.Rename(filepath.Join(b.dir, kept), target); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(b.dir, kept)); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	st, err = s.Sweep(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(t1)
	if st.Files != n/2-1 || st.Unchanged != n/2-1 || st.Removed != n/2 {
		t.Errorf("second sweep: %+v, want %d files unchanged and %d records removed", st, n/2-1, n/2)
	}
	records, _ := b.sweepRecords("default")
	want := n/2 + 1 // the sessions left, the newer compactor's record
	t.Logf("after %d sessions were swept and %d deleted, one sweep (%s) left %d records of store default (%d of them the sessions', 1 a newer compactor's)",
		n, n/2, took.Round(time.Millisecond), records, records-1)
	if records != want {
		t.Errorf("%d records left, want %d", records, want)
	}
	if r, _ := b.sweepRecords("other"); r != 1 {
		t.Errorf("another store's records: %d, want 1 (untouched)", r)
	}
	// The delete markers expire: the store's part of the bucket ends with its records.
	waitfor.Until(t, "the delete markers to expire", func() bool {
		_, msgs := b.sweepRecords("default")
		return msgs == want
	})
	// A third sweep removes nothing more and reads nothing.
	if st, err = s.Sweep(ctx, nil); err != nil || st.Removed != 0 || st.Assessed != 0 {
		t.Errorf("third sweep: %+v %v", st, err)
	}
}
