package sweep

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/wire"
)

// One sweep's work on each file: what its memo says, the Assessor's verdict, the record
// and the job.

// sweeper is one sweep's state.
type sweeper struct {
	env      *Env
	memo     *Memo
	settings string
	now      time.Time
}

// tally adds to a sweep's counts under their lock.
type tally func(func())

// one handles one file and returns the result label.
func (sw *sweeper) one(ctx context.Context, store, rel, abs string, st *Stats, mu *sync.Mutex) string {
	s := sw.env
	add := tally(func(f func()) {
		mu.Lock()
		f()
		mu.Unlock()
	})
	fi, err := os.Stat(abs)
	if err != nil {
		add(func() { st.Errors++ })
		return "error"
	}
	key := Key(store, rel)
	prev, known, retry, result := sw.seen(key, rel, fi, st, add)
	if result != "" {
		return result
	}
	if s.Idle > 0 && time.Since(fi.ModTime()) < s.Idle {
		add(func() { st.Active++ })
		return "active"
	}
	rec := Record{V: fleetops.SweepRecordV, Path: rel, Size: fi.Size(), MtimeNs: fi.ModTime().UnixNano(), At: time.Now().UTC(), Settings: sw.settings}
	if known {
		rec.Misses, rec.LastOutcome = prev.rec.Misses, prev.rec.LastOutcome
	}
	job, result := sw.assess(ctx, store, rel, abs, retry, &rec, st, add)
	if err := sw.remember(ctx, key, rec); err != nil {
		s.Log.Warn("sweep: cannot remember file", "path", rel, "err", err)
		if job != nil {
			add(func() { st.Errors++ })
			return "error" // not enqueued: the next sweep tries again
		}
		return result
	}
	if job == nil {
		return result
	}
	return sw.enqueue(ctx, key, job, retry, rec, st, add)
}

// seen decides from the sweep's memo what it knows of the file: a record of a newer
// compactor's (left to its sweeps), or one of this file unchanged since (nothing to do,
// unless the settings changed or its retry is due: retry). A result ends the file's turn.
func (sw *sweeper) seen(key, rel string, fi os.FileInfo, st *Stats, add tally) (prev memoEntry, known, retry bool, result string) {
	prev, known = sw.memo.get(key)
	if known && prev.newer > 0 {
		add(func() { st.NewerRecords++ })
		return prev, known, false, "newer_record"
	}
	known = known && prev.rec.Path == rel
	if known && prev.rec.Size == fi.Size() && prev.rec.MtimeNs == fi.ModTime().UnixNano() {
		switch {
		case prev.rec.Settings != sw.settings:
			add(func() { st.Resettled++ })
		case !prev.rec.RetryAt.IsZero() && !sw.now.Before(prev.rec.RetryAt):
			retry = true
			add(func() { st.Retried++ })
		default:
			add(func() { st.Unchanged++ })
			return prev, known, false, "unchanged"
		}
	}
	return prev, known, retry, ""
}

// assess has the Assessor read the file, fills rec with what it found, and returns the job
// to enqueue when the session is over budget and eligible (nil otherwise) with the result
// label.
func (sw *sweeper) assess(ctx context.Context, store, rel, abs string, retry bool, rec *Record, st *Stats, add tally) (*wire.Job, string) {
	s := sw.env
	a, aerr := s.Assessor.Assess(ctx, abs)
	add(func() { st.Assessed++ })
	result := "assessed"
	var job *wire.Job
	switch {
	case aerr != nil:
		rec.Error = aerr.Error()
		add(func() { st.Errors++ })
		s.Log.Warn("sweep: assess failed", "store", store, "path", rel, "err", aerr)
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
		rec.RetryAt = sw.now.Add(s.Backoff(rec.Misses + 1)).UTC()
	}
	if aerr == nil {
		rec.SessionID, rec.LeafID, rec.Tokens, rec.ContextWindow, rec.OverBudget = a.SessionID, a.LeafID, a.Tokens, a.ContextWindow, a.OverBudget
	}
	return job, result
}

// enqueue publishes the file's job (its record already written) and returns the result
// label; a job not published leaves no record, so the next sweep tries again.
func (sw *sweeper) enqueue(ctx context.Context, key string, job *wire.Job, retry bool, rec Record, st *Stats, add tally) string {
	s := sw.env
	r, err := fleetops.PublishJob(ctx, s.JS, job)
	switch {
	case err != nil:
		add(func() { st.Errors++ })
		s.Log.Warn("sweep: enqueue failed", "store", job.Store, "path", job.Path, "err", err)
		sw.forget(ctx, key)
		return "error" // no record: try again next sweep
	case r.AlreadyQueued || r.Duplicate:
		add(func() { st.AlreadyQueued++ })
		return "already_queued"
	default:
		add(func() { st.Enqueued++ })
		if retry {
			s.Log.Info("sweep: session enqueued again after its backoff", "store", job.Store, "path", job.Path, "misses", rec.Misses, "last_outcome", rec.LastOutcome)
		}
		return "enqueued"
	}
}

func (sw *sweeper) remember(ctx context.Context, key string, rec Record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	rev, err := sw.env.Records.Put(ctx, key, b)
	if err != nil {
		return err
	}
	sw.memo.Put(key, rec, rev)
	return nil
}

func (sw *sweeper) forget(ctx context.Context, key string) {
	sw.memo.Forget(key)
	if _, err := sw.env.Records.DeleteExpiring(ctx, key, 0, sw.markerTTL()); err != nil {
		sw.env.Log.Debug("sweep: record of a file not enqueued not deleted", "key", key, "err", err)
	}
}

// MarkerTTL is how long the marker of a removed sweep record stays: long enough for
// the watchers of the moment to see it (the others load the bucket without the key).
const MarkerTTL = time.Hour

// prune removes the records of this service's stores whose files are gone: a record the
// walk did not meet, whose file does not exist (a file that exists but was not walked,
// because a directory could not be read or it is no longer a regular file, keeps its
// record). A record is removed only if it has not changed since the memo read it (a
// conditional delete: another sweep or a worker's note wins), and never one of a newer
// schema version. It returns how many were removed.
func (sw *sweeper) prune(ctx context.Context, walked map[string]bool) int {
	s := sw.env
	removed := 0
	for _, st := range s.Stores {
		for key, e := range sw.memo.Under(st) {
			if walked[key] || e.newer > 0 || !filepath.IsLocal(filepath.FromSlash(e.rec.Path)) || Key(st, e.rec.Path) != key {
				continue
			}
			if _, err := os.Lstat(filepath.Join(s.Roots[st], filepath.FromSlash(e.rec.Path))); !errors.Is(err, fs.ErrNotExist) {
				continue
			}
			refused, err := s.Records.DeleteExpiring(ctx, key, e.rev, sw.markerTTL())
			if err != nil {
				s.Log.Debug("sweep: record of a file that is gone not removed", "store", st, "path", e.rec.Path, "err", err)
				continue
			}
			if refused && s.SayEvery("sweep-marker-ttl", time.Hour) {
				s.Log.Warn("sweep: the bucket does not let the markers of removed records expire: run `compactor setup` of this version", "bucket", wire.BucketSweep)
			}
			sw.memo.Forget(key)
			removed++
		}
	}
	if removed > 0 {
		s.Log.Info("sweep: records of session files that are gone removed", "records", removed)
	}
	return removed
}

func (sw *sweeper) markerTTL() time.Duration {
	if sw.env.MarkerTTL > 0 {
		return sw.env.MarkerTTL
	}
	return MarkerTTL
}
