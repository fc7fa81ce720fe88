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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Who serves a store. A job published for a store that no worker serves sits in
// COMPACTOR_JOBS until one does; a client that asks first can say so instead of waiting
// in silence. Every worker keeps a key per store it serves in BucketWorkers, put again
// every workerBeatEvery while its fetch loops run; the bucket's TTL drops the keys of a
// worker that stopped (a crash as well as a shutdown: a service restarted within the TTL
// is not seen as gone). A store is served when it has its durable consumer and at least
// one key.

// BucketWorkers holds the workers' keys, <store>.<worker>, whose values are WorkerBeats.
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
	Worker      string    `json:"worker"`
	Store       string    `json:"store"`
	Host        string    `json:"host,omitempty"`
	Concurrency int       `json:"concurrency"`
	Started     time.Time `json:"started"`
	At          time.Time `json:"at"`
	// Version is the worker's program version (`git describe` of its build); JobVersions
	// the job schema versions it works (absent: a worker older than the field, which
	// works version 1); InFlight its jobs in flight at the beat (all its stores').
	Version     string `json:"version,omitempty"`
	JobVersions []int  `json:"jobVersions,omitempty"`
	InFlight    int    `json:"inFlight"`
}

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
// until the returned stop is called. A failed put is logged; the next one may succeed.
func (s *Service) beatServing(ctx context.Context) (stop func()) {
	host, _ := os.Hostname()
	started := time.Now().UTC()
	beat := func() {
		for _, st := range s.cfg.Stores {
			b, _ := json.Marshal(WorkerBeat{Worker: s.worker, Store: st.Name, Host: host, Concurrency: s.cfg.Concurrency, Started: started, At: time.Now().UTC(),
				Version: s.cfg.Version, JobVersions: s.cfg.JobVersions, InFlight: s.flights.count()})
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := s.res.workers.Put(pctx, workerKey(st.Name, s.worker), b)
			cancel()
			if err != nil && ctx.Err() == nil {
				s.log.Warn("cannot report this worker as serving its store; clients may refuse to queue for it", "store", st.Name, "bucket", BucketWorkers, "err", err)
			}
		}
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
// ordered by store, then worker (compactor status).
func Workers(ctx context.Context, nc *nats.Conn) ([]WorkerBeat, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	kv, err := js.KeyValue(ctx, BucketWorkers)
	if err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			err = diagnose(ctx, js, "KV_"+BucketWorkers, jetstream.ErrStreamNotFound)
		} else if unavailable(err) {
			err = diagnose(ctx, js, "KV_"+BucketWorkers, err)
		}
		return nil, fmt.Errorf("workers: bucket %s: %w", BucketWorkers, err)
	}
	beats, err := readBeats(ctx, kv, ">")
	if err != nil {
		return nil, fmt.Errorf("workers: %w", err)
	}
	slices.SortFunc(beats, func(a, b WorkerBeat) int {
		if c := strings.Compare(a.Store, b.Store); c != 0 {
			return c
		}
		return strings.Compare(a.Worker, b.Worker)
	})
	return beats, nil
}

// UnservedError says which stores no worker serves, and which stores are served.
type UnservedError struct {
	// Stores are the stores asked about that are not served; NoConsumer those of them
	// without a durable consumer (no service has ever served them on this NATS).
	Stores     []string
	NoConsumer []string
	// Served counts the workers of every store served now.
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
			fmt.Fprintf(&b, " (it has no consumer %s on %s: no `compactor run --store %s=DIR` has ever started on this NATS)", ConsumerName(st), StreamJobs, st)
		default:
			fmt.Fprintf(&b, " (no worker has reported for it in the last %s: the services that served it have stopped)", workerBeatTTL)
		}
	}
	b.WriteString("; ")
	b.WriteString(servedList(e.Served))
	return b.String()
}

