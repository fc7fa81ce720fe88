package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/compactor-dev/compactor/wire"
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
		return SweepStats{}, configError("Assessor", "required to sweep")
	}
	if err := s.Start(ctx); err != nil {
		return SweepStats{}, err
	}
	// A refusal ends the sweep at once, named (this user may not reach a store's keys).
	return guard(ctx, s.nc, func(ctx context.Context) (SweepStats, error) { return s.sweep(ctx, progress) })
}

func (s *Service) sweep(ctx context.Context, progress SweepProgress) (SweepStats, error) {
	if s.cfg.Assessor == nil {
		return SweepStats{}, configError("Assessor", "required to sweep")
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
	type item struct{ store, rel, abs string }
	var items []item
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
				items = append(items, item{st.Name, filepath.ToSlash(rel), p})
				walked[sweepKey(st.Name, filepath.ToSlash(rel))] = true
			}
			return ctx.Err()
		})
		if err != nil {
			return SweepStats{}, fmt.Errorf("sweep %s: %w", st.Name, err)
		}
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
	if stats.NewerRecords > 0 && s.sayEvery("sweep-newer", time.Hour) {
		s.log.Warn("sweep: files whose records a newer compactor wrote were left to its sweeps (their records are of a schema version this one cannot read; docs/upgrading.md)",
			"files", stats.NewerRecords)
	}
	if progress == nil {
		// One line per sweep, and why it enqueued nothing when it did not.
		attrs := []any{"files", stats.Files, "unchanged", stats.Unchanged, "active", stats.Active, "assessed", stats.Assessed,
			"over_budget", stats.OverBudget, "enqueued", stats.Enqueued, "already_queued", stats.AlreadyQueued, "ineligible", stats.Ineligible,
			"errors", stats.Errors, "duration_s", seconds(stats.Duration)}
		if why := stats.NothingEnqueued(s.cfg.Idle); why != "" {
			attrs = append(attrs, "nothing_enqueued", why)
		}
		s.log.Info("sweep done", attrs...)
	}
	return stats, nil
}

// sweeper is one sweep's state.
type sweeper struct {
	s        *Service
	memo     *memo
	settings string
	now      time.Time
}

// one handles one file and returns the result label.
func (sw *sweeper) one(ctx context.Context, store, rel, abs string, st *SweepStats, mu *sync.Mutex) string {
	s := sw.s
	add := func(f func()) {
		mu.Lock()
		f()
		mu.Unlock()
	}
	fi, err := os.Stat(abs)
	if err != nil {
		add(func() { st.Errors++ })
		return "error"
	}
	key := sweepKey(store, rel)
	prev, known := sw.memo.get(key)
	if known && prev.newer > 0 {
		add(func() { st.NewerRecords++ })
		return "newer_record"
	}
	known = known && prev.rec.Path == rel
	var retry bool
	if known && prev.rec.Size == fi.Size() && prev.rec.MtimeNs == fi.ModTime().UnixNano() {
		switch {
		case prev.rec.Settings != sw.settings:
			add(func() { st.Resettled++ })
		case !prev.rec.RetryAt.IsZero() && !sw.now.Before(prev.rec.RetryAt):
			retry = true
			add(func() { st.Retried++ })
		default:
			add(func() { st.Unchanged++ })
			return "unchanged"
		}
	}
	if s.cfg.Idle > 0 && time.Since(fi.ModTime()) < s.cfg.Idle {
		add(func() { st.Active++ })
		return "active"
	}
	rec := sweepRecord{V: sweepRecordV, Path: rel, Size: fi.Size(), MtimeNs: fi.ModTime().UnixNano(), At: time.Now().UTC(), Settings: sw.settings}
	if known {
		rec.Misses, rec.LastOutcome = prev.rec.Misses, prev.rec.LastOutcome
	}
	a, aerr := s.cfg.Assessor.Assess(ctx, abs)
	add(func() { st.Assessed++ })
	result := "assessed"
	var job *wire.Job
	switch {
	case aerr != nil:
		rec.Error = aerr.Error()
		add(func() { st.Errors++ })
		s.log.Warn("sweep: assess failed", "store", store, "path", rel, "err", aerr)
		result = "error"
	case !a.OverBudget:
		add(func() { st.UnderBudget++ })
	case !a.Eligible():
		add(func() { st.OverBudget++; st.Ineligible++ })
		result = "ineligible"
	default:
		add(func() { st.OverBudget++ })
		job = &wire.Job{Kind: wire.KindCompact, Store: store, Path: rel, SessionID: a.SessionID, Reason: "sweep", ExpectLeafID: a.LeafID, OnlyOverBudget: true}
		if retry || rec.Misses > 0 {
			// The same request as the one that failed: a new id, or the duplicate window
			// could swallow it.
			job.Reason = "sweep-retry"
			job.ID = job.MsgID() + ":sweep-retry-" + strconv.Itoa(rec.Misses)
		}
		// Written before the job is published, so that a worker's note of a fast outcome
		// lands on this record and is not overwritten by it; the retry time is set ahead
		// in case that note is lost.
		rec.Enqueued = true
		rec.RetryAt = sw.now.Add(SweepBackoff(rec.Misses+1, s.cfg.SweepRetryBase, s.cfg.SweepRetryMax)).UTC()
	}
	if aerr == nil {
		rec.SessionID, rec.LeafID, rec.Tokens, rec.ContextWindow, rec.OverBudget = a.SessionID, a.LeafID, a.Tokens, a.ContextWindow, a.OverBudget
	}
	if err := sw.remember(ctx, key, rec); err != nil {
		s.log.Warn("sweep: cannot remember file", "path", rel, "err", err)
		if job != nil {
			add(func() { st.Errors++ })
			return "error" // not enqueued: the next sweep tries again
		}
		return result
	}
	if job == nil {
		return result
	}
	r, err := publishJob(ctx, s.res.js, job)
	switch {
	case err != nil:
		add(func() { st.Errors++ })
		s.log.Warn("sweep: enqueue failed", "store", store, "path", rel, "err", err)
		sw.forget(ctx, key)
		return "error" // no record: try again next sweep
	case r.AlreadyQueued || r.Duplicate:
		add(func() { st.AlreadyQueued++ })
		return "already_queued"
	default:
		add(func() { st.Enqueued++ })
		if retry {
			s.log.Info("sweep: session enqueued again after its backoff", "store", store, "path", rel, "misses", rec.Misses, "last_outcome", rec.LastOutcome)
		}
		return "enqueued"
	}
}

