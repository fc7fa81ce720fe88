package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/compactor-dev/compactor/internal/cli/command"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/sweep"
)

// The JSON documents of `run --once --json` and `sweep --json` (docs/json-output.md).
// They are the command line's own types, not the pipeline's, so the schema stays put when
// the pipeline's internals change; durations are in seconds.

type sweepJSON struct {
	Stores          int     `json:"stores"`
	Files           int     `json:"files"`
	Unchanged       int     `json:"unchanged"`
	Active          int     `json:"active"`
	Assessed        int     `json:"assessed"`
	Retried         int     `json:"retried"`
	Resettled       int     `json:"resettled"`
	OverBudget      int     `json:"overBudget"`
	UnderBudget     int     `json:"underBudget"`
	Ineligible      int     `json:"ineligible"`
	Enqueued        int     `json:"enqueued"`
	AlreadyQueued   int     `json:"alreadyQueued"`
	Errors          int     `json:"errors"`
	NewerRecords    int     `json:"newerRecords"`
	RemovedRecords  int     `json:"removedRecords"`
	DurationSeconds float64 `json:"durationSeconds"`
}

func sweepDoc(st sweep.Stats) *sweepJSON {
	return &sweepJSON{Stores: st.Stores, Files: st.Files, Unchanged: st.Unchanged, Active: st.Active, Assessed: st.Assessed, Retried: st.Retried, Resettled: st.Resettled,
		OverBudget: st.OverBudget, UnderBudget: st.UnderBudget, Ineligible: st.Ineligible, Enqueued: st.Enqueued,
		AlreadyQueued: st.AlreadyQueued, Errors: st.Errors, NewerRecords: st.NewerRecords, RemovedRecords: st.Removed, DurationSeconds: seconds(st.Duration)}
}

type jobJSON struct {
	Store        string `json:"store"`
	Path         string `json:"path"`
	SessionID    string `json:"sessionId"`
	Kind         string `json:"kind"`
	Outcome      string `json:"outcome"`
	Reason       string `json:"reason,omitempty"`
	EntryID      string `json:"entryId,omitempty"`
	TokensBefore int    `json:"tokensBefore"`
	TokensAfter  int    `json:"tokensAfter"`
	LLMTokens    int    `json:"llmTokens"`
	// The model usage behind LLMTokens: input (cached included), the part of the input
	// served from the endpoint's prompt cache, output.
	LLMInputTokens       int     `json:"llmInputTokens"`
	LLMCachedInputTokens int     `json:"llmCachedInputTokens"`
	LLMOutputTokens      int     `json:"llmOutputTokens"`
	Attempts             int     `json:"attempts"`
	DurationSeconds      float64 `json:"durationSeconds"`
}

type runReportJSON struct {
	Sweep *sweepJSON `json:"sweep"`
	// LeftAlone are the files the sweep did not enqueue; result is unchanged, active,
	// assessed (within budget), ineligible or error.
	LeftAlone []leftAloneJSON `json:"leftAlone"`
	Jobs      []jobJSON       `json:"jobs"`
	// Counts has every final outcome, zeros included.
	Counts          map[string]int `json:"counts"`
	DurationSeconds float64        `json:"durationSeconds"`
}

type leftAloneJSON struct {
	Store  string `json:"store"`
	Path   string `json:"path"`
	Result string `json:"result"`
}

func seconds(d time.Duration) float64 {
	return float64(d.Round(time.Millisecond)) / float64(time.Second)
}

// finalOutcomes are the outcomes a job ends with, in report order.
var finalOutcomes = []pipeline.Outcome{pipeline.OutcomeDone, pipeline.OutcomeSkipped, pipeline.OutcomeSuperseded, pipeline.OutcomeFailed}

func writeReportJSON(w io.Writer, r *pipeline.Report, alone []sweep.SweptFile) error {
	doc := runReportJSON{Jobs: []jobJSON{}, LeftAlone: []leftAloneJSON{}, Counts: map[string]int{}, DurationSeconds: seconds(r.Duration)}
	sortSwept(alone)
	for _, f := range alone {
		doc.LeftAlone = append(doc.LeftAlone, leftAloneJSON{Store: f.Store, Path: f.Path, Result: f.Result})
	}
	if r.Sweep != nil {
		doc.Sweep = sweepDoc(*r.Sweep)
	}
	for _, o := range finalOutcomes {
		doc.Counts[string(o)] = r.Counts[o]
	}
	for _, row := range r.Rows {
		doc.Jobs = append(doc.Jobs, jobJSON{Store: row.Store, Path: row.Path, SessionID: row.SessionID, Kind: row.Kind,
			Outcome: string(row.Outcome), Reason: row.Reason, EntryID: row.EntryID, TokensBefore: row.TokensBefore,
			TokensAfter: row.TokensAfter, LLMTokens: row.LLMTokens, LLMInputTokens: row.LLMInputTokens, LLMCachedInputTokens: row.LLMCachedInputTokens,
			LLMOutputTokens: row.LLMOutputTokens, Attempts: row.Attempts, DurationSeconds: seconds(row.Duration)})
	}
	return command.WriteJSON(w, doc)
}

