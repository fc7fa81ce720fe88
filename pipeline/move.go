package pipeline

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
	"time"

	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Moving a deployment into NATS accounts of their own (docs/upgrading.md). Before layout 3
// every host of a fleet shared one NATS account, where any store's keys could write into
// every stream of the account through JetStream's replies (docs/security.md). Layout 3
// gives each host its own account; what the shared account holds moves in two steps around
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

// moveRecord is one line of an export.
type moveRecord struct {
	Kind     string         `json:"kind"` // settings, job, attempts, deadLetter, key
	Store    string         `json:"store,omitempty"`
	Subject  string         `json:"subject,omitempty"`
	Seq      uint64         `json:"seq,omitempty"` // a job's sequence in the exported stream (its attempt count's too)
	Header   nats.Header    `json:"header,omitempty"`
	Data     []byte         `json:"data,omitempty"`
	Bucket   string         `json:"bucket,omitempty"`
	Key      string         `json:"key,omitempty"`
	Settings *FleetSettings `json:"settings,omitempty"`
}

// Move kinds.
const (
	moveSettings   = "settings"
	moveJob        = "job"
	moveAttempts   = "attempts"
	moveDeadLetter = "deadLetter"
	moveKey        = "key"
)

// MoveCounts says what an export wrote or an import wrote (or, for another account's
// stores, left).
type MoveCounts struct {
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

func newMoveCounts() *MoveCounts {
	return &MoveCounts{Keys: map[string]int{}, Left: map[string]int{}, Dropped: map[string]int{}}
}

// movedBuckets are the buckets whose keys an export writes: every store bucket but the
// leases (a worker's, while it works).
var movedBuckets = []string{BucketSweep, wire.BucketPrepared, BucketWorkers, BucketSpend, BucketAttempts}

// Export writes what the NATS account of nc holds of compactor's (layouts 1 to 3) into w,
// as JSON lines (see the package's move notes above). It changes nothing. It refuses while a
// worker reported within the last 30 s, unless force. The admin's credentials.
func Export(ctx context.Context, nc *nats.Conn, w io.Writer, force bool, log *slog.Logger) (*MoveCounts, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return guard(ctx, nc, func(ctx context.Context) (*MoveCounts, error) {
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, err
		}
		return export(ctx, js, w, force, log)
	})
}

