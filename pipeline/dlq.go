package pipeline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DeadLetterFilter selects dead letters; zero fields match everything.
type DeadLetterFilter struct {
	Store     string
	SessionID string
	// Reason matches, case-insensitively, a substring of the reason or of the error.
	Reason string
	// OlderThan and NewerThan bound the age of the dead letter (since it was written).
	OlderThan, NewerThan time.Duration
	// Seqs, when given, are the only COMPACTOR_DLQ sequences considered.
	Seqs []uint64
}

// Empty reports whether the filter selects every dead letter.
func (f DeadLetterFilter) Empty() bool {
	return f.Store == "" && f.SessionID == "" && f.Reason == "" && f.OlderThan == 0 && f.NewerThan == 0 && len(f.Seqs) == 0
}

// DeadLetterRecord is a stored dead letter with its place in COMPACTOR_DLQ and what the
// job was about (read from its payload when it is a job, from its subject otherwise).
type DeadLetterRecord struct {
	Seq       uint64 `json:"seq"` // in COMPACTOR_DLQ: what show, retry and purge take
	Store     string `json:"store"`
	SessionID string `json:"sessionId,omitempty"`
	Path      string `json:"path,omitempty"`
	Kind      string `json:"kind,omitempty"`
	// Foreign says why the record cannot be replayed: its job (or the job subject it
	// names) is of another store or session than its own subject (foreign.go). Empty for
	// every record a worker of the store wrote.
	Foreign string `json:"foreign,omitempty"`
	wire.DeadLetter
}

// DLQ reads COMPACTOR_DLQ and acts on it: list, retry, delete.
type DLQ struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
}

// OpenDLQ opens the dead letters on the NATS of nc. Dead letters are the operator's:
// acting on them takes requests by stream sequence (read, delete), which a permission
// cannot limit to a store (docs/security.md). A refusal is a *PermissionError at once.
func OpenDLQ(ctx context.Context, nc *nats.Conn) (*DLQ, error) {
	return guard(ctx, nc, func(ctx context.Context) (*DLQ, error) { return openDLQ(ctx, nc) })
}

func openDLQ(ctx context.Context, nc *nats.Conn) (*DLQ, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("dlq: %w", err)
	}
	str, err := js.Stream(ctx, wire.StreamDLQ)
	if err != nil {
		if unavailable(err) {
			err = diagnose(ctx, js, wire.StreamDLQ, err)
		}
		return nil, fmt.Errorf("dlq: %w", err)
	}
	return &DLQ{nc: nc, js: js, stream: str}, nil
}

// List returns the dead letters f selects, oldest first.
func (q *DLQ) List(ctx context.Context, f DeadLetterFilter) ([]DeadLetterRecord, error) {
	return guard(ctx, q.nc, func(ctx context.Context) ([]DeadLetterRecord, error) { return q.list(ctx, f) })
}

func (q *DLQ) list(ctx context.Context, f DeadLetterFilter) ([]DeadLetterRecord, error) {
	now := time.Now()
	var out []DeadLetterRecord
	keep := func(r DeadLetterRecord) {
		if f.match(r, now) {
			out = append(out, r)
		}
	}
	if len(f.Seqs) > 0 {
		for _, seq := range f.Seqs {
			m, err := q.stream.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return nil, fmt.Errorf("dlq: no dead letter %d (see compactor dlq list)", seq)
			}
			if err != nil {
				return nil, fmt.Errorf("dlq: dead letter %d: %w", seq, err)
			}
			keep(parseDeadLetter(m.Sequence, m.Subject, m.Data, m.Time))
		}
		return out, nil
	}
	subject := f.subject()
	total, err := countSubjects(ctx, q.stream, subject)
	if err != nil {
		return nil, fmt.Errorf("dlq: %w", err)
	}
	if total == 0 {
		return nil, nil
	}
	oc, err := q.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, fmt.Errorf("dlq: read: %w", err)
	}
	// Read until the message that says nothing is left after it; a Fetch that brings
	// nothing means the rest was deleted meanwhile.
	for read := uint64(0); read < total; {
		batch, err := oc.Fetch(int(min(total-read, 256)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("dlq: read: %w", err)
		}
		got, last := 0, false
		for m := range batch.Messages() {
			got++
			meta, err := m.Metadata()
			if err != nil {
				continue
			}
			keep(parseDeadLetter(meta.Sequence.Stream, m.Subject(), m.Data(), meta.Timestamp))
			last = meta.NumPending == 0
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, fmt.Errorf("dlq: read: %w", err)
		}
		read += uint64(got)
		if got == 0 || last {
			break
		}
	}
	return out, nil
}

