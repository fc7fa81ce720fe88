package sweep

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Record is what COMPACTOR_SWEEP remembers of a file, so the next sweep skips it
// without reading it when its size and mtime are unchanged, the settings that decide the
// budget are the same, and no retry is due.
type Record struct {
	V             int       `json:"v"` // RecordV
	Path          string    `json:"path"`
	Size          int64     `json:"size"`
	MtimeNs       int64     `json:"mtimeNs"`
	SessionID     string    `json:"sessionId,omitempty"`
	LeafID        string    `json:"leafId,omitempty"`
	Tokens        int       `json:"tokens,omitempty"`
	ContextWindow int       `json:"contextWindow,omitempty"`
	OverBudget    bool      `json:"overBudget,omitempty"`
	Error         string    `json:"error,omitempty"`
	At            time.Time `json:"at"`
	// Settings is the Assessor's fingerprint of the settings behind Tokens and OverBudget
	// (window override, reserve, counter, policy, keep-recent): when it differs from the
	// current one, the file is assessed again.
	Settings string `json:"settings,omitempty"`
	// Enqueued: this sweep enqueued a job (or found one pending) for this state.
	Enqueued bool `json:"enqueued,omitempty"`
	// Misses counts this session's jobs in a row that ended failed or busy (noted by the
	// workers, see noteOutcome); RetryAt is when a sweep enqueues it again though its file
	// is unchanged. A sweep that enqueues sets RetryAt ahead, so a lost outcome is retried
	// too; a job that ends done, or skipped for a lasting reason, clears it.
	Misses      int       `json:"misses,omitempty"`
	RetryAt     time.Time `json:"retryAt,omitzero"`
	LastOutcome string    `json:"lastOutcome,omitempty"`
}

// Key is a file's record's key in COMPACTOR_SWEEP: <store>.<hash of its path>.
func Key(store, rel string) string {
	sum := sha256.Sum256([]byte(rel))
	return store + "." + hex.EncodeToString(sum[:20])
}

// SettingsFingerprinter is implemented by an Assessor whose budget depends on settings
// (the engine's: context window override, reserve, counter, policy, keep-recent). Records
// made under other settings are assessed again.
type SettingsFingerprinter interface{ SettingsFingerprint() string }
