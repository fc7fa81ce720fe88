package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// ReportRow is one finished job in a RunOnce report.
type ReportRow struct {
	Store        string        `json:"store"`
	SessionID    string        `json:"sessionId"`
	Path         string        `json:"path"`
	Kind         string        `json:"kind"`
	Outcome      Outcome       `json:"outcome"`
	Reason       string        `json:"reason,omitempty"`
	EntryID      string        `json:"entryId,omitempty"`
	TokensBefore int           `json:"tokensBefore,omitempty"`
	TokensAfter  int           `json:"tokensAfter,omitempty"`
	LLMTokens    int           `json:"llmTokens,omitempty"`
	Attempts     int           `json:"attempts"`
	Duration     time.Duration `json:"durationNs"`
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

// WriteTable prints the rows as an aligned table and a totals line.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STORE\tSESSION\tKIND\tOUTCOME\tTOKENS BEFORE\tTOKENS AFTER\tATTEMPTS\tDURATION\tREASON")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", row.Store, shorten(row.SessionID, 36), row.Kind, row.Outcome,
			row.TokensBefore, row.TokensAfter, row.Attempts, row.Duration.Round(time.Millisecond), shorten(row.Reason, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d jobs: %d done, %d skipped, %d failed in %s\n", len(r.Rows),
		r.Counts[OutcomeDone], r.Counts[OutcomeSkipped], r.Counts[OutcomeFailed], r.Duration.Round(time.Millisecond))
	return err
}

// Table returns WriteTable's output.
func (r *Report) Table() string {
	var b strings.Builder
	_ = r.WriteTable(&b)
	return b.String()
}

func shorten(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

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
