package pipeline

import "time"

// ReportRow is one finished job in a RunOnce report.
type ReportRow struct {
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
	LLMInputTokens       int           `json:"llmInputTokens,omitempty"`
	LLMCachedInputTokens int           `json:"llmCachedInputTokens,omitempty"`
	LLMOutputTokens      int           `json:"llmOutputTokens,omitempty"`
	Attempts             int           `json:"attempts"`
	Duration             time.Duration `json:"durationNs"`
}

// Report is what RunOnce did.
type Report struct {
	Sweep    *SweepStats     `json:"sweep,omitempty"`
	Rows     []ReportRow     `json:"rows"`
	Counts   map[Outcome]int `json:"counts"`
	Duration time.Duration   `json:"durationNs"`
}

// Failed is the number of jobs that ended failed.
func (r *Report) Failed() int { return r.Counts[OutcomeFailed] }
