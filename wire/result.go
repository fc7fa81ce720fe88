package wire

import (
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/compactor-dev/compactor/outcome"
)

// Tally is how a job ended and what it counted: the fields a Result, an Event and a
// ReportRow share, embedded in each at the same place, so that their JSON keeps one order.
// Only metadata: never the summary text.
type Tally struct {
	Outcome      outcome.Outcome `json:"outcome"`
	Reason       string          `json:"reason,omitempty"`
	EntryID      string          `json:"entryId,omitempty"`
	TokensBefore int             `json:"tokensBefore,omitempty"`
	TokensAfter  int             `json:"tokensAfter,omitempty"`
	LLMTokens    int             `json:"llmTokens,omitempty"`
	// LLMInputTokens, LLMCachedInputTokens and LLMOutputTokens split LLMTokens: the
	// input the endpoint billed, the part of it served from its prompt cache (where it
	// reports it), and the output.
	LLMInputTokens       int `json:"llmInputTokens,omitempty"`
	LLMCachedInputTokens int `json:"llmCachedInputTokens,omitempty"`
	LLMOutputTokens      int `json:"llmOutputTokens,omitempty"`
}

// Result is what a job's handler reports for a job.
type Result struct {
	Tally
	// LLMModel is the model the tokens were billed by (the model label of the token
	// metrics); empty: the model the handler's summarizer named through NoteLLMModel.
	LLMModel string `json:"llmModel,omitempty"`
	// LeafID is the session's leaf after the job (the new entry for done); the worker's
	// re-check uses it to tell whether something was appended meanwhile.
	LeafID string `json:"leafId,omitempty"`
	// Busy marks a skip for a state that passes by itself (a turn or a write in progress).
	Busy bool `json:"busy,omitempty"`
	// PiUnknown is the Pi release the job was worked (or skipped) for when compactor does not
	// know it (pi.Release.Known): it goes into the event and the metric
	// compactor_pi_version_unknown_total. Set it with or without an error.
	PiUnknown string `json:"piUnknown,omitempty"`
}

// JobRef names a job's session and kind in an Event and a ReportRow.
type JobRef struct {
	Store     string `json:"store"`
	SessionID string `json:"sessionId"`
	Path      string `json:"path"`
	Kind      string `json:"kind"`
}

// EventVersion is the version of the Event JSON.
const EventVersion = 1

// Event is published on compactor.events.<store>.<session>.<job seq> for every delivery that ends
// (done, skipped, failed) or is retried. Metadata only: never summary text, never secrets.
type Event struct {
	V      int    `json:"v"`
	JobID  string `json:"jobId"`
	JobSeq uint64 `json:"jobSeq"` // stream sequence of the job message: unique per enqueue
	JobRef
	Tally
	LLMModel   string `json:"llmModel,omitempty"` // the model that billed the LLM tokens
	DurationMs int64  `json:"durationMs"`
	Attempt    int    `json:"attempt"`
	RetryInMs  int64  `json:"retryInMs,omitempty"`
	Error      string `json:"error,omitempty"`
	// Busy: skipped because the session was busy (a turn or a write in progress, active);
	// a later sweep tries it again after its backoff.
	Busy bool `json:"busy,omitempty"`
	// PiUnknown: the job was worked (or, with --pi-unknown refuse, skipped) for a Pi release
	// compactor does not know; the value is that release (docs/compatibility.md).
	PiUnknown string    `json:"piUnknown,omitempty"`
	Worker    string    `json:"worker,omitempty"`
	At        time.Time `json:"at"`
}

// Final reports whether the event ends its job (everything but retry).
func (e *Event) Final() bool { return e.Outcome != outcome.Retry }

// ReportRow is one finished job in a run-once report.
type ReportRow struct {
	JobRef
	Tally
	Attempts int           `json:"attempts"`
	Duration time.Duration `json:"durationNs"`
}

// DeadLetterVersion is the version of the DeadLetter JSON.
const DeadLetterVersion = 1

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

// NewDeadLetter is the dead letter of the job message seq on subject, keeping its payload
// as JSON when it is, as text otherwise.
func NewDeadLetter(subject string, seq uint64, payload []byte, reason string, err error, deliveries uint64, worker string) DeadLetter {
	dl := DeadLetter{V: DeadLetterVersion, Subject: subject, JobSeq: seq, Reason: reason, Deliveries: deliveries, Worker: worker, At: time.Now().UTC()}
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
