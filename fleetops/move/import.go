package move

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The import half of a move (see export.go): an export written into a new account.

// ReadExportSettings returns the fleet's settings an export holds (nil when it holds
// none), so that an import sets up the new accounts as the old one was.
func ReadExportSettings(r io.Reader) (*fleetops.FleetSettings, error) {
	dec := json.NewDecoder(bufio.NewReader(r))
	for {
		var rec record
		if err := dec.Decode(&rec); errors.Is(err, io.EOF) {
			return nil, nil
		} else if err != nil {
			return nil, fmt.Errorf("export file: %w", err)
		}
		if rec.Kind == moveSettings {
			return rec.Settings, nil
		}
	}
}

// Import sets up the NATS account of nc for sc's stores (as `compactor setup` does) and
// writes into it what the export r holds of those stores (the package's move notes);
// records of other stores are left (counted by store), for the import into their own
// account. The admin's credentials.
func Import(ctx context.Context, nc *nats.Conn, r io.Reader, sc fleetops.SetupConfig, log *slog.Logger) (*fleetops.SetupResult, *Counts, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if len(sc.Stores) == 0 {
		return nil, nil, errors.New("import: no store given: the stores of this account (--store, or --credentials)")
	}
	sc = sc.WithDefaults()
	if err := sc.ValidLimits(); err != nil {
		return nil, nil, err
	}
	var recs []record
	dec := json.NewDecoder(bufio.NewReader(r))
	for line := 1; ; line++ {
		var rec record
		if err := dec.Decode(&rec); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, nil, fmt.Errorf("import: record %d of the export: %w", line, err)
		}
		recs = append(recs, rec)
	}
	type result struct {
		res *fleetops.SetupResult
		c   *Counts
	}
	out, err := access.Guard(ctx, nc, func(ctx context.Context) (result, error) {
		js, err := jetstream.New(nc)
		if err != nil {
			return result{}, err
		}
		res, err := fleetops.SetupWith(ctx, js, sc, false, false, log)
		if err != nil {
			return result{}, err
		}
		c, err := importRecords(ctx, js, recs, sc.Stores, log)
		return result{res, c}, err
	})
	return out.res, out.c, err
}

func importRecords(ctx context.Context, js jetstream.JetStream, recs []record, stores []string, log *slog.Logger) (*Counts, error) {
	c := newCounts()
	c.Stores = slices.Clone(stores)
	mine := func(rec record) bool {
		if rec.Store == "" || slices.Contains(stores, rec.Store) {
			return true
		}
		c.Left[rec.Store]++
		return false
	}
	newSeq := map[uint64]uint64{}
	for _, rec := range recs {
		if rec.Kind != moveJob || !mine(rec) {
			continue
		}
		if !strings.HasPrefix(rec.Subject, wire.JobsPrefix+rec.Store+".") {
			return c, fmt.Errorf("import: job %d: subject %s is not store %s's", rec.Seq, rec.Subject, rec.Store)
		}
		seq, already, err := importJob(ctx, js, rec)
		if err != nil {
			return c, fmt.Errorf("import: job %d (%s): %w", rec.Seq, rec.Subject, err)
		}
		newSeq[rec.Seq] = seq
		if already {
			c.Already++
		} else {
			c.Jobs++
		}
	}
	for _, rec := range recs {
		if rec.Kind == moveJob || rec.Kind == moveSettings || !mine(rec) {
			continue
		}
		switch rec.Kind {
		case moveAttempts:
			seq, ok := newSeq[rec.Seq]
			if !ok {
				c.Dropped["attempt counts of jobs not imported"]++
				continue
			}
			key := rec.Store + "." + strconv.FormatUint(seq, 10) + "." + rec.Key
			if _, err := fleetops.OpenBucket(js, wire.BucketAttempts).Put(ctx, key, rec.Data); err != nil {
				return c, fmt.Errorf("import: attempt count %s: %w", key, err)
			}
			c.Attempts++
		case moveDeadLetter:
			if !strings.HasPrefix(rec.Subject, wire.DLQPrefix+rec.Store+".") {
				return c, fmt.Errorf("import: dead letter on %s is not store %s's", rec.Subject, rec.Store)
			}
			m := &nats.Msg{Subject: rec.Subject, Header: movedHeader(rec.Header), Data: rec.Data}
			if _, err := js.PublishMsg(ctx, m, jetstream.WithExpectStream(wire.StreamDLQ)); err != nil {
				return c, fmt.Errorf("import: dead letter on %s: %w", rec.Subject, err)
			}
			c.DeadLetters++
		case moveKey:
			if !slices.Contains(movedBuckets, rec.Bucket) || (rec.Store != "" && !strings.HasPrefix(rec.Key, rec.Store+".")) ||
				(rec.Store == "" && !strings.HasPrefix(rec.Key, wire.SpendFleetScope+".")) {
				return c, fmt.Errorf("import: key %s of bucket %s is not store %s's", rec.Key, rec.Bucket, rec.Store)
			}
			if _, err := fleetops.OpenBucket(js, rec.Bucket).Put(ctx, rec.Key, rec.Data); err != nil {
				return c, fmt.Errorf("import: %s %s: %w", rec.Bucket, rec.Key, err)
			}
			c.Keys[rec.Bucket]++
		}
	}
	log.Info("imported", "stores", strings.Join(stores, ","), "jobs", c.Jobs, "already", c.Already, "attempt_counts", c.Attempts,
		"dead_letters", c.DeadLetters, "keys", c.Keys, "left_for_other_accounts", c.Left)
	if len(c.Left) > 0 {
		log.Info("the export holds records of stores of other accounts: import it into each of them", "stores", strings.Join(slices.Sorted(maps.Keys(c.Left)), ","))
	}
	return c, nil
}

// importJob publishes an exported job and returns its sequence in this account's stream;
// already says that an earlier import wrote it (its message id within the duplicate window,
// or the same job pending on its subject).
func importJob(ctx context.Context, js jetstream.JetStream, rec record) (seq uint64, already bool, err error) {
	m := &nats.Msg{Subject: rec.Subject, Header: movedHeader(rec.Header), Data: rec.Data}
	ack, err := js.PublishMsg(ctx, m, jetstream.WithExpectStream(wire.StreamJobs))
	if err == nil {
		return ack.Sequence, ack.Duplicate, nil
	}
	if !fleetops.IsAlreadyQueued(err) {
		return 0, false, err
	}
	pending, gerr := fleetops.DirectLast(ctx, js.Conn(), wire.StreamJobs, rec.Subject)
	if gerr != nil {
		return 0, false, fmt.Errorf("%w (and the pending job cannot be read: %v)", err, gerr)
	}
	if string(pending.Data) != string(rec.Data) {
		return 0, false, fmt.Errorf("another job is pending on %s: %w", rec.Subject, err)
	}
	return pending.Sequence, true, nil
}