func export(ctx context.Context, js jetstream.JetStream, w io.Writer, force bool, log *slog.Logger) (*MoveCounts, error) {
	layout, err := layoutOf(ctx, js)
	if err != nil {
		return nil, err
	}
	if layout == 0 {
		return nil, errors.New("export: this NATS account holds no compactor deployment (no settings record, no jobs stream)")
	}
	if !force {
		if live, err := liveWorkers(ctx, js); err != nil {
			return nil, fmt.Errorf("export: %w", err)
		} else if len(live) > 0 {
			return nil, &LiveWorkersError{Workers: live}
		}
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	c := newMoveCounts()
	stores := map[string]bool{}
	if f, err := readFleetAnyLayout(ctx, js.Conn()); err == nil {
		for _, st := range f.Stores {
			stores[st] = true
		}
		if err := enc.Encode(moveRecord{Kind: moveSettings, Settings: f}); err != nil {
			return nil, err
		}
	}
	// Jobs, in their order; each job's subject names its store.
	jobSubjects := map[uint64]string{}
	err = eachMsg(ctx, js, wire.StreamJobs, wire.JobsPrefix+">", func(m *jetstream.RawStreamMsg) error {
		store, _, _ := strings.Cut(strings.TrimPrefix(m.Subject, wire.JobsPrefix), ".")
		stores[store] = true
		jobSubjects[m.Sequence] = m.Subject
		c.Jobs++
		return enc.Encode(moveRecord{Kind: moveJob, Store: store, Subject: m.Subject, Seq: m.Sequence, Header: movedHeader(m.Header), Data: m.Data})
	})
	if err != nil {
		return nil, fmt.Errorf("export %s: %w", wire.StreamJobs, err)
	}
	err = eachMsg(ctx, js, wire.StreamDLQ, wire.DLQPrefix+">", func(m *jetstream.RawStreamMsg) error {
		store, _, _ := strings.Cut(strings.TrimPrefix(m.Subject, wire.DLQPrefix), ".")
		stores[store] = true
		c.DeadLetters++
		return enc.Encode(moveRecord{Kind: moveDeadLetter, Store: store, Subject: m.Subject, Header: movedHeader(m.Header), Data: m.Data})
	})
	if err != nil {
		return nil, fmt.Errorf("export %s: %w", wire.StreamDLQ, err)
	}
	for _, b := range append(slices.Clone(movedBuckets), BucketLeases) {
		kv, err := js.KeyValue(ctx, b)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("export %s: %w", b, err)
		}
		lister, err := kv.ListKeys(ctx)
		if err != nil {
			return nil, fmt.Errorf("export %s: %w", b, err)
		}
		var keys []string
		for k := range lister.Keys() {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			rec, store, why := movedKey(b, k, jobSubjects)
			if why != "" {
				c.Dropped[why]++
				continue
			}
			e, err := kv.Get(ctx, k)
			if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("export %s %s: %w", b, k, err)
			}
			rec.Data = e.Value()
			if store != "" {
				stores[store] = true
			}
			if rec.Kind == moveAttempts {
				c.Attempts++
			} else {
				c.Keys[b]++
			}
			if err := enc.Encode(rec); err != nil {
				return nil, err
			}
		}
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	for st := range stores {
		if wire.ValidateStoreName(st) == nil {
			c.Stores = append(c.Stores, st)
		}
	}
	slices.Sort(c.Stores)
	log.Info("exported", "stores", strings.Join(c.Stores, ","), "jobs", c.Jobs, "attempt_counts", c.Attempts, "dead_letters", c.DeadLetters, "keys", c.Keys, "dropped", c.Dropped)
	return c, nil
}

