package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// What an operator does through the view: a store's dead letters (read, retried, purged),
// its pause, its queued jobs and the queue's history.

// accountOf is the account that holds store: the one whose list names it, else (one
// account without a list) the only one.
func (v *FleetView) accountOf(store string) (*accountView, error) {
	if err := wire.ValidateStoreName(store); err != nil {
		return nil, err
	}
	if a := v.byStore[store]; a != nil {
		return a, nil
	}
	if len(v.accounts) == 1 && v.accounts[0].trusted == nil {
		return v.accounts[0], nil
	}
	return nil, fmt.Errorf("store %s is in none of the accounts read (fleet.json)", store)
}

// DeadLetters are a store's dead letters, newest first (with FleetViewOptions.DeadLetters).
func (v *FleetView) DeadLetters(store string) []DeadLetterRecord {
	a, err := v.accountOf(store)
	if err != nil || a.dlq == nil {
		return nil
	}
	return a.dlq.list(store)
}

// deadLetterOf opens the dead letters of store's account and reads the one of sequence seq
// there (a sequence is its account's): one of another store is not found.
func (v *FleetView) deadLetterOf(ctx context.Context, store string, seq uint64) (*accountView, *DLQ, DeadLetterRecord, error) {
	a, err := v.accountOf(store)
	if err != nil {
		return nil, nil, DeadLetterRecord{}, err
	}
	q, err := OpenDLQ(ctx, a.nc)
	if err != nil {
		return nil, nil, DeadLetterRecord{}, err
	}
	recs, err := q.List(ctx, DeadLetterFilter{Store: store, Seqs: []uint64{seq}})
	if err != nil {
		return nil, nil, DeadLetterRecord{}, err
	}
	if len(recs) == 0 || recs[0].Store != store {
		return nil, nil, DeadLetterRecord{}, fmt.Errorf("dlq: store %s has no dead letter %d", store, seq)
	}
	return a, q, recs[0], nil
}

// DeadLetter is one dead letter of store by its sequence, read from its account's
// COMPACTOR_DLQ.
func (v *FleetView) DeadLetter(ctx context.Context, store string, seq uint64) (DeadLetterRecord, error) {
	_, _, rec, err := v.deadLetterOf(ctx, store, seq)
	return rec, err
}

// InstructionsError refuses to replay a job's summary instructions without the operator
// saying so: they are the text of whoever published the job (a store's key), and replaying
// them is the operator's act (docs/security.md, "Instructions are data").
type InstructionsError struct {
	Seq          uint64
	Instructions string
}

func (e *InstructionsError) Error() string {
	return fmt.Sprintf("dead letter %d not retried: its job carries summary instructions (%d bytes) that its publisher wrote; read them, then retry passing them on", e.Seq, len(e.Instructions))
}

// RetryDeadLetter enqueues a dead letter's job again and deletes the dead letter. A job
// with summary instructions is an *InstructionsError unless allowInstructions (the caller
// logs who passed them on).
func (v *FleetView) RetryDeadLetter(ctx context.Context, store string, seq uint64, allowInstructions bool) (RetryResult, error) {
	a, q, rec, err := v.deadLetterOf(ctx, store, seq)
	if err != nil {
		return RetryResult{}, err
	}
	if job, err := wire.DecodeJob(rec.Job); err == nil && job.Instructions != "" && !allowInstructions {
		return RetryResult{Seq: seq, Store: store}, &InstructionsError{Seq: seq, Instructions: job.Instructions}
	}
	res := q.Retry(ctx, []DeadLetterRecord{rec}, false, 0)
	if len(res) == 0 || !res[0].Queued {
		why := "not queued"
		if len(res) > 0 {
			why = res[0].Error
		}
		return RetryResult{Seq: seq, Store: store}, fmt.Errorf("dlq: dead letter %d not retried: %s", seq, why)
	}
	if a.dlq != nil {
		a.dlq.forget([]DeadLetterRecord{rec})
	}
	return res[0], nil
}

