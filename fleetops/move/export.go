// Package move moves a deployment into NATS accounts of their own (docs/upgrading.md).
// Before layout 3 every host of a fleet shared one NATS account, where any store's keys
// could write into every stream of the account through JetStream's replies
// (docs/security.md). Layout 3 gives each host its own account; what the shared account holds moves in two steps around
// the server's new configuration, because an account's streams cannot be reached from
// another account (and the default account loses JetStream once accounts are configured):
//
//	Export, on the old account with its admin's credentials: every queued job (in order,
//	with its message id), its attempt count, every dead letter, and the sweep records,
//	prepared summaries, owner records and spend counts of every store, into one file;
//	read-only, refused while workers serve;
//	Import, on each new account with its admin's credentials: the account is set up, and
//	what the file holds of the account's stores is written into it (the jobs in their
//	order, each attempt count under its job's new sequence). Importing a file again
//	writes nothing twice: a job's message id, or the job pending on its subject, says it
//	is there.
//
// Leases are not moved (no worker holds one: they stopped), nor workers' beats (their
// workers report again), nor events (the results of jobs that ended).
package move

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// record is one line of an export.
type record struct {
	Kind     string                  `json:"kind"` // settings, job, attempts, deadLetter, key
	Store    string                  `json:"store,omitempty"`
	Subject  string                  `json:"subject,omitempty"`
	Seq      uint64                  `json:"seq,omitempty"` // a job's sequence in the exported stream (its attempt count's too)
	Header   nats.Header             `json:"header,omitempty"`
	Data     []byte                  `json:"data,omitempty"`
	Bucket   string                  `json:"bucket,omitempty"`
	Key      string                  `json:"key,omitempty"`
	Settings *fleetops.FleetSettings `json:"settings,omitempty"`
}

// Move kinds.
const (
	moveSettings   = "settings"
	moveJob        = "job"
	moveAttempts   = "attempts"
	moveDeadLetter = "deadLetter"
	moveKey        = "key"
)

// Counts says what an export wrote or an import wrote (or, for another account's
// stores, left).
type Counts struct {
	Stores      []string       `json:"stores"`
	Jobs        int            `json:"jobs"`
	Attempts    int            `json:"attemptCounts"`
	DeadLetters int            `json:"deadLetters"`
	Keys        map[string]int `json:"keys"` // by bucket
	// Already: jobs an earlier import wrote (the same message id, or the same job pending
	// on its subject).
	Already int `json:"already,omitempty"`
	// Left: records of stores of another account (an import writes those of its own).
	Left map[string]int `json:"left,omitempty"`
	// Dropped: what an export leaves behind on purpose (leases, beats), and attempt counts
	// of jobs no longer queued.
	Dropped map[string]int `json:"dropped,omitempty"`
}

func newCounts() *Counts {
	return &Counts{Keys: map[string]int{}, Left: map[string]int{}, Dropped: map[string]int{}}
}

// movedBuckets are the buckets whose keys an export writes: every store bucket but the
// leases (a worker's, while it works).
var movedBuckets = []string{wire.BucketSweep, wire.BucketPrepared, wire.BucketWorkers, wire.BucketSpend, wire.BucketAttempts}

// Export writes what the NATS account of nc holds of compactor's (layouts 1 to 3) into w,
// as JSON lines (see the package's move notes above). It changes nothing. It refuses while a
// worker reported within the last 30 s, unless force. The admin's credentials.
func Export(ctx context.Context, nc *nats.Conn, w io.Writer, force bool, log *slog.Logger) (*Counts, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return access.Guard(ctx, nc, func(ctx context.Context) (*Counts, error) {
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, err
		}
		return export(ctx, js, w, force, log)
	})
}

