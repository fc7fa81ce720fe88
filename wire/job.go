package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/pi"
)

// JobVersion is the version of the job payload this package writes, and the one its workers
// understand unless Config.JobVersions says otherwise. A worker hands a job of a version it
// does not understand back to the queue for another worker; it never dead-letters it.
const JobVersion = 1

// BaseJobVersion is the version base jobs (KindBase) are written in: a kind workers before
// it do not know, which such a worker hands back for one that does instead of
// refusing it as an invalid job. A version-1 payload of kind base is accepted too.
const BaseJobVersion = 2

// SpanJobVersion is the version a base job of a slot, or a merge, is written in (Job.Slot,
// Job.Merge). A worker before slots would refuse a slot's job (its subject is not the one
// such a worker computes) and dead-letter it; by its version it hands it back instead, for a
// worker that knows slots.
const SpanJobVersion = 3

// writtenVersions are the versions this package writes.
var writtenVersions = []int{JobVersion, BaseJobVersion, SpanJobVersion}

// WrittenVersions are the job versions this package writes, the ones a worker works unless
// told otherwise.
func WrittenVersions() []int { return slices.Clone(writtenVersions) }

// Job kinds.
const (
	KindCompact       = "compact"
	KindBranchSummary = "branch_summary"
	// KindPrepare plans and summarizes a session at its current leaf and stores the result
	// in COMPACTOR_PREPARED, writing nothing to the session (zero-wait compaction: Pi's
	// extension hands it to Pi, which writes the entry itself).
	KindPrepare = "prepare"
	// KindBase has a model summarize what an extract answered Pi's hook with (the session's
	// base: package engine's base.go), stored beside the session's preparation. A worker
	// that answered the extract asks for it; it writes nothing to the session.
	KindBase = "base"
)

// Job is the JSON payload of a message on COMPACTOR_JOBS. It names a session by store and a
// path relative to the store's root: a job never carries an absolute path, so a worker can
// only touch files inside the roots it mounts.
type Job struct {
	V           int       `json:"v"`
	Kind        string    `json:"kind"`
	Store       string    `json:"store"`
	Path        string    `json:"path"`
	SessionID   string    `json:"sessionId"`
	Reason      string    `json:"reason,omitempty"`
	RequestedAt time.Time `json:"requestedAt"`
	// ExpectLeafID is the leaf the requester saw. A handler that finds the entry this job
	// asks for already made from that leaf (a redelivery after the append, before the ack)
	// reports it as done instead of doing it again.
	ExpectLeafID string `json:"expectLeafId,omitempty"`
	// TargetID and FromID are for branch summaries.
	TargetID string `json:"targetId,omitempty"`
	FromID   string `json:"fromId,omitempty"`
	// Force overrides the worker's idle check (a session modified within Idle). It never
	// overrides the handler's live-agent checks (a turn in progress).
	Force bool `json:"force,omitempty"`
	// OnlyOverBudget: compact only if the session is over its model's budget. Sweeps and
	// re-checks set it; an on-demand request, like `compactor compact` or Pi's /compact,
	// compacts whatever the budget says.
	OnlyOverBudget bool `json:"onlyOverBudget,omitempty"`
	// Per-job overrides; zero values mean the worker's configuration.
	Policy           string `json:"policy,omitempty"`
	Counter          string `json:"counter,omitempty"`
	KeepRecentTokens int    `json:"keepRecentTokens,omitempty"`
	Instructions     string `json:"instructions,omitempty"`
	// PiVersion is the Pi release the requesting agent runs ("1.6.0"); empty: the store's
	// setting. The session is read, planned and written by that Pi's rules.
	PiVersion string `json:"piVersion,omitempty"`
	// Cut and SummarySHA256 name, with ExpectLeafID (its parent), the compaction a base job
	// is for: its firstKeptEntryId and the SHA-256 (hex) of the summary Pi was handed.
	Cut           string `json:"cut,omitempty"`
	SummarySHA256 string `json:"summarySha256,omitempty"`
	// Slot (a base job, 1 to BaseSpanSlots) runs the job beside the session's other base
	// jobs: its compaction's span is summarized alone when the spans before it are still
	// being summarized. 0: the session's one base job that builds on everything before it.
	Slot int `json:"slot,omitempty"`
	// Merge, when set (a base job of slot 0), asks to fold the session's base text and the
	// spans' own summaries that continue it into one summary (a request reading model text
	// only); its value names the stored state that asked (a digest), so that a merge asked
	// again after the base changed is a new job, not a duplicate of the one that ran.
	Merge string `json:"merge,omitempty"`
	// ID is the message id used for JetStream de-duplication (Nats-Msg-Id), see MsgID.
	ID string `json:"id"`
}

// Validate checks what a worker relies on before it touches anything, for a job of a
// version this package writes (JobVersion, BaseJobVersion).
func (j *Job) Validate() error { return j.ValidateFor(writtenVersions) }