func (sw *sweeper) remember(ctx context.Context, key string, rec sweepRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	rev, err := sw.s.res.sweep.Put(ctx, key, b)
	if err != nil {
		return err
	}
	sw.memo.put(key, rec, rev)
	return nil
}

func (sw *sweeper) forget(ctx context.Context, key string) {
	sw.memo.forget(key)
	if _, err := sw.s.res.sweep.deleteExpiring(ctx, key, 0, sw.markerTTL()); err != nil {
		sw.s.log.Debug("sweep: record of a file not enqueued not deleted", "key", key, "err", err)
	}
}

// sweepMarkerTTL is how long the marker of a removed sweep record stays: long enough for
// the watchers of the moment to see it (the others load the bucket without the key).
const sweepMarkerTTL = time.Hour

// prune removes the records of this service's stores whose files are gone: a record the
// walk did not meet, whose file does not exist (a file that exists but was not walked,
// because a directory could not be read or it is no longer a regular file, keeps its
// record). A record is removed only if it has not changed since the memo read it (a
// conditional delete: another sweep or a worker's note wins), and never one of a newer
// schema version. It returns how many were removed.
func (sw *sweeper) prune(ctx context.Context, walked map[string]bool) int {
	s := sw.s
	removed := 0
	for _, st := range s.cfg.Stores {
		for key, e := range sw.memo.under(st.Name) {
			if walked[key] || e.newer > 0 || !filepath.IsLocal(filepath.FromSlash(e.rec.Path)) || sweepKey(st.Name, e.rec.Path) != key {
				continue
			}
			if _, err := os.Lstat(filepath.Join(s.roots[st.Name], filepath.FromSlash(e.rec.Path))); !errors.Is(err, fs.ErrNotExist) {
				continue
			}
			refused, err := s.res.sweep.deleteExpiring(ctx, key, e.rev, sw.markerTTL())
			if err != nil {
				s.log.Debug("sweep: record of a file that is gone not removed", "store", st.Name, "path", e.rec.Path, "err", err)
				continue
			}
			if refused && s.sayEvery("sweep-marker-ttl", time.Hour) {
				s.log.Warn("sweep: the bucket does not let the markers of removed records expire: run `compactor setup` of this version", "bucket", BucketSweep)
			}
			sw.memo.forget(key)
			removed++
		}
	}
	if removed > 0 {
		s.log.Info("sweep: records of session files that are gone removed", "records", removed)
	}
	return removed
}

func (sw *sweeper) markerTTL() time.Duration {
	if sw.s.cfg.sweepMarkerTTL > 0 {
		return sw.s.cfg.sweepMarkerTTL
	}
	return sweepMarkerTTL
}

// sweepLoop runs Sweep every SweepEvery until ctx ends. The memo's watcher stays open
// between sweeps, so each one costs a walk and a stat per file.
func (s *Service) sweepLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.SweepEvery)
	defer t.Stop()
	for {
		if _, err := s.Sweep(ctx, nil); err != nil && ctx.Err() == nil {
			s.log.Error("sweep failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
