package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/compactor-dev/compactor/access"
	"golang.org/x/sync/errgroup"
)

// SweepStats counts what a sweep saw and did.
type SweepStats struct {
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
func (st SweepStats) String() string {
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

// SweepProgress follows a sweep. Update is called after each file with the number of
// files done, the total, that file and what the sweep did with it, and the stats so far,
// from the sweep's goroutines but one call at a time (keep it short: the sweep waits for
// it); Finished is called once at the end with the final stats, also when the sweep stops
// early. Drawing it is the caller's business (the command line draws a bar on a terminal
// and names the files it left alone).
type SweepProgress interface {
	Update(done, total int, file SweptFile, stats SweepStats)
	Finished(stats SweepStats)
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
func (st SweepStats) NothingEnqueued(idle time.Duration) string {
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

// sweepRecord is what COMPACTOR_SWEEP remembers of a file, so the next sweep skips it
// without reading it when its size and mtime are unchanged, the settings that decide the
// budget are the same, and no retry is due.
type sweepRecord struct {
	V             int       `json:"v"` // sweepRecordV
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

func sweepKey(store, rel string) string {
	sum := sha256.Sum256([]byte(rel))
	return store + "." + hex.EncodeToString(sum[:20])
}

// settingsFingerprinter is implemented by an Assessor whose budget depends on settings
// (the engine's: context window override, reserve, counter, policy, keep-recent). Records
// made under other settings are assessed again.
type settingsFingerprinter interface{ SettingsFingerprint() string }

// Sweep walks every store (Pi's sessions/--<cwd>--/<ts>_<uuid>.jsonl layout and any other
// nested .jsonl), skips files unchanged since the last sweep and files modified within Idle,
// asks the Assessor about the rest and enqueues those over budget. It uses every core.
//
// "Unchanged" costs a stat and a lookup in the memo held in memory (loaded once per
// process by a watcher on COMPACTOR_SWEEP, see memo), never a NATS request per file. An
// unchanged file is read again when the settings that decide its budget changed, or when
// its last job failed or met a busy session (a turn in progress: it becomes compactable
// after --abandoned-after without changing) and its backoff has passed (SweepRetryBase
// doubling per miss up to SweepRetryMax).
// progress may be nil. Without progress, the stats are logged in one line at info level,
// with why nothing was enqueued when nothing was.
func (s *Service) Sweep(ctx context.Context, progress SweepProgress) (SweepStats, error) {
	if s.cfg.Assessor == nil {
		return SweepStats{}, access.ConfigErrorf("Assessor", "required to sweep")
	}
	if err := s.Start(ctx); err != nil {
		return SweepStats{}, err
	}
	// A refusal ends the sweep at once, named (this user may not reach a store's keys).
	return access.Guard(ctx, s.nc, func(ctx context.Context) (SweepStats, error) { return s.sweep(ctx, progress) })
}

func (s *Service) sweep(ctx context.Context, progress SweepProgress) (SweepStats, error) {
	if s.cfg.Assessor == nil {
		return SweepStats{}, access.ConfigErrorf("Assessor", "required to sweep")
	}
	if err := s.Start(ctx); err != nil {
		return SweepStats{}, err
	}
	start := time.Now()
	m, err := s.sweepMemo(ctx)
	if err != nil {
		return SweepStats{}, err
	}
	sw := &sweeper{s: s, memo: m, now: s.cfg.sweepNow()}
	if f, ok := s.cfg.Assessor.(settingsFingerprinter); ok {
		sw.settings = f.SettingsFingerprint()
	}
	items, walked, err := s.sweepWalk(ctx)
	if err != nil {
		return SweepStats{}, err
	}
	var (
		mu    sync.Mutex
		stats = SweepStats{Stores: len(s.cfg.Stores), Files: len(items)}
		done  int
	)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for _, it := range items {
		g.Go(func() error {
			result := sw.one(gctx, it.store, it.rel, it.abs, &stats, &mu)
			s.m.swept.WithLabelValues(it.store, result).Inc()
			mu.Lock()
			done++
			if progress != nil {
				progress.Update(done, len(items), SweptFile{Store: it.store, Path: it.rel, Result: result}, stats)
			}
			mu.Unlock()
			return gctx.Err()
		})
	}
	err = g.Wait()
	if err == nil {
		stats.Removed = sw.prune(ctx, walked)
	}
	stats.Duration = time.Since(start)
	if progress != nil {
		progress.Finished(stats)
	}
	if err != nil {
		return stats, fmt.Errorf("sweep: %w", err)
	}
	s.logSweep(stats, progress)
	return stats, nil
}

// sweepItem is a session file a sweep looks at.
type sweepItem struct{ store, rel, abs string }

// sweepWalk lists the session files of every store, and the keys of their records.
func (s *Service) sweepWalk(ctx context.Context) ([]sweepItem, map[string]bool, error) {
	var items []sweepItem
	walked := map[string]bool{} // the keys of the files walked
	for _, st := range s.cfg.Stores {
		root := s.roots[st.Name]
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				s.log.Warn("sweep: cannot read", "path", p, "err", err)
				if d != nil && d.IsDir() && p != root {
					return fs.SkipDir
				}
				return nil
			}
			if d.Type().IsRegular() && strings.HasSuffix(d.Name(), ".jsonl") {
				rel, _ := filepath.Rel(root, p)
				items = append(items, sweepItem{st.Name, filepath.ToSlash(rel), p})
				walked[sweepKey(st.Name, filepath.ToSlash(rel))] = true
			}
			return ctx.Err()
		})
		if err != nil {
			return nil, nil, fmt.Errorf("sweep %s: %w", st.Name, err)
		}
	}
	return items, walked, nil
}

// logSweep says what a sweep left to a newer compactor's sweeps and, without a progress
// report, what it did in one line, with why it enqueued nothing when it did not.
func (s *Service) logSweep(stats SweepStats, progress SweepProgress) {
	if stats.NewerRecords > 0 && s.sayEvery("sweep-newer", time.Hour) {
		s.log.Warn("sweep: files whose records a newer compactor wrote were left to its sweeps (their records are of a schema version this one cannot read; docs/upgrading.md)",
			"files", stats.NewerRecords)
	}
	if progress == nil {
		attrs := []any{"files", stats.Files, "unchanged", stats.Unchanged, "active", stats.Active, "assessed", stats.Assessed,
			"over_budget", stats.OverBudget, "enqueued", stats.Enqueued, "already_queued", stats.AlreadyQueued, "ineligible", stats.Ineligible,
			"errors", stats.Errors, "duration_s", seconds(stats.Duration)}
		if why := stats.NothingEnqueued(s.cfg.Idle); why != "" {
			attrs = append(attrs, "nothing_enqueued", why)
		}
		s.log.Info("sweep done", attrs...)
	}
}