// ValidateFor is Validate for a worker that understands the job versions in versions.
func (j *Job) ValidateFor(versions []int) error {
	if !slices.Contains(versions, j.V) {
		return fmt.Errorf("job: unsupported version v=%d (want %s)", j.V, VersionList(versions))
	}
	if j.Kind != KindCompact && j.Kind != KindBranchSummary && j.Kind != KindPrepare && j.Kind != KindBase {
		return fmt.Errorf("job: kind %q is not %q, %q, %q or %q", j.Kind, KindCompact, KindBranchSummary, KindPrepare, KindBase)
	}
	if err := ValidateStoreName(j.Store); err != nil {
		return fmt.Errorf("job: %w", err)
	}
	if j.Path == "" {
		return errors.New("job: path is empty")
	}
	if j.SessionID == "" {
		return errors.New("job: sessionId is empty")
	}
	if j.Kind == KindBranchSummary && j.TargetID == "" {
		return errors.New("job: branch_summary needs targetId")
	}
	if j.Kind == KindBase && (j.ExpectLeafID == "" || j.Cut == "" || j.SummarySHA256 == "") {
		return errors.New("job: base needs expectLeafId, cut and summarySha256")
	}
	if j.Slot != 0 && (j.Kind != KindBase || j.Slot < 0 || j.Slot > BaseSpanSlots) {
		return fmt.Errorf("job: slot %d: only a base job has one, from 1 to %d", j.Slot, BaseSpanSlots)
	}
	if (j.Slot != 0 || j.Merge != "") != (j.V == SpanJobVersion) {
		return fmt.Errorf("job: version %d is for a base job of a slot or a merge, and they are written in it (v=%d, slot %d, merge %q)", SpanJobVersion, j.V, j.Slot, j.Merge)
	}
	if j.Merge != "" && (j.Kind != KindBase || j.Slot != 0 || len(j.Merge) > 64) {
		return errors.New("job: merge is for a base job of slot 0, and names a state in at most 64 characters")
	}
	if j.KeepRecentTokens < 0 {
		return fmt.Errorf("job: keepRecentTokens %d is negative", j.KeepRecentTokens)
	}
	if j.PiVersion != "" {
		// Any well-formed release is accepted (an unknown one is served as --pi-unknown
		// says); a malformed or overlong one never reaches a worker's logs or metrics.
		if _, err := pi.ParseRelease(j.PiVersion); err != nil {
			return fmt.Errorf("job: piVersion: %w", err)
		}
	}
	return nil
}

// Subject is the subject the job is published on.
// A base job of a slot is on its own subject (compactor.jobs.<store>.<token>.base<slot>):
// the queue keeps one job per subject, so a session has at most 1 + BaseSpanSlots base jobs
// pending or running.
func (j *Job) Subject() string {
	if j.Slot > 0 {
		return JobSubject(j.Store, j.SessionID, j.Kind+strconv.Itoa(j.Slot))
	}
	return JobSubject(j.Store, j.SessionID, j.Kind)
}

// BaseSpanSlots is how many base jobs of a session may summarize spans alone at once
// (Job.Slot): enough for compactions six times as frequent as a summary's latency.
const BaseSpanSlots = 6

// MsgID is the de-duplication id (Nats-Msg-Id). It covers everything that changes what
// the job does: kind, store, path, session, leaf, target and source, force, the budget
// condition and every override. The same request for the same state within the duplicate
// window is stored once; a request that differs in anything (another path, --force, other
// instructions, another Pi release, another compaction for a base job) is a new job, never
// answered by an older result. A job without piVersion, cut or summarySha256 keeps the id it
// had before they counted.
func (j *Job) MsgID() string {
	fields := []any{j.Kind, j.Store, j.Path, j.SessionID, j.ExpectLeafID, j.TargetID, j.FromID,
		j.Force, j.OnlyOverBudget, j.Policy, j.Counter, j.KeepRecentTokens, j.Instructions}
	if j.PiVersion != "" {
		fields = append(fields, j.PiVersion)
	}
	if j.Cut != "" || j.SummarySHA256 != "" {
		fields = append(fields, j.Cut, j.SummarySHA256) // only then: the ids of other jobs stay as they were
	}
	if j.Merge != "" {
		fields = append(fields, "merge", j.Merge) // not the slot: the same span asked for in two slots is one job
	}
	ident, _ := json.Marshal(fields)
	sum := sha256.Sum256(ident)
	return j.Kind + ":" + SessionToken(j.SessionID) + ":" + hex.EncodeToString(sum[:12])
}

// Normalize fills V, RequestedAt and ID when they are empty.
func (j *Job) Normalize(now time.Time) {
	if j.V == 0 {
		j.V = JobVersion
		if j.Kind == KindBase {
			j.V = BaseJobVersion
		}
		if j.Slot != 0 || j.Merge != "" {
			j.V = SpanJobVersion
		}
	}
	if j.RequestedAt.IsZero() {
		j.RequestedAt = now.UTC()
	}
	if j.ID == "" {
		j.ID = j.MsgID()
	}
}

// DecodeJob parses and validates a job payload of a version this package writes.
func DecodeJob(data []byte) (Job, error) { return DecodeJobFor(data, writtenVersions) }

// DecodeJobFor parses and validates a job payload of one of versions.
func DecodeJobFor(data []byte, versions []int) (Job, error) {
	var j Job
	if err := json.Unmarshal(data, &j); err != nil {
		return Job{}, fmt.Errorf("job: malformed payload: %w", err)
	}
	if err := j.ValidateFor(versions); err != nil {
		return j, err
	}
	return j, nil
}

// VersionList is "1" or "1, 2".
func VersionList(vs []int) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ", ")
}