// movedKey is the record of a bucket's key in an export, in layout 3's form (layout 1's
// keys are read as `setup --migrate` moves them): a store's key, or a fleet-wide spend
// count (store ""). why says why a key is not moved.
func movedKey(bucket, key string, jobSubjects map[uint64]string) (rec moveRecord, store, why string) {
	rec = moveRecord{Kind: moveKey, Bucket: bucket, Key: key}
	switch bucket {
	case BucketLeases:
		return rec, "", "leases"
	case BucketSweep:
		key = strings.TrimPrefix(key, "f.") // layout 1
	case BucketWorkers:
		if !strings.HasSuffix(key, "._owner") {
			return rec, "", "beats"
		}
	case BucketAttempts:
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
		return moveRecord{Kind: moveAttempts, Store: store, Subject: subject, Seq: seq, Key: parts[2]}, store, ""
	}
	store, _, _ = strings.Cut(key, ".")
	if bucket == BucketSpend && store == spendFleetScope {
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

// eachMsg calls f with every message of stream under filter, in order (a read by
// sequence, the next message on the filter each time: the admin's request). A stream that
// does not exist has none.
func eachMsg(ctx context.Context, js jetstream.JetStream, stream, filter string, f func(*jetstream.RawStreamMsg) error) error {
	str, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	info, err := str.Info(ctx)
	if err != nil {
		return err
	}
	for seq := max(info.State.FirstSeq, 1); seq <= info.State.LastSeq; {
		m, err := msgGet(ctx, js.Conn(), stream, seq, filter)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := f(m); err != nil {
			return err
		}
		seq = m.Sequence + 1
	}
	return nil
}

// msgGet reads the first message of stream at seq or after on filter with the JSON API
// ($JS.API.STREAM.MSG.GET, the admin's and the operator's): its sequence is the server's
// field, never a header the message may carry (a direct get's answer puts the server's
// headers after the message's own, and the client library reads the first).
func msgGet(ctx context.Context, nc *nats.Conn, stream string, seq uint64, filter string) (*jetstream.RawStreamMsg, error) {
	req, _ := json.Marshal(map[string]any{"seq": seq, "next_by_subj": filter})
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, err := nc.RequestWithContext(rctx, apiPre+"STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Error *jetstream.APIError `json:"error"`
		Msg   *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Header  []byte    `json:"hdrs"`
			Data    []byte    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(r.Data, &resp); err != nil {
		return nil, fmt.Errorf("get %s %d: %w", stream, seq, err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return nil, jetstream.ErrMsgNotFound
		}
		return nil, resp.Error
	}
	if resp.Msg == nil {
		return nil, jetstream.ErrMsgNotFound
	}
	m := &jetstream.RawStreamMsg{Subject: resp.Msg.Subject, Sequence: resp.Msg.Seq, Data: resp.Msg.Data, Time: resp.Msg.Time, Header: nats.Header{}}
	if len(resp.Msg.Header) > 0 {
		hm, err := nats.DecodeHeadersMsg(resp.Msg.Header)
		if err == nil {
			m.Header = hm
		}
	}
	return m, nil
}

// ReadExportSettings returns the fleet's settings an export holds (nil when it holds
// none), so that an import sets up the new accounts as the old one was.
func ReadExportSettings(r io.Reader) (*FleetSettings, error) {
	dec := json.NewDecoder(bufio.NewReader(r))
	for {
		var rec moveRecord
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
func Import(ctx context.Context, nc *nats.Conn, r io.Reader, sc SetupConfig, log *slog.Logger) (*SetupResult, *MoveCounts, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if len(sc.Stores) == 0 {
		return nil, nil, errors.New("import: no store given: the stores of this account (--store, or --credentials)")
	}
	sc = sc.withDefaults()
	if err := sc.validLimits(); err != nil {
		return nil, nil, err
	}
	var recs []moveRecord
	dec := json.NewDecoder(bufio.NewReader(r))
	for line := 1; ; line++ {
		var rec moveRecord
		if err := dec.Decode(&rec); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, nil, fmt.Errorf("import: record %d of the export: %w", line, err)
		}
		recs = append(recs, rec)
	}
	type result struct {
		res *SetupResult
		c   *MoveCounts
	}
	out, err := guard(ctx, nc, func(ctx context.Context) (result, error) {
		js, err := jetstream.New(nc)
		if err != nil {
			return result{}, err
		}
		res, err := setup(ctx, js, sc, false, false, log)
		if err != nil {
			return result{}, err
		}
		c, err := importRecords(ctx, js, recs, sc.Stores, log)
		return result{res, c}, err
	})
	return out.res, out.c, err
}

func importRecords(ctx context.Context, js jetstream.JetStream, recs []moveRecord, stores []string, log *slog.Logger) (*MoveCounts, error) {
	c := newMoveCounts()
	c.Stores = slices.Clone(stores)
	mine := func(rec moveRecord) bool {
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
			if _, err := openBucket(js, BucketAttempts).Put(ctx, key, rec.Data); err != nil {
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
				(rec.Store == "" && !strings.HasPrefix(rec.Key, spendFleetScope+".")) {
				return c, fmt.Errorf("import: key %s of bucket %s is not store %s's", rec.Key, rec.Bucket, rec.Store)
			}
			if _, err := openBucket(js, rec.Bucket).Put(ctx, rec.Key, rec.Data); err != nil {
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
func importJob(ctx context.Context, js jetstream.JetStream, rec moveRecord) (seq uint64, already bool, err error) {
	m := &nats.Msg{Subject: rec.Subject, Header: movedHeader(rec.Header), Data: rec.Data}
	ack, err := js.PublishMsg(ctx, m, jetstream.WithExpectStream(wire.StreamJobs))
	if err == nil {
		return ack.Sequence, ack.Duplicate, nil
	}
	if !IsAlreadyQueued(err) {
		return 0, false, err
	}
	pending, gerr := directLast(ctx, js.Conn(), wire.StreamJobs, rec.Subject)
	if gerr != nil {
		return 0, false, fmt.Errorf("%w (and the pending job cannot be read: %v)", err, gerr)
	}
	if string(pending.Data) != string(rec.Data) {
		return 0, false, fmt.Errorf("another job is pending on %s: %w", rec.Subject, err)
	}
	return pending.Sequence, true, nil
}
