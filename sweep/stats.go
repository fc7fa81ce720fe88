package sweep

import (
	"fmt"
	"strings"
	"time"
)

// Stats counts what a sweep saw and did.
type Stats struct {
	Stores        int `json:"stores"`
	Files         int `json:"files"`
	Unchanged     int `json:"unchanged"`     // same size and mtime as last sweep: not read
	Active        int `json:"active"`        // modified within Idle: left alone
	Assessed      int `json:"assessed"`      // read by the Assessor
	Retried       int `json:"retried"`       // unchanged, but their last job failed or met a busy session and the backoff has passed
	Resettled     int `json:"resettled"`     // unchanged, but the settings that decide the budget changed since they were assessed
	OverBudget    int `json:"overBudget"`    // assessed and over budget
	UnderBudget   int `json:"underBudget"`   // assessed and within budget: nothing to do
	Ineligible    int `json:"ineligible"`    // over budget but nothing a job could do (v1/v2, no assistant, already compacted)
	Enqueued      int `json:"enqueued"`      // new jobs
	AlreadyQueued int `json:"alreadyQueued"` // a job was pending (or the same one within the duplicate window)
	Errors        int `json:"errors"`
	// NewerRecords: files whose sweep record a newer compactor wrote, in a shape this one
	// cannot read: left to the newer sweeps (not assessed, the record not rewritten).
	NewerRecords int `json:"newerRecords"`
	// Removed: records of files that are gone (deleted, or moved out of the store),
	// removed by this sweep.
	Removed  int           `json:"removedRecords"`
	Duration time.Duration `json:"durationNs"`
}

// String is the one-line summary.
func (st Stats) String() string {
	extra := ""
	if st.Retried > 0 || st.Resettled > 0 {
		extra = fmt.Sprintf(" (%d retried after a backoff, %d for new settings)", st.Retried, st.Resettled)
	}
	if st.NewerRecords > 0 {
		extra += fmt.Sprintf(", %d left to a newer compactor", st.NewerRecords)
	}
	if st.Removed > 0 {
		extra += fmt.Sprintf(", %d records of files that are gone removed", st.Removed)
	}
	return fmt.Sprintf("sweep: %d files in %d stores: %d unchanged, %d active, %d assessed%s, %d over budget, %d enqueued, %d already queued, %d ineligible, %d errors in %s",
		st.Files, st.Stores, st.Unchanged, st.Active, st.Assessed, extra, st.OverBudget, st.Enqueued, st.AlreadyQueued, st.Ineligible, st.Errors, st.Duration.Round(time.Millisecond))
}

// Progress follows a sweep. Update is called after each file with the number of
// files done, the total, that file and what the sweep did with it, and the stats so far,
// from the sweep's goroutines but one call at a time (keep it short: the sweep waits for
// it); Finished is called once at the end with the final stats, also when the sweep stops
// early. Drawing it is the caller's business (the command line draws a bar on a terminal
// and names the files it left alone).
type Progress interface {
	Update(done, total int, file SweptFile, stats Stats)
	Finished(stats Stats)
}

// SweptFile is one file a sweep looked at. Result is the sweep metric's label: unchanged,
// active, assessed (read and within budget), ineligible, already_queued, enqueued,
// newer_record (left to a newer compactor: docs/upgrading.md) or error.
type SweptFile struct {
	Store  string
	Path   string // relative to the store's root
	Result string
}

// NothingEnqueued says why a sweep enqueued no job ("" when it enqueued one or found one
// queued): what an operator who expected a compaction reads first. idle is the service's
// idle threshold (Config.Idle; negative: none).
func (st Stats) NothingEnqueued(idle time.Duration) string {
	if st.Enqueued > 0 || st.AlreadyQueued > 0 {
		return ""
	}
	if st.Files == 0 {
		return "no session file (*.jsonl) in the stores"
	}
	var parts []string
	add := func(n int, what string) {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, what))
		}
	}
	if idle > 0 {
		add(st.Active, fmt.Sprintf("active (modified within --idle %s; left alone until idle)", idle))
	} else {
		add(st.Active, "active")
	}
	add(st.UnderBudget, "within their budget")
	add(st.Ineligible, "over budget with nothing a job could do")
	add(st.Unchanged, "unchanged since the last sweep assessed them (within budget then, or their job already done)")
	add(st.NewerRecords, "left to a newer compactor")
	add(st.Errors, "not readable (errors)")
	if len(parts) == 0 {
		return "no file over its budget"
	}
	return fmt.Sprintf("of %d files: %s", st.Files, strings.Join(parts, ", "))
}
