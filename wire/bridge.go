package wire

import "encoding/json"

// Bridges: Pi's extension asks, from inside Pi's session_before_compact hook, for the
// session's prepared summary extended to the cut Pi makes now. It is a core NATS request
// with a reply on BridgeSubject, not a job: the hook waits for it within its deadline and
// nothing is queued or retried.

// BridgeVersion is the version of BridgeRequest and BridgeReply.
const BridgeVersion = 1

// BridgeRequest is the extension's request (JSON).
type BridgeRequest struct {
	V         int    `json:"v"`
	Store     string `json:"store"`
	Path      string `json:"path"`
	SessionID string `json:"sessionId"`
	// LeafID is Pi's leaf when the hook ran, FirstKeptEntryID Pi's own cut.
	LeafID           string `json:"leafId"`
	FirstKeptEntryID string `json:"firstKeptEntryId"`
	// PiVersion is the Pi release the asking agent runs; empty: the store's setting.
	PiVersion string `json:"piVersion,omitempty"`
	// Extract asks for the answer made without a model (engine.Extract): the previous
	// summary plus extractive notes of the span Pi summarizes now, at Pi's cut, whatever the
	// bucket holds. The hook asks for it when no preparation is valid for the branch.
	Extract bool `json:"extract,omitempty"`
	// KeepRecentTokens, ReserveTokens and ContextWindow are Pi's settings at the hook
	// (preparation.settings, the model's window); 0: the worker's. An extract plans with them.
	KeepRecentTokens int `json:"keepRecentTokens,omitempty"`
	ReserveTokens    int `json:"reserveTokens,omitempty"`
	ContextWindow    int `json:"contextWindow,omitempty"`
}

// BridgeReply is the answer (JSON): the bridged value, or why there is none. Stale means
// the preparation does not fit the session's state (not an error of compactor's).
type BridgeReply struct {
	V        int             `json:"v"`
	Prepared json.RawMessage `json:"prepared,omitempty"`
	Error    string          `json:"error,omitempty"`
	Stale    bool            `json:"stale,omitempty"`
}