func export(ctx context.Context, js jetstream.JetStream, w io.Writer, force bool, log *slog.Logger) (*Counts, error) {
	layout, err := fleetops.LayoutOf(ctx, js)
	if err != nil {
		return nil, err
	}
	if layout == 0 {
		return nil, errors.New("export: this NATS account holds no compactor deployment (no settings record, no jobs stream)")
	}
	if !force {
		if live, err := fleetops.LiveWorkers(ctx, js); err != nil {
			return nil, fmt.Errorf("export: %w", err)
		} else if len(live) > 0 {
			return nil, &fleetops.LiveWorkersError{Workers: live}
		}
	}
	bw := bufio.NewWriter(w)
	x := &exporter{js: js, enc: json.NewEncoder(bw), c: newCounts(), stores: map[string]bool{}, jobSubjects: map[uint64]string{}}
	if f, err := fleetops.ReadFleetAnyLayout(ctx, js.Conn()); err == nil {
		for _, st := range f.Stores {
			x.stores[st] = true
		}
		if err := x.enc.Encode(record{Kind: moveSettings, Settings: f}); err != nil {
			return nil, err
		}
	}
	if err := x.streams(ctx); err != nil {
		return nil, err
	}
	for _, b := range append(slices.Clone(movedBuckets), wire.BucketLeases) {
		if err := x.bucket(ctx, b); err != nil {
			return nil, err
		}
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	c := x.c
	for st := range x.stores {
		if wire.ValidateStoreName(st) == nil {
			c.Stores = append(c.Stores, st)
		}
	}
	slices.Sort(c.Stores)
	log.Info("exported", "stores", strings.Join(c.Stores, ","), "jobs", c.Jobs, "attempt_counts", c.Attempts, "dead_letters", c.DeadLetters, "keys", c.Keys, "dropped", c.Dropped)
	return c, nil
}

// exporter is one export's state: the file's encoder, the counts, the stores seen, and the
// subjects of the jobs by sequence (an attempt count names its job by sequence).
type exporter struct {
	js          jetstream.JetStream
	enc         *json.Encoder
	c           *Counts
	stores      map[string]bool
	jobSubjects map[uint64]string
}

// streams exports the jobs, in their order (each job's subject names its store), and the
// dead letters.
func (x *exporter) streams(ctx context.Context) error {
	err := fleetops.EachMsg(ctx, x.js, wire.StreamJobs, wire.JobsPrefix+">", func(m *jetstream.RawStreamMsg) error {
		store, _, _ := strings.Cut(strings.TrimPrefix(m.Subject, wire.JobsPrefix), ".")
		x.stores[store] = true
		x.jobSubjects[m.Sequence] = m.Subject
		x.c.Jobs++
		return x.enc.Encode(record{Kind: moveJob, Store: store, Subject: m.Subject, Seq: m.Sequence, Header: movedHeader(m.Header), Data: m.Data})
	})
	if err != nil {
		return fmt.Errorf("export %s: %w", wire.StreamJobs, err)
	}
	err = fleetops.EachMsg(ctx, x.js, wire.StreamDLQ, wire.DLQPrefix+">", func(m *jetstream.RawStreamMsg) error {
		store, _, _ := strings.Cut(strings.TrimPrefix(m.Subject, wire.DLQPrefix), ".")
		x.stores[store] = true
		x.c.DeadLetters++
		return x.enc.Encode(record{Kind: moveDeadLetter, Store: store, Subject: m.Subject, Header: movedHeader(m.Header), Data: m.Data})
	})
	if err != nil {
		return fmt.Errorf("export %s: %w", wire.StreamDLQ, err)
	}
	return nil
}

// bucket exports the keys of bucket b that move (movedKey), in key order.
func (x *exporter) bucket(ctx context.Context, b string) error {
	kv, err := x.js.KeyValue(ctx, b)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("export %s: %w", b, err)
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("export %s: %w", b, err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		rec, store, why := movedKey(b, k, x.jobSubjects)
		if why != "" {
			x.c.Dropped[why]++
			continue
		}
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			continue
		}
		if err != nil {
			return fmt.Errorf("export %s %s: %w", b, k, err)
		}
		rec.Data = e.Value()
		if store != "" {
			x.stores[store] = true
		}
		if rec.Kind == moveAttempts {
			x.c.Attempts++
		} else {
			x.c.Keys[b]++
		}
		if err := x.enc.Encode(rec); err != nil {
			return err
		}
	}
	return nil
}

// movedKey is the record of a bucket's key in an export, in layout 3's form (layout 1's
// keys are read as `setup --migrate` moves them): a store's key, or a fleet-wide spend
// count (store ""). why says why a key is not moved.
func movedKey(bucket, key string, jobSubjects map[uint64]string) (rec record, store, why string) {
	rec = record{Kind: moveKey, Bucket: bucket, Key: key}
	switch bucket {
	case wire.BucketLeases:
		return rec, "", "leases"
	case wire.BucketSweep:
		key = strings.TrimPrefix(key, "f.") // layout 1
	case wire.BucketWorkers:
		if !strings.HasSuffix(key, "._owner") {
			return rec, "", "beats"
		}
	case wire.BucketAttempts:
		// <store>.<seq>.<hash>, or layout 1's a.<seq>.<hash>: the count of the job exported
		// with that sequence, or of a job no longer queued.
		parts := strings.Split(key, ".")
		if len(parts) != 3 {
			return rec, "", "attempt counts of jobs no longer queued"
		}
		seq, err := strconv.ParseUint(parts[1], 10, 64)
		subject, queued := jobSubjects[seq]
		if err != nil || !queued {
			return rec, "", "attempt counts of jobs no longer queued"
		}
		store, _, _ = strings.Cut(strings.TrimPrefix(subject, wire.JobsPrefix), ".")
		if parts[0] != "a" && parts[0] != store {
			return rec, "", "attempt counts of jobs no longer queued"
		}
		return record{Kind: moveAttempts, Store: store, Subject: subject, Seq: seq, Key: parts[2]}, store, ""
	}
	store, _, _ = strings.Cut(key, ".")
	if bucket == wire.BucketSpend && store == wire.SpendFleetScope {
		store = ""
	} else if wire.ValidateStoreName(store) != nil {
		return rec, "", "keys of no store"
	}
	rec.Key, rec.Store = key, store
	return rec, store, ""
}

// movedHeader keeps what a moved message's headers say of it: its message id (which makes
// an import of it again a duplicate) and compactor's own headers, never the conditions of
// its first publish (Nats-Expected-*) nor what the server added.
func movedHeader(h nats.Header) nats.Header {
	out := nats.Header{}
	for k, v := range h {
		switch {
		case k == jetstream.MsgIDHeader:
			out[k] = v
		case strings.HasPrefix(k, "Nats-") || k == "Status" || k == "Description":
		default:
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
