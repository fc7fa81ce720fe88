package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// Job schema versions across a fleet that is never all on one version. A job names its
// schema version ("v"); a worker works the versions in Config.JobVersions. A delivery of a
// version this worker does not understand is handed back (a Nak with a delay) for a worker
// that does, never dead-lettered: soon when a worker of the store that understands it has
// reported in COMPACTOR_WORKERS (each beat lists the versions its worker works), later when
// none has. So a fleet in a rolling upgrade routes each job to a worker that understands
// it, through the store's one consumer.
//
// Waiting costs deliveries, which do not count against the job's bound: each hand-back is
// counted with the job's attempts, and the bound (MaxDeliver + maxFreeDeliveries) is
// raised by them (handBack, beyondBound). A job waiting for a version nobody runs yet, or
// held by a spend limit for many windows, keeps its message, and its sequence, to its end.

// versionWaitAlone is how long a job of a version no worker of its store understands
// waits before it is delivered again: a worker that understands it may start meanwhile.
const versionWaitAlone = time.Minute

// fleetViewTTL is how long a worker trusts what it read of COMPACTOR_WORKERS.
const fleetViewTTL = 5 * time.Second

// jobHead is what a worker reads of a payload before it knows the payload's version.
type jobHead struct {
	V  *int   `json:"v"`
	ID string `json:"id"`
}

// jobHeadOf reads a payload's version and id; ok is false when the payload is not a JSON
// object with a numeric v (admission then refuses it as an invalid job).
func jobHeadOf(data []byte) (v int, id string, ok bool) {
	var h jobHead
	if json.Unmarshal(data, &h) != nil || h.V == nil {
		return 0, "", false
	}
	return *h.V, h.ID, true
}

// jobVersionsOf are the job versions a worker's beat says it works; a beat without them
// comes from a worker older than the field, which works version 1 only.
func (b WorkerBeat) jobVersionsOf() []int {
	if b.Newer() {
		return nil // not read from a beat of a newer schema
	}
	if len(b.JobVersions) == 0 {
		return []int{1}
	}
	return b.JobVersions
}

// fleetView is this worker's cached view of COMPACTOR_WORKERS, store by store.
type fleetView struct {
	mu    sync.Mutex
	at    map[string]time.Time
	beats map[string][]WorkerBeat
}

// storeBeats returns the beats of the workers of store, read at most every fleetViewTTL.
func (s *Service) storeBeats(ctx context.Context, store string) []WorkerBeat {
	f := &s.fleet
	f.mu.Lock()
	defer f.mu.Unlock()
	if time.Since(f.at[store]) < fleetViewTTL {
		return f.beats[store]
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	beats, foreign, err := readBeats(rctx, s.res.workers, store)
	for _, ferr := range foreign {
		s.foreign(store, foreignBeat, ferr)
	}
	if err != nil {
		s.log.Debug("cannot read the workers of a store", "store", store, "bucket", BucketWorkers, "err", err)
		return f.beats[store]
	}
	if f.at == nil {
		f.at, f.beats = map[string]time.Time{}, map[string][]WorkerBeat{}
	}
	f.at[store], f.beats[store] = time.Now(), beats
	return beats
}

// readBeats reads the beats of store ("": every store's of the account) in
// COMPACTOR_WORKERS, those of workers that reported within workerBeatTTL (a store's owner
// record is no beat), with one batched direct get. A beat that names another store than
// its key, or a worker whose key it is not, is left out and returned in foreign.
func readBeats(ctx context.Context, kv *kvBucket, store string) (beats []WorkerBeat, foreign []error, err error) {
	entries, err := kv.lastAll(ctx, store)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", BucketWorkers, err)
	}
	for _, e := range entries {
		if e.Operation() != jetstream.KeyValuePut || strings.HasSuffix(e.Key(), "._owner") {
			continue
		}
		b, ok := beatOf(e)
		if !ok || time.Since(b.At) >= workerBeatTTL {
			continue
		}
		if keyStore, keyWorker, _ := strings.Cut(e.Key(), "."); b.Store != keyStore || workerKey(b.Store, b.Worker) != e.Key() {
			foreign = append(foreign, &ForeignError{Kind: "worker's beat", Where: wire.KVSubjectRoot + BucketWorkers + "." + e.Key(), Store: keyStore,
				NamesStore: b.Store, Session: keyWorker, NamesSession: strings.TrimPrefix(workerKey(b.Store, b.Worker), b.Store+".")})
			continue
		}
		beats = append(beats, b)
	}
	return beats, foreign, nil
}

// beatOf reads a worker's beat. A beat of a newer schema version is its worker (named by
// its key), its store and the time it was written, nothing more: WorkerBeat.Newer.
func beatOf(e jetstream.KeyValueEntry) (WorkerBeat, bool) {
	if v, ok := recordV(e.Value()); ok && v > beatV {
		store, worker, _ := strings.Cut(e.Key(), ".")
		return WorkerBeat{V: v, Worker: worker, Store: store, At: e.Created().UTC()}, true
	}
	var b WorkerBeat
	if json.Unmarshal(e.Value(), &b) != nil {
		return b, false
	}
	return b, true
}