// PurgeDeadLetter deletes a dead letter of store.
func (v *FleetView) PurgeDeadLetter(ctx context.Context, store string, seq uint64) error {
	a, q, rec, err := v.deadLetterOf(ctx, store, seq)
	if err != nil {
		return err
	}
	if _, err := q.Delete(ctx, []DeadLetterRecord{rec}); err != nil {
		return err
	}
	if a.dlq != nil {
		a.dlq.forget([]DeadLetterRecord{rec})
	}
	return nil
}

// SetPaused pauses or resumes a store in its account, and shows it at once.
func (v *FleetView) SetPaused(ctx context.Context, store string, paused bool, reason, by string) (fleetops.PauseRecord, error) {
	a, err := v.accountOf(store)
	if err != nil {
		return fleetops.PauseRecord{}, err
	}
	rec, err := fleetops.SetPaused(ctx, a.nc, store, paused, reason, by)
	if err == nil {
		a.mu.Lock()
		a.pauses[store] = rec
		a.mu.Unlock()
	}
	return rec, err
}

// QueuedJobs are up to limit of a store's queued jobs (waiting or running), oldest first,
// read one by one by direct gets of the next message on the store's subjects (a work
// queue takes no consumer that would overlap the store's own).
func (v *FleetView) QueuedJobs(ctx context.Context, store string, limit int) ([]QueuedJob, error) {
	a, err := v.accountOf(store)
	if err != nil {
		return nil, err
	}
	var out []QueuedJob
	filter := wire.JobsPrefix + store + ".>"
	for seq := uint64(1); len(out) < limit; {
		m, err := a.jobs.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("queued jobs of %s: %w", store, err)
		}
		qj := QueuedJob{Seq: m.Sequence, At: m.Time.UTC(), Subject: m.Subject}
		var j wire.Job
		parts := strings.Split(m.Subject, ".")
		switch {
		case json.Unmarshal(m.Data, &j) != nil:
			qj.Foreign = "not a job"
		case len(parts) != 5 || j.Store != store || wire.SessionToken(j.SessionID) != parts[3] || j.Kind != parts[4]:
			// A worker admits a job only of its subject's store, session and kind (pipeline/foreign.go).
			qj.Foreign = fmt.Sprintf("its job names store %q, session %q, kind %q: not its subject's; a worker refuses it", j.Store, j.SessionID, j.Kind)
		default:
			qj.SessionID, qj.Path, qj.Kind, qj.Reason = j.SessionID, j.Path, j.Kind, j.Reason
		}
		out = append(out, qj)
		seq = m.Sequence + 1
	}
	return out, nil
}

// QueuedJob is a job in a store's queue.
type QueuedJob struct {
	Seq       uint64    `json:"seq"`
	Subject   string    `json:"subject"`
	SessionID string    `json:"sessionId,omitempty"`
	Path      string    `json:"path,omitempty"`
	Kind      string    `json:"kind,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	At        time.Time `json:"at"`
	// Foreign says why the job's fields are not shown: it is not a job, or it names
	// another store, session or kind than its subject.
	Foreign string `json:"foreign,omitempty"`
}

// QueueHistory is a store's queue sampled once a minute (the last of each minute), over
// the last queueHistoryMinutes.
func (v *FleetView) QueueHistory(store string) []QueueSample {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if h := v.history[store]; h != nil {
		return slices.Clone(h.samples)
	}
	return nil
}

// QueueSample is a store's queue at a minute.
type QueueSample struct {
	At      time.Time `json:"at"`
	Pending uint64    `json:"pending"`
	AgeS    float64   `json:"oldestAgeS"`
}

const queueHistoryMinutes = 6 * 60

type queueHistory struct{ samples []QueueSample }

func (h *queueHistory) add(now time.Time, q StoreQueue) {
	s := QueueSample{At: now.Truncate(time.Minute), Pending: q.Pending + q.InFlight}
	if !q.Oldest.IsZero() {
		s.AgeS = now.Sub(q.Oldest).Seconds()
	}
	if n := len(h.samples); n > 0 && h.samples[n-1].At.Equal(s.At) {
		h.samples[n-1] = s
		return
	}
	h.samples = append(h.samples, s)
	if len(h.samples) > queueHistoryMinutes {
		h.samples = slices.Delete(h.samples, 0, len(h.samples)-queueHistoryMinutes)
	}
}