// subject is the narrowest DLQ subject covering the filter.
func (f DeadLetterFilter) subject() string {
	store := "*"
	if f.Store != "" {
		store = f.Store
	}
	if f.SessionID != "" {
		return wire.DLQPrefix + store + "." + wire.SessionToken(f.SessionID)
	}
	if f.Store != "" {
		return wire.DLQPrefix + f.Store + ".>"
	}
	return wire.DLQPrefix + ">"
}

func (f DeadLetterFilter) match(r DeadLetterRecord, now time.Time) bool {
	if f.Store != "" && r.Store != f.Store {
		return false
	}
	if f.SessionID != "" && r.SessionID != f.SessionID && wire.SessionToken(f.SessionID) != sessionTokenOf(r.Subject) {
		return false
	}
	if f.Reason != "" && !strings.Contains(strings.ToLower(r.Reason+"\n"+r.Error), strings.ToLower(f.Reason)) {
		return false
	}
	age := now.Sub(r.At)
	if f.OlderThan > 0 && age < f.OlderThan {
		return false
	}
	if f.NewerThan > 0 && age > f.NewerThan {
		return false
	}
	return true
}

// parseDeadLetter reads a stored record; one that is not a DeadLetter is shown as such
// (its bytes as the job text) rather than hidden.
func parseDeadLetter(seq uint64, subject string, data []byte, stored time.Time) DeadLetterRecord {
	r := DeadLetterRecord{Seq: seq}
	if err := json.Unmarshal(data, &r.DeadLetter); err != nil {
		r.DeadLetter = wire.DeadLetter{Reason: "unreadable dead letter: " + err.Error(), JobText: string(data)}
	}
	if r.At.IsZero() {
		r.At = stored
	}
	rest := strings.TrimPrefix(subject, wire.DLQPrefix)
	r.Store, _, _ = strings.Cut(rest, ".")
	var job wire.Job
	if len(r.Job) > 0 && json.Unmarshal(r.Job, &job) == nil {
		r.SessionID, r.Path, r.Kind = job.SessionID, job.Path, job.Kind
	}
	token := sessionTokenOf(subject)
	if r.SessionID == "" {
		r.SessionID = token
	}
	r.Foreign = foreignDeadLetter(seq, subject, r.Store, token, r.DeadLetter.Subject, job)
	return r
}

// foreignDeadLetter says why a dead letter on subject (store, token) may not be replayed:
// its job, or the job subject it names, is another store's or another session's. A dead
// letter replays only into the store of its subject: a store's worker writes its own
// store's dead letters and may write anything in them, another store's job included.
func foreignDeadLetter(seq uint64, subject, store, token, jobSubject string, job wire.Job) string {
	names := func(what, other string) string {
		return fmt.Sprintf("dead letter %d on %s is store %s's, but %s store %s: a dead letter replays only into the store of its subject; refused, nothing published",
			seq, subject, store, what, other)
	}
	if jobSubject != "" {
		jsStore, _, _ := strings.Cut(strings.TrimPrefix(jobSubject, wire.JobsPrefix), ".")
		if !strings.HasPrefix(jobSubject, wire.JobsPrefix) || jsStore != store {
			return names("it names the job subject "+jobSubject+" of", jsStore)
		}
		if wire.DLQSubjectFor(jobSubject) != subject {
			return fmt.Sprintf("dead letter %d on %s names the job subject %s, of another session: refused, nothing published", seq, subject, jobSubject)
		}
	}
	if job.Store != "" && job.Store != store {
		return names("its job is for", job.Store)
	}
	if job.SessionID != "" && wire.SessionToken(job.SessionID) != token {
		return fmt.Sprintf("dead letter %d on %s (session %s) holds a job of session %s: refused, nothing published", seq, subject, token, job.SessionID)
	}
	return ""
}

// sessionTokenOf is the session token of a compactor.dlq.<store>.<token> subject (a job
// subject's dead letter subject).
func sessionTokenOf(subject string) string {
	parts := strings.Split(subject, ".")
	if len(parts) >= 4 {
		return parts[3]
	}
	return ""
}

