package fleetops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Who serves a store. A job published for a store that no worker serves sits in
// COMPACTOR_JOBS until one does; a client that asks first can say so instead of waiting
// in silence. Every worker keeps a key per store it serves in BucketWorkers,
// <store>.<worker>, and the store's owner key <store>._owner (pipeline/owner.go), put again every
// workerBeatEvery while its fetch loops run; the bucket's TTL drops the keys of a worker
// that stopped (a crash as well as a shutdown: a service restarted within the TTL is not
// seen as gone). A store is served when it has its durable consumer and its owner key.
// Every key a client reads is in the store's part of the bucket: a store's roles may read
// their own.

const (
	WorkerBeatEvery = 10 * time.Second
	// WorkerBeatTTL is how long a worker counts as serving after its last beat: three
	// beats, so that one slow or lost put does not make a store look unserved.
	WorkerBeatTTL = 3 * WorkerBeatEvery
	// ServedGrace is how long CheckServed waits for a worker to report before it says a
	// store is not served: a service started a moment ago sets up the streams first and
	// reports once its workers run.
	ServedGrace = 3 * time.Second
)

// WorkerBeat is a worker's key's value.
type WorkerBeat struct {
	// V is the beat's schema version (beatV). A beat of a newer version is read for what
	// every version of it says, its worker, store and time (from the key and the
	// record's time); none of its other fields is taken from it (see Newer).
	V           int           `json:"v"`
	Worker      string        `json:"worker"`
	Store       string        `json:"store"`
	Host        string        `json:"host,omitempty"`
	Identity    StoreIdentity `json:"identity"`
	Concurrency int           `json:"concurrency"`
	Started     time.Time     `json:"started"`
	At          time.Time     `json:"at"`
	// Version is the worker's program version (`git describe` of its build); JobVersions
	// the job schema versions it works (absent: a worker older than the field, which
	// works version 1); InFlight its jobs in flight at the beat (all its stores').
	Version     string `json:"version,omitempty"`
	JobVersions []int  `json:"jobVersions,omitempty"`
	InFlight    int    `json:"inFlight"`
	// Paused: the store is paused as this worker last read it (pause.go): it takes none of
	// the store's jobs.
	Paused bool `json:"paused,omitempty"`
}

// Newer reports whether the beat is of a schema version newer than this compactor reads:
// only its worker, store and time are known.
func (b WorkerBeat) Newer() bool { return b.V > BeatV }

// WorkerKey is the worker's key for a store. A worker id holds the host name, whose
// characters a key may not (dots separate a key's tokens).
func WorkerKey(store, worker string) string {
	return store + "." + strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || (r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')) {
			return r
		}
		return '_'
	}, worker)
}

// Workers reads the beats of every worker that reported within the last workerBeatTTL,
// ordered by store, then worker (compactor status): those of stores ("" or none: every
// store of the account). It makes one batched direct get of each store's keys, which the
// operator, and a store's worker and agent for their own stores, may make; a refusal is
// said at once. Beats that name another store than their key are left out and counted in
// foreign.
func Workers(ctx context.Context, nc *nats.Conn, stores ...string) (beats []WorkerBeat, foreign int, err error) {
	type result struct {
		beats   []WorkerBeat
		foreign int
	}
	r, err := access.Guard(ctx, nc, func(ctx context.Context) (result, error) {
		js, err := jetstream.New(nc)
		if err != nil {
			return result{}, fmt.Errorf("workers: %w", err)
		}
		kv := OpenBucket(js, wire.BucketWorkers)
		if len(stores) == 0 {
			stores = []string{""}
		}
		var out result
		for _, st := range stores {
			b, f, err := ReadBeats(ctx, kv, st)
			if errors.Is(err, nats.ErrNoResponders) {
				err = Diagnose(ctx, js, "KV_"+wire.BucketWorkers, jetstream.ErrStreamNotFound)
			}
			if err != nil {
				return result{}, fmt.Errorf("workers: %w", err)
			}
			out.beats, out.foreign = append(out.beats, b...), out.foreign+len(f)
		}
		return out, nil
	})
	if err != nil {
		return nil, 0, err
	}
	slices.SortFunc(r.beats, func(a, b WorkerBeat) int {
		if c := strings.Compare(a.Store, b.Store); c != 0 {
			return c
		}
		return strings.Compare(a.Worker, b.Worker)
	})
	return r.beats, r.foreign, nil
}