// servedList names the stores served now, with their workers.
func servedList(served map[string]int) string {
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

// CheckServed returns nil when every store has its durable consumer and a worker that
// reported within the last workerBeatTTL; else an *UnservedError naming the stores that
// are not served and those that are. When some are not, it waits up to grace for their
// workers to report (a service that is starting), and returns as soon as they have.
func CheckServed(ctx context.Context, nc *nats.Conn, stores []string, grace time.Duration) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("served: %w", err)
	}
	kv, err := js.KeyValue(ctx, BucketWorkers)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return &UnservedError{Stores: stores, NoBucket: true}
	}
	if err != nil {
		if unavailable(err) {
			err = diagnose(ctx, js, "KV_"+BucketWorkers, err)
		}
		return fmt.Errorf("served: bucket %s: %w", BucketWorkers, err)
	}
	// One watcher gives the keys there now, then each new one: no polling while waiting.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := kv.WatchAll(wctx)
	if err != nil {
		return fmt.Errorf("served: watch %s: %w", BucketWorkers, err)
	}
	defer func() { _ = w.Stop() }()
	workers := map[string]map[string]bool{} // store → keys
	unserved := func() []string {
		var out []string
		for _, st := range stores {
			if len(workers[st]) == 0 {
				out = append(out, st)
			}
		}
		return out
	}
	var timeout <-chan time.Time // starts when the initial keys are in
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("served: %w", ctx.Err())
		case <-timeout:
			return unservedError(ctx, js, unserved(), workers)
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("served: watch %s ended", BucketWorkers)
			}
			if e != nil {
				st, _, _ := strings.Cut(e.Key(), ".")
				if workers[st] == nil {
					workers[st] = map[string]bool{}
				}
				if e.Operation() == jetstream.KeyValuePut {
					workers[st][e.Key()] = true
				} else {
					delete(workers[st], e.Key())
				}
			} else if timeout == nil {
				t := time.NewTimer(grace)
				defer t.Stop()
				timeout = t.C
			}
			if timeout == nil {
				continue
			}
			if len(unserved()) == 0 {
				return checkConsumers(ctx, js, stores, workers)
			}
		}
	}
}

// checkConsumers returns nil when every store has its consumer, else the *UnservedError
// (a worker's key outlives the consumer an operator deleted, for up to workerBeatTTL).
func checkConsumers(ctx context.Context, js jetstream.JetStream, stores []string, workers map[string]map[string]bool) error {
	var none []string
	for _, st := range stores {
		if _, err := js.Consumer(ctx, StreamJobs, ConsumerName(st)); errors.Is(err, jetstream.ErrConsumerNotFound) {
			none = append(none, st)
		} else if err != nil {
			return fmt.Errorf("served: consumer %s: %w", ConsumerName(st), err)
		}
	}
	if len(none) == 0 {
		return nil
	}
	for _, st := range none {
		delete(workers, st)
	}
	return &UnservedError{Stores: none, NoConsumer: none, Served: counts(workers)}
}

// unservedError builds the error for stores, finding out which of them have no consumer.
func unservedError(ctx context.Context, js jetstream.JetStream, stores []string, workers map[string]map[string]bool) error {
	e := &UnservedError{Stores: stores, Served: counts(workers)}
	for _, st := range stores {
		_, err := js.Consumer(ctx, StreamJobs, ConsumerName(st))
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			e.NoConsumer = append(e.NoConsumer, st)
		}
	}
	return e
}

func counts(workers map[string]map[string]bool) map[string]int {
	out := map[string]int{}
	for st, keys := range workers {
		if len(keys) > 0 {
			out[st] = len(keys)
		}
	}
	return out
}

// whyWaiting says, after a wait for job seq of store timed out, whether the job is still
// queued (and whether a worker has taken it) and whether any worker serves the store. It
// makes a few requests of its own, 2 s at most each, whatever ctx's state.
func whyWaiting(ctx context.Context, js jetstream.JetStream, store string, seq uint64) string {
	base := context.WithoutCancel(ctx)
	qctx, cancel := context.WithTimeout(base, 2*time.Second)
	defer cancel()
	var parts []string
	str, err := js.Stream(qctx, StreamJobs)
	if err == nil {
		_, err = str.GetMsg(qctx, seq)
	}
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		parts = append(parts, "the job has left the queue (it ended just now, or was removed) but its final event was not seen")
	case err != nil:
		parts = append(parts, "whether the job is still queued is unknown ("+err.Error()+")")
	default:
		c, cerr := js.Consumer(qctx, StreamJobs, ConsumerName(store))
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