// RetryResult is what Retry did with one dead letter.
type RetryResult struct {
	Seq       uint64 `json:"seq"` // the dead letter
	Store     string `json:"store"`
	SessionID string `json:"sessionId,omitempty"`
	Path      string `json:"path,omitempty"`
	// Queued: the job was published again (JobID and JobSeq name it) and the dead letter
	// removed. Otherwise Error says why not, and the dead letter stays.
	Queued bool   `json:"queued"`
	JobID  string `json:"jobId,omitempty"`
	JobSeq uint64 `json:"jobSeq,omitempty"`
	Error  string `json:"error,omitempty"`
	// Event is the retried job's final event, when waiting.
	Event *wire.Event `json:"event,omitempty"`
}

// Retry publishes the job of each record again: the original request (kind, path, leaf,
// overrides) with a fresh requestedAt and a new id, so that the duplicate window does not
// swallow it; then it deletes the dead letter. With wait, it waits up to timeout for each
// retried job's final event (a job that fails again leaves a new dead letter). A record
// whose payload is not a valid job, or whose session has another job pending, is left as
// it is, with the reason in its result.
func (q *DLQ) Retry(ctx context.Context, recs []DeadLetterRecord, wait bool, timeout time.Duration) []RetryResult {
	if r := RefusalsOf(q.nc); r != nil {
		var cancel context.CancelFunc
		ctx, cancel = r.Watch(ctx)
		defer cancel()
	}
	out := make([]RetryResult, 0, len(recs))
	for _, r := range recs {
		res := RetryResult{Seq: r.Seq, Store: r.Store, SessionID: r.SessionID, Path: r.Path}
		if r.Foreign != "" {
			res.Error = r.Foreign
			out = append(out, res)
			continue
		}
		job, err := wire.DecodeJob(r.Job)
		if err != nil {
			res.Error = fmt.Sprintf("the dead letter holds no job that can be retried (%v); purge it", err)
			out = append(out, res)
			continue
		}
		if job.Store != r.Store {
			res.Error = fmt.Sprintf("dead letter %d is store %s's, but its job is for store %s: a dead letter replays only into the store of its subject; refused, nothing published", r.Seq, r.Store, job.Store)
			out = append(out, res)
			continue
		}
		job.RequestedAt = time.Now().UTC()
		var nonce [4]byte
		_, _ = rand.Read(nonce[:])
		job.ID = job.MsgID() + ":retry-" + hex.EncodeToString(nonce[:])
		job.Reason = strings.TrimSpace("dlq retry " + job.Reason)
		var er EnqueueResult
		if wait {
			er, err = Enqueue(ctx, q.nc, job, true, timeout)
		} else {
			er, err = publishJob(ctx, q.js, &job)
		}
		res.JobID, res.JobSeq, res.Event = er.JobID, er.Seq, er.Event
		switch {
		case er.Seq == 0 || (er.AlreadyQueued && er.Other):
			if err == nil {
				err = fmt.Errorf("not queued: job %s (seq %d) is pending for this session; retry when it ends", er.JobID, er.Seq)
			}
			res.JobID, res.JobSeq = "", 0
			res.Error = err.Error()
		default:
			res.Queued = true
			if err != nil {
				res.Error = err.Error() // queued, but waiting failed
			}
			if derr := q.stream.DeleteMsg(context.WithoutCancel(ctx), r.Seq); derr != nil && !errors.Is(derr, jetstream.ErrMsgNotFound) {
				if pe := refusal(ctx); pe != nil {
					derr = pe
				}
				res.Error = strings.TrimPrefix(res.Error+"; ", "; ") + "queued, but the dead letter was not removed: " + derr.Error()
			}
		}
		out = append(out, res)
	}
	return out
}

// Delete removes the records from COMPACTOR_DLQ and returns how many it removed.
func (q *DLQ) Delete(ctx context.Context, recs []DeadLetterRecord) (int, error) {
	return guard(ctx, q.nc, func(ctx context.Context) (int, error) { return q.delete(ctx, recs) })
}

func (q *DLQ) delete(ctx context.Context, recs []DeadLetterRecord) (int, error) {
	n := 0
	for _, r := range recs {
		err := q.stream.DeleteMsg(ctx, r.Seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("dlq: delete %d: %w", r.Seq, err)
		}
		n++
	}
	return n, nil
}
