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
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// SweepStats counts what a sweep saw and did.
type SweepStats struct {
	Stores        int           `json:"stores"`
	Files         int           `json:"files"`
	Unchanged     int           `json:"unchanged"`     // same size and mtime as last sweep: not read
	Active        int           `json:"active"`        // modified within Idle: left alone
	Assessed      int           `json:"assessed"`      // read by the Assessor
	OverBudget    int           `json:"overBudget"`    // assessed and over budget
	UnderBudget   int           `json:"underBudget"`   // assessed and within budget: nothing to do
	Ineligible    int           `json:"ineligible"`    // over budget but nothing a job could do (v1/v2, no assistant, already compacted)
	Enqueued      int           `json:"enqueued"`      // new jobs
	AlreadyQueued int           `json:"alreadyQueued"` // a job was pending (or the same one within the duplicate window)
	Errors        int           `json:"errors"`
	Duration      time.Duration `json:"durationNs"`
}

// String is the one-line summary.
func (st SweepStats) String() string {
	return fmt.Sprintf("sweep: %d files in %d stores: %d unchanged, %d active, %d assessed, %d over budget, %d enqueued, %d already queued, %d ineligible, %d errors in %s",
		st.Files, st.Stores, st.Unchanged, st.Active, st.Assessed, st.OverBudget, st.Enqueued, st.AlreadyQueued, st.Ineligible, st.Errors, st.Duration.Round(time.Millisecond))
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
// active, assessed (read and within budget), ineligible, already_queued, enqueued or error.
type SweptFile struct {
	Store  string
	Path   string // relative to the store's root
	Result string
}

// changed reports whether the sweep read or enqueued anything: a periodic sweep that
// found everything unchanged or active is logged at debug level only.
func (st SweepStats) changed() bool { return st.Assessed > 0 || st.Enqueued > 0 || st.Errors > 0 }

// sweepRecord is what COMPACTOR_SWEEP remembers of a file, so the next sweep skips it
// without reading it when its size and mtime are unchanged.
type sweepRecord struct {
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
}

func sweepKey(store, rel string) string {
	sum := sha256.Sum256([]byte(rel))
	return "f." + store + "." + hex.EncodeToString(sum[:20])
}

// Sweep walks every store (Pi's sessions/--<cwd>--/<ts>_<uuid>.jsonl layout and any other
// nested .jsonl), skips files unchanged since the last sweep and files modified within Idle,
// asks the Assessor about the rest and enqueues those over budget. It uses every core.
// A file whose job was refused is not retried until it changes (or is enqueued by hand).
// progress may be nil. The stats are logged (at info level when the sweep read or enqueued
// something and no progress is shown, else at debug level).
func (s *Service) Sweep(ctx context.Context, progress SweepProgress) (SweepStats, error) {
	if s.cfg.Assessor == nil {
		return SweepStats{}, errors.New("config: Assessor: required to sweep")
	}
	if err := s.Start(ctx); err != nil {
		return SweepStats{}, err
	}
	start := time.Now()
	type item struct{ store, rel, abs string }
	var items []item
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
			result := s.sweepOne(gctx, it.store, it.rel, it.abs, &stats, &mu)
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
	err := g.Wait()
	stats.Duration = time.Since(start)
	if progress != nil {
		progress.Finished(stats)
	}
	if err != nil {
		return stats, fmt.Errorf("sweep: %w", err)
	}
	if progress == nil && stats.changed() {
		s.log.Info(stats.String())
	} else {
		s.log.Debug(stats.String())
	}
	return stats, nil
}

// sweepOne handles one file and returns the result label.
func (s *Service) sweepOne(ctx context.Context, store, rel, abs string, st *SweepStats, mu *sync.Mutex) string {
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
	var prev sweepRecord
	if e, err := s.res.sweep.Get(ctx, key); err == nil && json.Unmarshal(e.Value(), &prev) == nil {
		if prev.Size == fi.Size() && prev.MtimeNs == fi.ModTime().UnixNano() && prev.Path == rel {
			add(func() { st.Unchanged++ })
			return "unchanged"
		}
	}
	if s.cfg.Idle > 0 && time.Since(fi.ModTime()) < s.cfg.Idle {
		add(func() { st.Active++ })
		return "active"
	}
	rec := sweepRecord{Path: rel, Size: fi.Size(), MtimeNs: fi.ModTime().UnixNano(), At: time.Now().UTC()}
	a, aerr := s.cfg.Assessor.Assess(ctx, abs)
	add(func() { st.Assessed++ })
	result := "assessed"
	if aerr != nil {
		rec.Error = aerr.Error()
		add(func() { st.Errors++ })
		s.log.Warn("sweep: assess failed", "store", store, "path", rel, "err", aerr)
		result = "error"
	} else {
		rec.SessionID, rec.LeafID, rec.Tokens, rec.ContextWindow, rec.OverBudget = a.SessionID, a.LeafID, a.Tokens, a.ContextWindow, a.OverBudget
		if !a.OverBudget {
			add(func() { st.UnderBudget++ })
		}
		if a.OverBudget {
			add(func() { st.OverBudget++ })
			if !a.Eligible() {
				add(func() { st.Ineligible++ })
				result = "ineligible"
			} else {
				job := Job{Kind: KindCompact, Store: store, Path: rel, SessionID: a.SessionID, Reason: "sweep", ExpectLeafID: a.LeafID, OnlyOverBudget: true}
				r, err := publishJob(ctx, s.res.js, &job)
				switch {
				case err != nil:
					add(func() { st.Errors++ })
					s.log.Warn("sweep: enqueue failed", "store", store, "path", rel, "err", err)
					return "error" // no record: try again next sweep
				case r.AlreadyQueued || r.Duplicate:
					add(func() { st.AlreadyQueued++ })
					result = "already_queued"
				default:
					add(func() { st.Enqueued++ })
					result = "enqueued"
				}
			}
		}
	}
	b, _ := json.Marshal(rec)
	if _, err := s.res.sweep.Put(ctx, key, b); err != nil {
		s.log.Warn("sweep: cannot remember file", "path", rel, "err", err)
	}
	return result
}

// sweepLoop runs Sweep every SweepEvery until ctx ends.
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