// unknownVersion hands back a delivery whose job is of a version this worker does not
// understand: soon when another worker of the store understands it, later when none does.
func (s *Service) unknownVersion(ctx context.Context, d *delivery, v int, jobID string) {
	store := d.ev.Store
	delay, others := versionWaitAlone, 0
	if s.cfg.versionWaitAlone > 0 {
		delay = s.cfg.versionWaitAlone
	}
	for _, b := range s.storeBeats(ctx, store) {
		if b.Worker != s.worker && slices.Contains(b.jobVersionsOf(), v) {
			others++
		}
	}
	if others > 0 {
		delay = s.cfg.LeaseBusyDelay
	}
	d.log = s.log.With("store", store, "subject", d.msg.Subject(), "job_seq", d.ev.JobSeq, "delivery", d.delivered)
	level := slog.LevelDebug
	if s.sayEvery("version:"+strconv.Itoa(v), time.Minute) {
		level = slog.LevelWarn
	}
	d.log.Log(ctx, level, "job of a schema version this worker does not understand; handed back for a worker that does",
		"job_version", v, "understood", wire.VersionList(s.cfg.JobVersions), "workers_that_understand_it", others, "retry_in_s", seconds(delay))
	s.handBack(ctx, d, handBackVersion, delay, jobID)
}

// Why a delivery was handed back (the reason label of compactor_jobs_handed_back_total).
const (
	handBackVersion  = "version"  // a job schema version this worker does not understand
	handBackSpend    = "spend"    // a spend limit reached (spend.go)
	handBackShutdown = "shutdown" // the worker is stopping
)

// handBack answers a delivery this worker does not work now through no fault of the job:
// its version, a spend limit, a shutdown. It costs the job no attempt (one already counted
// is taken back) and the session's lease is released; the job is delivered again after
// delay (at once for 0). The hand-back is counted with the job's attempts (countRecord's
// HandedBack), so that waiting never spends the deliveries that bound a job (admit): the
// job keeps its message however long it waits, and with it its sequence, which the
// requester's wait and the job's events name. jobID names the job for its count when
// the delivery was not decoded (its "id", empty when it has none).
func (s *Service) handBack(ctx context.Context, d *delivery, reason string, delay time.Duration, jobID string) {
	if d.key == "" { // not decoded (a version this worker does not work): the key its workers use
		d.key = attemptKey(d.ev.Store, d.ev.JobSeq, jobID)
	}
	uncount := d.attempt > 0
	_, err := updateCount(ctx, s.res.attempts, "attempts", d.key, func(c *countRecord) bool {
		if uncount {
			c.N = max(c.N-1, 0)
		}
		c.HandedBack++
		return true
	})
	answered(d.log, slog.LevelWarn, "hand-back not counted; the job's deliveries may run out sooner", err)
	d.attempt = 0
	d.releaseLease(ctx)
	s.m.handedBack.WithLabelValues(d.ev.Store, reason).Inc()
	s.noteHeld(d.ev.JobSeq, d.msg.Subject(), reason != handBackShutdown)
	if delay <= 0 {
		answered(d.log, slog.LevelWarn, "nak failed", d.msg.Nak())
		return
	}
	answered(d.log, slog.LevelWarn, "nak failed", d.msg.NakWithDelay(delay))
}

// beyondBound reports whether a delivery is beyond the bound of a job's deliveries:
// MaxDeliver attempts, maxFreeDeliveries spent on contention (a busy lease), and every
// delivery handed back (handBack). ok is false when that cannot be known now (the count
// cannot be read): the delivery is then given back, not dead-lettered.
func (s *Service) beyondBound(ctx context.Context, d *delivery) (beyond, ok bool) {
	bound := uint64(s.cfg.MaxDeliver + maxFreeDeliveries)
	if d.delivered <= bound {
		return false, true
	}
	e, err := s.res.attempts.Get(ctx, d.key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return true, true
	case err != nil:
		d.log.Warn("the job's hand-backs cannot be read; delivery given back", "err", err)
		return false, false
	}
	c, err := parseCount(BucketAttempts, d.key, e.Value())
	if err != nil {
		// A count this worker cannot read (a newer compactor's) bounds nothing here.
		d.log.Debug("the job's hand-backs cannot be read; the delivery is taken as within its bound", "err", err)
		return false, true
	}
	return d.delivered > bound+uint64(c.HandedBack), true
}

// noteHeld notes (held) or forgets a job message (its sequence and subject) this worker
// handed back for a reason that lasts (a version it does not work, a spend limit): RunOnce
// does not wait for those.
func (s *Service) noteHeld(seq uint64, subject string, held bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !held {
		delete(s.held, seq)
		return
	}
	if s.held == nil {
		s.held = map[uint64]string{}
	}
	s.held[seq] = subject
}

// heldQueued counts the job messages this worker handed back for a lasting reason that are
// still queued (those another worker has taken since are forgotten). A message is still
// queued when it is the one on its subject (a direct get of the subject, which a store's
// permission allows: a read by sequence is not).
func (s *Service) heldQueued(ctx context.Context) int {
	s.mu.Lock()
	held := maps.Clone(s.held)
	s.mu.Unlock()
	n := 0
	for seq, subject := range held {
		if m, err := directLast(ctx, s.nc, wire.StreamJobs, subject); errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && m.Sequence != seq {
			s.noteHeld(seq, "", false)
			continue
		}
		n++
	}
	return n
}

// sayEvery reports whether what (a kind of log line) was not said in the last every, and
// notes that it is said now: repeated warnings are logged once per period.
func (s *Service) sayEvery(what string, every time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.said == nil {
		s.said = map[string]time.Time{}
	}
	if last, ok := s.said[what]; ok && time.Since(last) < every {
		return false
	}
	s.said[what] = time.Now()
	return true
}
