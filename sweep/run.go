package sweep

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
)

// Env is what a sweep works with: the worker runtime's connection, its stores and their
// roots, the Assessor, its settings and its log, metric and clock.
type Env struct {
	JS       jetstream.JetStream
	Records  *fleetops.Bucket // COMPACTOR_SWEEP
	Stores   []string
	Roots    map[string]string // store name → real root
	Assessor Assessor
	// Idle: a file modified within it is left alone (≤ 0: none).
	Idle time.Duration
	// Backoff is how long a sweep waits before it enqueues a session again whose jobs ended
	// failed or busy n times in a row (n ≥ 1).
	Backoff func(n int) time.Duration
	// MarkerTTL is how long the marker of a removed record is kept (0: MarkerTTL).
	MarkerTTL time.Duration
	Now       time.Time // the sweep's clock
	// Started is when the sweep began (its memo's load counts into its duration); zero: now.
	Started time.Time
	Log     *slog.Logger
	Swept   *prometheus.CounterVec // by store and result (SweptFile.Result)
	// SayEvery reports whether a warning of this kind was not said within every.
	SayEvery func(what string, every time.Duration) bool
}

// Run sweeps with m, the memo of the stores' records (see Sweep in package pipeline for
// what a sweep does). progress may be nil. Without progress, the stats are logged in one
// line at info level, with why nothing was enqueued when nothing was.
func Run(ctx context.Context, s *Env, m *Memo, progress Progress) (Stats, error) {
	start := s.Started
	if start.IsZero() {
		start = time.Now()
	}
	sw := &sweeper{env: s, memo: m, now: s.Now}
	if f, ok := s.Assessor.(SettingsFingerprinter); ok {
		sw.settings = f.SettingsFingerprint()
	}
	items, walked, err := s.walk(ctx)
	if err != nil {
		return Stats{}, err
	}
	var (
		mu    sync.Mutex
		stats = Stats{Stores: len(s.Stores), Files: len(items)}
		done  int
	)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for _, it := range items {
		g.Go(func() error {
			result := sw.one(gctx, it.store, it.rel, it.abs, &stats, &mu)
			s.Swept.WithLabelValues(it.store, result).Inc()
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

// item is a session file a sweep looks at.
type item struct{ store, rel, abs string }

// walk lists the session files of every store, and the keys of their records.
func (s *Env) walk(ctx context.Context) ([]item, map[string]bool, error) {
	var items []item
	walked := map[string]bool{} // the keys of the files walked
	for _, st := range s.Stores {
		root := s.Roots[st]
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				s.Log.Warn("sweep: cannot read", "path", p, "err", err)
				if d != nil && d.IsDir() && p != root {
					return fs.SkipDir
				}
				return nil
			}
			if d.Type().IsRegular() && strings.HasSuffix(d.Name(), ".jsonl") {
				rel, _ := filepath.Rel(root, p)
				items = append(items, item{st, filepath.ToSlash(rel), p})
				walked[Key(st, filepath.ToSlash(rel))] = true
			}
			return ctx.Err()
		})
		if err != nil {
			return nil, nil, fmt.Errorf("sweep %s: %w", st, err)
		}
	}
	return items, walked, nil
}

// logSweep says what a sweep left to a newer compactor's sweeps and, without a progress
// report, what it did in one line, with why it enqueued nothing when it did not.
func (s *Env) logSweep(stats Stats, progress Progress) {
	if stats.NewerRecords > 0 && s.SayEvery("sweep-newer", time.Hour) {
		s.Log.Warn("sweep: files whose records a newer compactor wrote were left to its sweeps (their records are of a schema version this one cannot read; docs/upgrading.md)",
			"files", stats.NewerRecords)
	}
	if progress == nil {
		attrs := []any{"files", stats.Files, "unchanged", stats.Unchanged, "active", stats.Active, "assessed", stats.Assessed,
			"over_budget", stats.OverBudget, "enqueued", stats.Enqueued, "already_queued", stats.AlreadyQueued, "ineligible", stats.Ineligible,
			"errors", stats.Errors, "duration_s", float64(stats.Duration.Milliseconds()) / 1000}
		if why := stats.NothingEnqueued(s.Idle); why != "" {
			attrs = append(attrs, "nothing_enqueued", why)
		}
		s.Log.Info("sweep done", attrs...)
	}
}