// UnservedError says which stores no worker serves, and which stores are served.
type UnservedError struct {
	// Stores are the stores asked about that are not served; NoConsumer those of them
	// without a durable consumer (no service has ever served them on this NATS).
	Stores     []string
	NoConsumer []string
	// Served counts the workers of every store served now (nil when this user may not
	// list them).
	Served map[string]int
	// NoBucket: BucketWorkers does not exist (no service of this version has run here).
	NoBucket bool
}

func (e *UnservedError) Error() string {
	var b strings.Builder
	for i, st := range e.Stores {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "no worker serves store %s", st)
		switch {
		case e.NoBucket:
			fmt.Fprintf(&b, " (bucket %s does not exist: no `compactor run` of this version has started on this NATS)", wire.BucketWorkers)
		case slices.Contains(e.NoConsumer, st):
			fmt.Fprintf(&b, " (it has no consumer %s on %s: no `compactor run --store %s=DIR` has ever started on this NATS)", ConsumerName(st), wire.StreamJobs, st)
		default:
			fmt.Fprintf(&b, " (no worker has reported for it in the last %s: the services that served it have stopped)", WorkerBeatTTL)
		}
	}
	b.WriteString("; ")
	b.WriteString(servedList(e.Served))
	return b.String()
}

// servedList names the stores served now, with their workers (nil: not known, this user
// may not list them).
func servedList(served map[string]int) string {
	if served == nil {
		return "the stores served now cannot be listed with these credentials (an operator's can)"
	}
	if len(served) == 0 {
		return "no store is served on this NATS now"
	}
	names := make([]string, 0, len(served))
	for st := range served {
		names = append(names, st)
	}
	slices.Sort(names)
	for i, st := range names {
		names[i] = fmt.Sprintf("%s (%s)", st, nOf(served[st], "worker", "workers"))
	}
	return "stores served now: " + strings.Join(names, ", ")
}

// nOf is "1 worker", "2 workers".
func nOf(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// CheckServed returns nil when every store has its durable consumer and an owner key
// (a worker renewed it within the last workerBeatTTL); else an *UnservedError naming the
// stores that are not served and, when this user may list them, those that are. When some
// are not, it waits up to grace for their workers to report (a service that is starting),
// and returns as soon as they have. Each store's keys are read by a direct get in that
// store's part of the bucket, as a store's roles may; a store whose keys this user may not
// read is a *PermissionError at once.
func CheckServed(ctx context.Context, nc *nats.Conn, stores []string, grace time.Duration) error {
	_, err := access.Guard(ctx, nc, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, checkServed(ctx, nc, stores, grace)
	})
	return err
}

func checkServed(ctx context.Context, nc *nats.Conn, stores []string, grace time.Duration) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("served: %w", err)
	}
	kv := OpenBucket(js, wire.BucketWorkers)
	deadline := time.Now().Add(grace)
	for {
		var unserved []string
		for _, st := range stores {
			_, err := kv.Get(ctx, OwnerKey(st))
			switch {
			case errors.Is(err, jetstream.ErrKeyNotFound):
				unserved = append(unserved, st)
			case errors.Is(err, nats.ErrNoResponders):
				return &UnservedError{Stores: stores, NoBucket: true}
			case err != nil:
				if Unavailable(err) {
					err = Diagnose(ctx, js, "KV_"+wire.BucketWorkers, err)
				}
				return fmt.Errorf("served: bucket %s: %w", wire.BucketWorkers, err)
			}
		}
		if len(unserved) == 0 {
			return checkConsumers(ctx, js, stores)
		}
		if !time.Now().Before(deadline) {
			return unservedError(ctx, js, unserved)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("served: %w", ctx.Err())
		case <-time.After(min(200*time.Millisecond, time.Until(deadline))):
		}
	}
}

// checkConsumers returns nil when every store has its consumer, else the *UnservedError
// (an owner key outlives the consumer an operator deleted, for up to workerBeatTTL).
func checkConsumers(ctx context.Context, js jetstream.JetStream, stores []string) error {
	var none []string
	for _, st := range stores {
		if _, err := js.Consumer(ctx, wire.StreamJobs, ConsumerName(st)); errors.Is(err, jetstream.ErrConsumerNotFound) {
			none = append(none, st)
		} else if err != nil {
			return fmt.Errorf("served: consumer %s: %w", ConsumerName(st), err)
		}
	}
	if len(none) == 0 {
		return nil
	}
	return &UnservedError{Stores: none, NoConsumer: none, Served: servedNow(ctx, js)}
}

