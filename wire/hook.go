package wire

// HookVersion is the version of HookReport.
const HookVersion = 1

// Hook outcomes.
const (
	HookHit   = "hit"   // a prepared summary was valid and handed to Pi
	HookMiss  = "miss"  // none was ready within the deadline
	HookStale = "stale" // one was there but no longer valid for the branch (Reason says why)
	HookError = "error" // the lookup failed (Reason says why)
)

// What answered Pi's hook (HookReport.Result): a preparation (bridged to Pi's cut or not),
// the extract made at hook time without a model (engine.Extract), or nothing (Pi compacted
// by itself).
const (
	HookResultPrepared = "prepared"
	HookResultExtract  = "extract"
	HookResultPi       = "pi"
)

// HookReasons are the reason codes of HookReport.ReasonCode: why the hook did not use a
// preparation, in a word (the label of compactor_prepared_hook_total; anything else is
// counted as "other"). "none": a preparation was used.
var HookReasons = []string{
	"none",
	"not-prepared",     // no preparation was ever asked for in this cycle (or none could help)
	"not-ready",        // one was asked for and had not landed when Pi compacted
	"other-compaction", // the value builds on another compaction than the branch's latest
	"stale-leaf",       // its leaf or cut is not on the branch (the branch was switched)
	"bridge-late",      // the bridge to Pi's cut did not answer within the deadline
	"bridge-refused",   // the bridge answered with an error, or its value did not pass
	"instructions",     // /compact with other custom instructions
	"other-pi",         // made by the rules of another Pi release than the agent's (an upgrade)
	"entries-differ",   // it summarizes other entries than Pi would
	"too-big",          // summary and kept part would not fit under the threshold
	"malformed",        // the value is not one compactor writes
	"nats",             // NATS or the bucket could not be reached in time
	"no-store",         // the session's file lies in none of the stores
	"error",            // anything else that failed
}

// HookReport is what the extension publishes after Pi's hook ran.
type HookReport struct {
	V         int     `json:"v"`
	Store     string  `json:"store"`
	SessionID string  `json:"sessionId"`
	Outcome   string  `json:"outcome"`
	Reason    string  `json:"reason,omitempty"`
	LatencyMs float64 `json:"latencyMs"`
	LeafID    string  `json:"leafId,omitempty"`
	// Bridged: a hit whose value was extended to Pi's cut (a bridge), over BridgedEntries.
	Bridged        bool `json:"bridged,omitempty"`
	BridgedEntries int  `json:"bridgedEntries,omitempty"`
	// Result (HookResult*) and ReasonCode (HookReasons) say in a word what answered the hook
	// and why not a preparation; PiReason is Pi's own (manual, threshold, overflow).
	Result     string `json:"result,omitempty"`
	ReasonCode string `json:"reasonCode,omitempty"`
	PiReason   string `json:"piReason,omitempty"`
	// Counts are the session's hooks so far by "result/reasonCode" (this one included), as
	// the extension counts them.
	Counts map[string]int `json:"counts,omitempty"`
	// SpanTokens split the span the compaction summarizes (Pi's estimate) into what a model
	// read and what was only extracted (the extract, a bridge's gap); Pi's own summary is a
	// model's.
	SpanTokens *SpanTokens `json:"spanTokens,omitempty"`
	// Base is what the summary's older part was built on (HookBases) and BaseRefused, in a
	// word, why the session's base was not used (HookBaseRefusals); empty for Pi's own.
	Base        string `json:"base,omitempty"`
	BaseRefused string `json:"baseRefused,omitempty"`
}

// SpanTokens are a compaction's summarized span in tokens, by what wrote its summary.
type SpanTokens struct {
	Model   int `json:"model"`
	Extract int `json:"extract"`
}

// HookBases are the words of HookReport.Base (the base label of
// compactor_summary_base_total; anything else is counted as "other"): the session's base (a
// model's summary standing in for an extract's text), the previous compaction's own text,
// nothing before; "pi" for Pi's own summary.
var HookBases = []string{"model", "compaction", "none", "pi"}

// HookBaseRefusals are the words of HookReport.BaseRefused ("none": not refused).
var HookBaseRefusals = []string{"none", "other-compaction", "entries-differ", "chain-differs", "malformed", "other-rules"}
