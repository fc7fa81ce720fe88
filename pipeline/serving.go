package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Who serves a store. A job published for a store that no worker serves sits in
// COMPACTOR_JOBS until one does; a client that asks first can say so instead of waiting
// in silence. Every worker keeps a key per store it serves in BucketWorkers,
// <store>.<worker>, and the store's owner key <store>._owner (owner.go), put again every
// workerBeatEvery while its fetch loops run; the bucket's TTL drops the keys of a worker
// that stopped (a crash as well as a shutdown: a service restarted within the TTL is not
// seen as gone). A store is served when it has its durable consumer and its owner key.
// Every key a client reads is in the store's part of the bucket: a store's roles may read
// their own.

// BucketWorkers holds the workers' keys, <store>.<worker>, whose values are WorkerBeats,
// and each store's owner, <store>._owner, whose value is the owner's identity (an ownerRecord).
const BucketWorkers = "COMPACTOR_WORKERS"

const (
	workerBeatEvery = 10 * time.Second
	// workerBeatTTL is how long a worker counts as serving after its last beat: three
	// beats, so that one slow or lost put does not make a store look unserved.
	workerBeatTTL = 3 * workerBeatEvery
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
func (b WorkerBeat) Newer() bool { return b.V > beatV }

// workerKey is the worker's key for a store. A worker id holds the host name, whose
// characters a key may not (dots separate a key's tokens).
func workerKey(store, worker string) string {
	return store + "." + strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || (r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')) {
			return r
		}
		return '_'
	}, worker)
}

// beatServing announces this worker for each of its stores now and every workerBeatEvery
// until the returned stop is called, renews the stores' owner keys, and reads the fleet's
// settings again (a lease TTL changed by setup applies from the next renewal). A failed
// put is logged; the next one may succeed. A store whose owner key another directory has
// taken meanwhile (this worker lost NATS for longer than workerBeatTTL) is said at error
// level at each beat: two directories serve it.
func (s *Service) beatServing(ctx context.Context) (stop func()) {
	host, _ := os.Hostname()
	started := time.Now().UTC()
	beat := func() {
		for _, st := range s.cfg.Stores {
			b, _ := json.Marshal(WorkerBeat{V: beatV, Worker: s.worker, Store: st.Name, Host: host, Identity: s.ids[st.Name], Concurrency: s.cfg.Concurrency, Started: started, At: time.Now().UTC(),
				Version: s.cfg.Version, JobVersions: s.cfg.JobVersions, InFlight: s.flights.count(), Paused: s.pausedNow(st.Name) != nil})
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := s.res.workers.Put(pctx, workerKey(st.Name, s.worker), b)
			if err == nil {
				err = checkOwner(pctx, s.res.workers, s.ids[st.Name], true, func(err error) { s.foreign(st.Name, foreignOwner, err) })
			}
			cancel()
			var oe *OwnerError
			switch {
			case errors.As(err, &oe):
				s.log.Error("another directory has taken this store's name: two directories serve it; stop one of them", "store", st.Name, "err", err)
			case err != nil && ctx.Err() == nil:
				s.log.Warn("cannot report this worker as serving its store; clients may refuse to queue for it", "store", st.Name, "bucket", BucketWorkers, "err", err)
			}
		}
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var newer *NewerRecordError
		switch f, err := readFleet(fctx, s.nc); {
		case err == nil:
			s.follow(*f)
		case errors.As(err, &newer) && s.sayEvery("settings-newer", time.Hour):
			s.log.Warn("the fleet's settings were rewritten by a newer compactor: this worker keeps those it started with; upgrade it", "err", err)
		case ctx.Err() == nil:
			s.log.Debug("fleet settings not read again", "err", err)
		}
		cancel()
	}
	beat()
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(workerBeatEvery)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				beat()
			}
		}
	}()
	return func() { close(quit); <-done }
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
	r, err := guard(ctx, nc, func(ctx context.Context) (result, error) {
		js, err := jetstream.New(nc)
		if err != nil {
			return result{}, fmt.Errorf("workers: %w", err)
		}
		kv := openBucket(js, BucketWorkers)
		if len(stores) == 0 {
			stores = []string{""}
		}
		var out result
		for _, st := range stores {
			b, f, err := readBeats(ctx, kv, st)
			if errors.Is(err, nats.ErrNoResponders) {
				err = diagnose(ctx, js, "KV_"+BucketWorkers, jetstream.ErrStreamNotFound)
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
			fmt.Fprintf(&b, " (bucket %s does not exist: no `compactor run` of this version has started on this NATS)", BucketWorkers)
		case slices.Contains(e.NoConsumer, st):
			fmt.Fprintf(&b, " (it has no consumer %s on %s: no `compactor run --store %s=DIR` has ever started on this NATS)", ConsumerName(st), wire.StreamJobs, st)
		default:
			fmt.Fprintf(&b, " (no worker has reported for it in the last %s: the services that served it have stopped)", workerBeatTTL)
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
	_, err := guard(ctx, nc, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, checkServed(ctx, nc, stores, grace)
	})
	return err
}

func checkServed(ctx context.Context, nc *nats.Conn, stores []string, grace time.Duration) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("served: %w", err)
	}
	kv := openBucket(js, BucketWorkers)
	deadline := time.Now().Add(grace)
	for {
		var unserved []string
		for _, st := range stores {
			_, err := kv.Get(ctx, ownerKey(st))
			switch {
			case errors.Is(err, jetstream.ErrKeyNotFound):
				unserved = append(unserved, st)
			case errors.Is(err, nats.ErrNoResponders):
				return &UnservedError{Stores: stores, NoBucket: true}
			case err != nil:
				if unavailable(err) {
					err = diagnose(ctx, js, "KV_"+BucketWorkers, err)
				}
				return fmt.Errorf("served: bucket %s: %w", BucketWorkers, err)
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
	info, err := probe(ctx, js.Conn(), apiPre+"STREAM.INFO.KV_"+BucketWorkers, func(ctx context.Context) (*jetstream.StreamInfo, error) {
		str, err := js.Stream(ctx, "KV_"+BucketWorkers)
		if err != nil {
			return nil, err
		}
		return str.Info(ctx, jetstream.WithSubjectFilter(wire.KVSubjectRoot+BucketWorkers+".*.*"))
	})
	if err != nil {
		return nil
	}
	out := map[string]int{}
	for subj := range info.State.Subjects {
		parts := strings.Split(strings.TrimPrefix(subj, wire.KVSubjectRoot+BucketWorkers+"."), ".")
		if len(parts) == 2 && parts[1] != "_owner" {
			out[parts[0]]++
		}
	}
	return out
}

// probe runs f, whose request to subject this user may not be permitted to make: a
// refusal of it ends f at once and is f's error, without ending the operations that
// Refusals watch (it is expected).
func probe[T any](ctx context.Context, nc *nats.Conn, subject string, f func(context.Context) (T, error)) (T, error) {
	base := context.WithoutCancel(ctx)
	pctx, cancel := context.WithTimeout(base, 2*time.Second)
	defer cancel()
	r := RefusalsOf(nc)
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
	if pe := refusal(pctx); pe != nil {
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
	m, err := directLast(qctx, js.Conn(), wire.StreamJobs, subject)
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