// unservedError builds the error for stores, finding out which of them have no consumer.
func unservedError(ctx context.Context, js jetstream.JetStream, stores []string) error {
	e := &UnservedError{Stores: stores, Served: servedNow(ctx, js)}
	for _, st := range stores {
		_, err := js.Consumer(ctx, wire.StreamJobs, ConsumerName(st))
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			e.NoConsumer = append(e.NoConsumer, st)
		}
	}
	return e
}

// servedNow counts the workers of every store served now, read from the subjects of
// BucketWorkers: the stream's information, which only an operator (or an admin) may read.
// For another user it is nil, and the refusal is expected, not reported.
func servedNow(ctx context.Context, js jetstream.JetStream) map[string]int {
	info, err := probe(ctx, js.Conn(), access.APIPrefix+"STREAM.INFO.KV_"+wire.BucketWorkers, func(ctx context.Context) (*jetstream.StreamInfo, error) {
		str, err := js.Stream(ctx, "KV_"+wire.BucketWorkers)
		if err != nil {
			return nil, err
		}
		return str.Info(ctx, jetstream.WithSubjectFilter(wire.KVSubjectRoot+wire.BucketWorkers+".*.*"))
	})
	if err != nil {
		return nil
	}
	out := map[string]int{}
	for subj := range info.State.Subjects {
		parts := strings.Split(strings.TrimPrefix(subj, wire.KVSubjectRoot+wire.BucketWorkers+"."), ".")
		if len(parts) == 2 && parts[1] != "_owner" {
			out[parts[0]]++
		}
	}
	return out
}

// probe runs f, whose request to subject this user may not be permitted to make: a
// Refusal of it ends f at once and is f's error, without ending the operations that
// Refusals watch (it is expected).
func probe[T any](ctx context.Context, nc *nats.Conn, subject string, f func(context.Context) (T, error)) (T, error) {
	base := context.WithoutCancel(ctx)
	pctx, cancel := context.WithTimeout(base, 2*time.Second)
	defer cancel()
	r := access.RefusalsOf(nc)
	if r == nil {
		return f(pctx)
	}
	refused, done := r.Expect(subject)
	defer done()
	pctx, cancelCause := context.WithCancelCause(pctx)
	defer cancelCause(nil)
	go func() {
		select {
		case pe := <-refused:
			cancelCause(pe)
		case <-pctx.Done():
		}
	}()
	v, err := f(pctx)
	if pe := access.Refusal(pctx); pe != nil {
		return v, pe
	}
	return v, err
}

// whyWaiting says, after a wait for job seq of store timed out, whether the job is still
// queued (and whether a worker has taken it) and whether any worker serves the store. It
// makes a few requests of its own, 2 s at most each, whatever ctx's state.
func whyWaiting(ctx context.Context, js jetstream.JetStream, store, subject string, seq uint64) string {
	base := context.WithoutCancel(ctx)
	qctx, cancel := context.WithTimeout(base, 2*time.Second)
	defer cancel()
	var parts []string
	m, err := DirectLast(qctx, js.Conn(), wire.StreamJobs, subject)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound) || (err == nil && m.Sequence != seq):
		parts = append(parts, "the job has left the queue (it ended just now, or was removed) but its final event was not seen")
	case err != nil:
		parts = append(parts, "whether the job is still queued is unknown ("+err.Error()+")")
	default:
		c, cerr := js.Consumer(qctx, wire.StreamJobs, ConsumerName(store))
		switch {
		case errors.Is(cerr, jetstream.ErrConsumerNotFound):
			parts = append(parts, "the job is still queued and no worker has taken it")
		case cerr != nil:
			parts = append(parts, "the job is still queued")
		case c.CachedInfo().Delivered.Stream >= seq:
			parts = append(parts, "the job is still queued and a worker has taken it (it is running, or waiting to be delivered again)")
		default:
			ci := c.CachedInfo()
			parts = append(parts, fmt.Sprintf("the job is still queued and no worker has taken it yet (%s of store %s not yet taken)", nOf(int(ci.NumPending), "job", "jobs"), store))
		}
	}
	nc := js.Conn()
	sctx, scancel := context.WithTimeout(base, 2*time.Second)
	defer scancel()
	var ue *UnservedError
	switch err := CheckServed(sctx, nc, []string{store}, 0); {
	case err == nil:
		parts = append(parts, "store "+store+" is served")
	case errors.As(err, &ue):
		parts = append(parts, ue.Error())
	default:
		parts = append(parts, "whether store "+store+" is served is unknown ("+err.Error()+")")
	}
	return strings.Join(parts, "; ")
}

