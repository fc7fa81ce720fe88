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
// Waiting costs deliveries, and the consumer allows MaxDeliver + maxFreeDeliveries of them
// before JetStream gives up on a message (the max-deliveries advisory dead-letters it). A
// job handed back that many times (a job waiting for a version nobody runs yet, or held
// by a spend limit for many windows) is queued again instead, as a new message with a
// fresh delivery count (requeue).

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

// versionList is "1" or "1, 2".
func versionList(vs []int) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ", ")
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
	beats, err := readBeats(rctx, s.res.workers, store)
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

// readBeats reads the beats of store ("": every store's) in COMPACTOR_WORKERS, those of
// workers that reported within workerBeatTTL (a store's owner record is no beat).
func readBeats(ctx context.Context, kv *kvBucket, store string) ([]WorkerBeat, error) {
	w, err := kv.Watch(ctx, store)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", BucketWorkers, err)
	}
	defer func() { _ = w.Stop() }()
	var out []WorkerBeat
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("read %s: %w", BucketWorkers, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("read %s: the watch ended", BucketWorkers)
			}
			if e == nil {
				return out, nil
			}
			if e.Operation() != jetstream.KeyValuePut || strings.HasSuffix(e.Key(), "._owner") {
				continue
			}
			if b, ok := beatOf(e); ok && time.Since(b.At) < workerBeatTTL {
				out = append(out, b)
			}
		}
	}
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
		"job_version", v, "understood", versionList(s.cfg.JobVersions), "workers_that_understand_it", others, "retry_in_s", seconds(delay))
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
// delay (at once for 0). A job that has spent nearly every delivery its consumer allows is
// queued again as a new message instead: waiting never dead-letters a job. jobID names
// the job for its attempt count when the delivery was not decoded ("" otherwise).
func (s *Service) handBack(ctx context.Context, d *delivery, reason string, delay time.Duration, jobID string) {
	if d.attempt > 0 {
		_, err := addAttempts(ctx, s.res.attempts, d.key, -1)
		answered(d.log, slog.LevelDebug, "attempt of a handed-back job not uncounted", err)
		d.attempt = 0
	}
	d.releaseLease(ctx)
	s.m.handedBack.WithLabelValues(d.ev.Store, reason).Inc()
	s.noteHeld(d.ev.JobSeq, d.msg.Subject(), reason != handBackShutdown)
	if d.key == "" && jobID != "" {
		d.key = attemptKey(d.ev.Store, d.ev.JobSeq, jobID)
	}
	if d.delivered+1 >= uint64(s.cfg.MaxDeliver+maxFreeDeliveries) {
		s.requeue(ctx, d, reason, delay)
		return
	}
	if delay <= 0 {
		answered(d.log, slog.LevelWarn, "nak failed", d.msg.Nak())
		return
	}
	answered(d.log, slog.LevelWarn, "nak failed", d.msg.NakWithDelay(delay))
}

// requeue queues a handed-back job again as a new message, with a fresh delivery count and
// the attempts it used so far: it ends this message (an ack removes it from the work
// queue, freeing its subject) and publishes the same payload. When the publish fails, the
// job is kept as a dead letter, from where `compactor dlq retry` queues it again: it is
// never dropped. (A crash between the ack and the publish loses it; a sweep enqueues its
// session again after --sweep-retry-base.)
func (s *Service) requeue(ctx context.Context, d *delivery, reason string, delay time.Duration) {
	used := 0
	if d.key != "" {
		used = s.attemptsUsed(ctx, d.key)
	}
	if err := d.msg.DoubleAck(ctx); err != nil {
		answered(d.log, slog.LevelWarn, "nak failed", d.msg.NakWithDelay(delay))
		d.log.Warn("job not queued again (its ack failed); handed back instead", "reason", reason, "err", err)
		return
	}
	s.republish(ctx, d.log, d.ev, d.msg.Subject(), d.msg.Data(), d.delivered, d.key, used, reason)
}

// republish publishes the payload of a job message that has left the queue as a new
// message on its subject (no message id: the duplicate window must not swallow it), and
// moves its attempt count (used, under oldKey) to the new message. A publish that fails
// leaves the job as a dead letter.
func (s *Service) republish(ctx context.Context, log *slog.Logger, ev Event, subject string, payload []byte, deliveries uint64, oldKey string, used int, reason string) {
	ack, err := s.res.js.Publish(ctx, subject, payload, jetstream.WithExpectStream(StreamJobs))
	if err != nil {
		why := fmt.Sprintf("queued again after %d deliveries spent waiting (%s), but the publish failed", deliveries, reason)
		if IsAlreadyQueued(err) {
			why = fmt.Sprintf("queued again after %d deliveries spent waiting (%s), but another job of this kind is now pending for the session", deliveries, reason)
		}
		s.deadLetter(ctx, deadJob{subject: subject, payload: payload, deliveries: deliveries, cause: "requeue failed",
			reason: why, err: err, ev: ev, start: time.Now(), log: log})
		return
	}
	if oldKey != "" {
		if used > 0 {
			if _, id, ok := jobHeadOf(payload); ok {
				_, aerr := addAttempts(ctx, s.res.attempts, attemptKey(ev.Store, ack.Sequence, id), used)
				answered(log, slog.LevelWarn, "attempt count not carried to the queued-again job", aerr)
			}
		}
		answered(log, slog.LevelDebug, "attempt count not cleared; it expires by itself", clearAttempts(ctx, s.res.attempts, oldKey))
	}
	log.Info("job queued again as a new message: it spent nearly every delivery its consumer allows waiting",
		"reason", reason, "deliveries", deliveries, "new_job_seq", ack.Sequence)
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
		if m, err := directLast(ctx, s.nc, StreamJobs, subject); errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && m.Sequence != seq {
			s.noteHeld(seq, "", false)
			continue
		}
		n++
	}
	return n
}

// attemptsUsed reads the attempt count under key (0 when there is none or it cannot be read).
func (s *Service) attemptsUsed(ctx context.Context, key string) int {
	e, err := s.res.attempts.Get(ctx, key)
	if err != nil {
		return 0
	}
	c, err := parseCount(BucketAttempts, key, e.Value())
	if err != nil {
		return 0
	}
	return c.N
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