// maxNamedAlone is how many files the report names one by one among those the sweep left
// alone; beyond it, it gives the counts only.
const maxNamedAlone = 20

// writeReportTable prints the jobs as an aligned table, a totals line, and what the sweep
// left alone and why (naming the files when there are few). idle is the --idle setting,
// for the hint about active sessions.
func writeReportTable(w io.Writer, r *pipeline.Report, idle time.Duration, alone []sweep.SweptFile) error {
	if len(r.Rows) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "STORE\tPATH\tKIND\tOUTCOME\tTOKENS BEFORE\tTOKENS AFTER\tATTEMPTS\tDURATION\tREASON")
		for _, row := range r.Rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", row.Store, row.Path, row.Kind, row.Outcome,
				row.TokensBefore, row.TokensAfter, row.Attempts, row.Duration.Round(time.Millisecond), shorten(row.Reason, 80))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	total := fmt.Sprintf("%d jobs: %d done, %d skipped, %d failed", len(r.Rows), r.Counts[pipeline.OutcomeDone], r.Counts[pipeline.OutcomeSkipped], r.Counts[pipeline.OutcomeFailed])
	if n := r.Counts[pipeline.OutcomeSuperseded]; n > 0 {
		total += fmt.Sprintf(", %d superseded (written on a side branch: a live agent wrote meanwhile)", n)
	}
	fmt.Fprintf(w, "%s in %s\n", total, r.Duration.Round(time.Millisecond))
	var in, cached, out int
	for _, row := range r.Rows {
		in, cached, out = in+row.LLMInputTokens, cached+row.LLMCachedInputTokens, out+row.LLMOutputTokens
	}
	if in+out > 0 {
		fmt.Fprintf(w, "summarizer: %d input tokens (%d served from the endpoint's prompt cache), %d output tokens\n", in, cached, out)
	}
	st := r.Sweep
	if st == nil {
		return nil
	}
	why := map[string]string{
		"assessed":   "under budget",
		"unchanged":  "unchanged since the last sweep",
		"active":     fmt.Sprintf("active (modified within --idle %s)", idle),
		"ineligible": "over budget but not compactable (v1/v2 format, no assistant message, or already compacted)",
		"error":      "unreadable (see the log)",
	}
	var counts []string
	for _, c := range []struct {
		n      int
		result string
	}{{st.UnderBudget, "assessed"}, {st.Unchanged, "unchanged"}, {st.Active, "active"}, {st.Ineligible, "ineligible"}, {st.Errors, "error"}} {
		if c.n > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", c.n, why[c.result]))
		}
	}
	if len(counts) > 0 {
		fmt.Fprintf(w, "left alone: %s\n", strings.Join(counts, ", "))
	}
	if len(alone) > 0 && len(alone) <= maxNamedAlone {
		sortSwept(alone)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, f := range alone {
			reason := why[f.Result]
			if reason == "" {
				reason = f.Result
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", f.Store, f.Path, reason)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if st.Active > 0 {
		fmt.Fprintf(w, "note: %s modified within the last %s: a live agent may be writing, and Pi never re-reads an open session, so they wait until idle that long (--idle 0 takes them now; only do that when no agent has them open)\n",
			command.Plural(st.Active, "session was", "sessions were"), idle)
	}
	return nil
}

func sortSwept(files []sweep.SweptFile) {
	slices.SortFunc(files, func(a, b sweep.SweptFile) int { return strings.Compare(a.Store+"/"+a.Path, b.Store+"/"+b.Path) })
}

// shorten cuts s to n runes, marking the cut.
func shorten(s string, n int) string {
	r := []rune(strings.ReplaceAll(s, "\n", " "))
	if len(r) <= n {
		return string(r)
	}
	return string(r[:n-1]) + "…"
}