// ReadBeats reads the beats of store ("": every store's of the account) in
// COMPACTOR_WORKERS, those of workers that reported within workerBeatTTL (a store's owner
// record is no beat), with one batched direct get. A beat that names another store than
// its key, or a worker whose key it is not, is left out and returned in foreign.
func ReadBeats(ctx context.Context, kv *Bucket, store string) (beats []WorkerBeat, foreign []error, err error) {
	entries, err := kv.lastAll(ctx, store)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", wire.BucketWorkers, err)
	}
	for _, e := range entries {
		if e.Operation() != jetstream.KeyValuePut || strings.HasSuffix(e.Key(), "._owner") {
			continue
		}
		b, ok := BeatOf(e)
		if !ok || time.Since(b.At) >= WorkerBeatTTL {
			continue
		}
		if keyStore, keyWorker, _ := strings.Cut(e.Key(), "."); b.Store != keyStore || WorkerKey(b.Store, b.Worker) != e.Key() {
			foreign = append(foreign, &ForeignError{Kind: "worker's beat", Where: wire.KVSubjectRoot + wire.BucketWorkers + "." + e.Key(), Store: keyStore,
				NamesStore: b.Store, Session: keyWorker, NamesSession: strings.TrimPrefix(WorkerKey(b.Store, b.Worker), b.Store+".")})
			continue
		}
		beats = append(beats, b)
	}
	return beats, foreign, nil
}

// BeatOf reads a worker's beat. A beat of a newer schema version is its worker (named by
// its key), its store and the time it was written, nothing more: WorkerBeat.Newer.
func BeatOf(e jetstream.KeyValueEntry) (WorkerBeat, bool) {
	if v, ok := RecordV(e.Value()); ok && v > BeatV {
		store, worker, _ := strings.Cut(e.Key(), ".")
		return WorkerBeat{V: v, Worker: worker, Store: store, At: e.Created().UTC()}, true
	}
	var b WorkerBeat
	if json.Unmarshal(e.Value(), &b) != nil {
		return b, false
	}
	return b, true
}

// StoreIdentity is what makes a store's directory itself, as a worker reports it.
type StoreIdentity struct {
	Store  string `json:"store"`
	Marker string `json:"marker,omitempty"` // the id in <root>/.compactor-store ("" when none could be written)
	Host   string `json:"host"`
	Root   string `json:"root"`
	Dev    uint64 `json:"dev"`
	Ino    uint64 `json:"ino"`
	Shared bool   `json:"shared,omitempty"`
}

// SameDir reports whether two identities are one directory seen from one machine: the
// same marker, device and inode (a restart, a container of the same host with the
// directory mounted, a second process). The same marker under another device or inode is
// the directory seen through another mount (a shared file system on another host) or a
// copy of it: a store must be declared shared for that.
func (a StoreIdentity) SameDir(b StoreIdentity) bool {
	if a.Marker == "" || b.Marker == "" {
		return a.Marker == b.Marker && a.Host == b.Host && a.Dev == b.Dev && a.Ino == b.Ino
	}
	return a.Marker == b.Marker && a.Dev == b.Dev && a.Ino == b.Ino
}

func (a StoreIdentity) String() string {
	s := fmt.Sprintf("host %s, root %s (device %d, inode %d", a.Host, a.Root, a.Dev, a.Ino)
	if a.Marker != "" {
		s += ", marker " + a.Marker
	}
	return s + ")"
}

// OwnerKey is the store's claim in COMPACTOR_WORKERS.
func OwnerKey(store string) string { return store + "._owner" }

// JobVersionsOf are the job versions a worker's beat says it works; a beat without them
// comes from a worker older than the field, which works version 1 only.
func (b WorkerBeat) JobVersionsOf() []int {
	if b.Newer() {
		return nil // not read from a beat of a newer schema
	}
	if len(b.JobVersions) == 0 {
		return []int{1}
	}
	return b.JobVersions
}
