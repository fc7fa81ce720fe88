package pipeline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
)

// Event is published on compactor.events.<store>.<session>.<job seq> for every delivery that ends
// (done, skipped, failed) or is retried. Metadata only: never summary text, never secrets.
type Event struct {
	V            int     `json:"v"`
	JobID        string  `json:"jobId"`
	JobSeq       uint64  `json:"jobSeq"` // stream sequence of the job message: unique per enqueue
	Store        string  `json:"store"`
	SessionID    string  `json:"sessionId"`
	Path         string  `json:"path"`
	Kind         string  `json:"kind"`
	Outcome      Outcome `json:"outcome"`
	Reason       string  `json:"reason,omitempty"`
	EntryID      string  `json:"entryId,omitempty"`
	TokensBefore int     `json:"tokensBefore,omitempty"`
	TokensAfter  int     `json:"tokensAfter,omitempty"`
	LLMTokens    int     `json:"llmTokens,omitempty"`
	// LLMInputTokens, LLMCachedInputTokens and LLMOutputTokens split LLMTokens: the
	// input the endpoint billed, the part of it served from its prompt cache (where it
	// reports it), and the output.
	LLMInputTokens       int    `json:"llmInputTokens,omitempty"`
	LLMCachedInputTokens int    `json:"llmCachedInputTokens,omitempty"`
	LLMOutputTokens      int    `json:"llmOutputTokens,omitempty"`
	LLMModel             string `json:"llmModel,omitempty"` // the model that billed the LLM tokens
	DurationMs           int64  `json:"durationMs"`
	Attempt              int    `json:"attempt"`
	RetryInMs            int64  `json:"retryInMs,omitempty"`
	Error                string `json:"error,omitempty"`
	// Busy: skipped because the session was busy (a turn or a write in progress, active);
	// a later sweep tries it again after its backoff (Config.SweepRetryBase).
	Busy bool `json:"busy,omitempty"`
	// PiUnknown: the job was worked (or, with --pi-unknown refuse, skipped) for a Pi release
	// compactor does not know; the value is that release (docs/compatibility.md).
	PiUnknown string    `json:"piUnknown,omitempty"`
	Worker    string    `json:"worker,omitempty"`
	At        time.Time `json:"at"`
}

// Final reports whether the event ends its job (everything but retry).
func (e *Event) Final() bool { return e.Outcome != OutcomeRetry }

// DeadLetter is the record published on compactor.dlq.<store>.<session> when a job is
// refused, fails permanently or exhausts its deliveries.
type DeadLetter struct {
	V          int             `json:"v"`
	Subject    string          `json:"subject"` // the job's subject
	JobSeq     uint64          `json:"jobSeq"`
	Job        json.RawMessage `json:"job,omitempty"`     // the payload, when it is JSON
	JobText    string          `json:"jobText,omitempty"` // the payload, when it is not JSON
	Reason     string          `json:"reason"`
	Error      string          `json:"error,omitempty"`
	Deliveries uint64          `json:"deliveries"`
	Worker     string          `json:"worker,omitempty"`
	At         time.Time       `json:"at"`
}

func newDeadLetter(subject string, seq uint64, payload []byte, reason string, err error, deliveries uint64, worker string) DeadLetter {
	dl := DeadLetter{V: 1, Subject: subject, JobSeq: seq, Reason: reason, Deliveries: deliveries, Worker: worker, At: time.Now().UTC()}
	if json.Valid(payload) {
		dl.Job = json.RawMessage(payload)
	} else if utf8.Valid(payload) {
		dl.JobText = string(payload)
	} else {
		dl.JobText = fmt.Sprintf("%q", payload)
	}
	if err != nil {
		dl.Error = err.Error()
	}
	return dl
}

// dlqSubjectFor derives the dead-letter subject from a job subject, whatever its payload:
// compactor.jobs.<store>.<token>.<kind> → compactor.dlq.<store>.<token>.
func dlqSubjectFor(jobSubject string) string { return dlqPrefix + sessionPart(jobSubject) }

// JobEventSubject is compactor.events.<store>.<session token>.<job seq>: a job's events.
func JobEventSubject(store, sessionID string, jobSeq uint64) string {
	return EventSubject(store, sessionID) + "." + strconv.FormatUint(jobSeq, 10)
}

// eventSubjectFor is the event subject of the job message seq on jobSubject (the same as
// JobEventSubject of the job's store and session, but available even when the payload
// cannot be parsed).
func eventSubjectFor(jobSubject string, seq uint64) string {
	return eventsPrefix + sessionPart(jobSubject) + "." + strconv.FormatUint(seq, 10)
}

// sessionPart is "<store>.<token>" of compactor.jobs.<store>.<token>.<kind>.
func sessionPart(jobSubject string) string {
	rest := strings.TrimPrefix(jobSubject, jobsPrefix)
	if i := strings.LastIndexByte(rest, '.'); i >= 0 {
		return rest[:i]
	}
	return rest
}

func publishDeadLetter(ctx context.Context, js jetstream.JetStream, dl DeadLetter) error {
	b, err := json.Marshal(dl)
	if err != nil {
		return fmt.Errorf("dead letter: %w", err)
	}
	// One record per job message, even if two workers (or the advisory path) race.
	if err := publishRetry(ctx, js, dlqSubjectFor(dl.Subject), b, "dlq:"+strconv.FormatUint(dl.JobSeq, 10)); err != nil {
		return fmt.Errorf("dead letter for job %d: %w", dl.JobSeq, err)
	}
	return nil
}

func publishEvent(ctx context.Context, js jetstream.JetStream, jobSubject string, ev Event) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("event: %w", err)
	}
	// A fresh id per event: a retry of a publish that was stored after all is dropped.
	var id [12]byte
	_, _ = rand.Read(id[:])
	if err := publishRetry(ctx, js, eventSubjectFor(jobSubject, ev.JobSeq), b, "ev:"+hex.EncodeToString(id[:])); err != nil {
		return fmt.Errorf("event for job %d: %w", ev.JobSeq, err)
	}
	return nil
}

// publishRetryFor bounds publishRetry: a final event or a dead letter survives a leader
// election or a short outage, and a long outage does not hold a job slot forever.
const publishRetryFor = time.Minute

// publishRetry publishes with a message id (so that a retried publish is stored once),
// retrying transient failures with backoff for up to publishRetryFor or until ctx ends.
func publishRetry(ctx context.Context, js jetstream.JetStream, subject string, data []byte, msgID string) error {
	deadline := time.Now().Add(publishRetryFor)
	wait := 100 * time.Millisecond
	for {
		_, err := js.Publish(ctx, subject, data, jetstream.WithMsgID(msgID))
		if err == nil || !transient(err) || ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}
