package pipeline

import (
	"context"
	"errors"
	"sort"
	"time"
)

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

// RunOnce sweeps the stores (when an Assessor is configured), then works until no job of
// its stores is left in COMPACTOR_JOBS and nothing is in flight (delayed retries included),
// and returns a report of the jobs this worker finished.
func (s *Service) RunOnce(ctx context.Context) (*Report, error) {
	if s.cfg.Handler == nil {
		return nil, errors.New("config: Handler: required to run workers")
	}
	start := time.Now()
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.recording, s.rows = true, nil
	s.mu.Unlock()
	rep := &Report{Counts: map[Outcome]int{}}
	if s.cfg.Assessor != nil {
		st, err := s.Sweep(ctx, s.cfg.Progress)
		if err != nil {
			return nil, err
		}
		rep.Sweep = &st
	}
	wctx, stopFetch := context.WithCancel(ctx)
	defer stopFetch()
	stop, err := s.startWorkers(wctx)
	if err != nil {
		return nil, err
	}
	idle := 0
	tick := time.NewTicker(100 * time.Millisecond)
	var werr error
	for idle < 3 {
		select {
		case <-ctx.Done():
			werr = ctx.Err()
			idle = 3
			continue
		case <-tick.C:
		}
		n, err := pendingJobs(ctx, s.res.jobs, s.cfg.Stores)
		if err != nil {
			s.log.Warn("cannot count pending jobs", "err", err)
			continue
		}
		if n == 0 && s.inflight.Load() == 0 {
			idle++
		} else {
			idle = 0
		}
	}
	tick.Stop()
	stopFetch()
	stop()
	s.mu.Lock()
	rep.Rows, s.recording = s.rows, false
	s.rows = nil
	s.mu.Unlock()
	sort.SliceStable(rep.Rows, func(i, j int) bool {
		if rep.Rows[i].Store != rep.Rows[j].Store {
			return rep.Rows[i].Store < rep.Rows[j].Store
		}
		return rep.Rows[i].Path < rep.Rows[j].Path
	})
	for _, row := range rep.Rows {
		rep.Counts[row.Outcome]++
	}
	rep.Duration = time.Since(start)
	return rep, werr
}
