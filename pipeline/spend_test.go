package pipeline

import (
	"context"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/spend"
	"github.com/compactor-dev/compactor/wire"
)

// spendLedger is what the "endpoint" billed, by hour of the test's clock and by store,
// and what became of each job.
type spendLedger struct {
	mu     sync.RWMutex // a handler holds it (read) from its reservation to its billing
	billed map[string]int
	held   map[string]time.Time // job path → the hour it was last held in
	doneIn map[string]time.Time // job path → the hour it was billed in
	maxJob int
}

// spendHandler is a handler whose paid call costs a known number of input tokens (its
// estimate is exact): it asks ReserveLLM as the service's summarizer does, bills the
// tokens in the hour of the clock, and appends its entry.
func spendHandler(clock *fakeClock, l *spendLedger, size func(path string) int) Handler {
	return HandlerFunc(func(ctx context.Context, job wire.Job, file string) (wire.Result, error) {
		n := size(job.Path)
		l.mu.RLock()
		hour := clock.now().Truncate(time.Hour)
		if err := ReserveLLM(ctx, func() int { return n }); err != nil {
			l.mu.RUnlock()
			l.mu.Lock()
			l.held[job.Path] = hour
			l.mu.Unlock()
			return wire.Result{}, err
		}
		l.mu.RUnlock()
		l.mu.Lock()
		l.billed[hour.Format(time.RFC3339)+" "+job.Store] += n
		l.doneIn[job.Path] = hour
		l.maxJob = max(l.maxJob, n)
		l.mu.Unlock()
		res, err := applyFake(job, file)
		res.LLMInputTokens, res.LLMModel = n, "fake-model"
		return res, err
	})
}

// jobSize is a job's input tokens: 500 to 1499, by its path.
func jobSize(path string) int {
	h := fnv.New32a()
	h.Write([]byte(path))
	return 500 + int(h.Sum32()%1000)
}

// The spend limit's "done when": two workers share one limit of N input tokens per hour
// (a fleet limit, counted in COMPACTOR_SPEND); 30 jobs of 500-1499 tokens, about six
// hours' worth. In every hour the fleet's billed tokens stay at most N + one job's; the
// jobs held in an hour run in the next one; none fails or is dead-lettered, and a held
// job's attempts are not counted. The hours are the test's clock, moved once every job
// left has been held in the hour (a held job comes back after 50 ms of real time instead
// of at the end of its window).
func TestSpendLimitHoldsJobsToTheNextHour(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	clock := &fakeClock{t: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)}
	ledger := &spendLedger{billed: map[string]int{}, held: map[string]time.Time{}, doneIn: map[string]time.Time{}}
	const limit = 5000
	var services []*Service
	for range 2 {
		cfg := b.config(spendHandler(clock, ledger, jobSize))
		cfg.SpendLimits = []spend.Limit{{Window: time.Hour, Tokens: limit}}
		cfg.spendClock, cfg.spendHoldMax = clock.now, 50*time.Millisecond
		s := b.service(cfg)
		b.run(s)
		services = append(services, s)
	}
	var paths []string
	total := 0
	for i := range 30 {
		rel := fmt.Sprintf("s%02d.jsonl", i)
		sid, leaf := writeSession(t, b.dir, rel)
		b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: rel, SessionID: sid, ExpectLeafID: leaf})
		paths = append(paths, rel)
		total += jobSize(rel)
	}
	hours := 0
	for {
		hour := clock.now()
		// The hour is over for the test once every job left has been held in it.
		waitfor.Until(t, "every job left held in "+hour.Format("15:04"), func() bool {
			ledger.mu.RLock()
			defer ledger.mu.RUnlock()
			for _, p := range paths {
				if _, done := ledger.doneIn[p]; !done && !ledger.held[p].Equal(hour) {
					return false
				}
			}
			return true
		})
		ledger.mu.Lock() // no reservation between here and the clock's move
		left := 0
		for _, p := range paths {
			if _, done := ledger.doneIn[p]; !done {
				left++
			}
		}
		if left == 0 {
			ledger.mu.Unlock()
			break
		}
		clock.set(hour.Add(time.Hour))
		ledger.mu.Unlock()
		hours++
		if hours > 20 {
			t.Fatal("jobs still held after 20 hours")
		}
	}
	waitfor.Until(t, "every job's final event", func() bool {
		n := 0
		for _, ev := range b.events() {
			if ev.Final() {
				n++
			}
		}
		return n == len(paths) && b.pending() == 0
	})

	ledger.mu.Lock()
	defer ledger.mu.Unlock()
	var keys []string
	for k := range ledger.billed {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var lines []string
	for _, k := range keys {
		lines = append(lines, fmt.Sprintf("%s %d", k[11:16], ledger.billed[k]))
		if ledger.billed[k] > limit+ledger.maxJob {
			t.Errorf("hour %s: %d tokens billed, over the limit %d + one job (%d)", k, ledger.billed[k], limit, ledger.maxJob)
		}
	}
	heldRan := 0
	for _, p := range paths {
		done, ok := ledger.doneIn[p]
		if !ok {
			t.Errorf("%s never ran", p)
			continue
		}
		if held, was := ledger.held[p]; was {
			if !done.Equal(held.Add(time.Hour)) {
				t.Errorf("%s: last held in %s, ran in %s, not the next hour", p, held.Format("15:04"), done.Format("15:04"))
			}
			heldRan++
		}
		if n := countType(t, filepath.Join(b.dir, p), "compaction"); n != 1 {
			t.Errorf("%s: %d compactions", p, n)
		}
	}
	for _, ev := range b.events() {
		if ev.Final() && (ev.Outcome != OutcomeDone || ev.Attempt != 1) {
			t.Errorf("%s ended %s at attempt %d (want done at attempt 1: a hold uses no attempt): %s", ev.Path, ev.Outcome, ev.Attempt, ev.Reason)
		}
		if ev.Final() && ev.LLMModel != "fake-model" {
			t.Errorf("%s: model %q in its event", ev.Path, ev.LLMModel)
		}
	}
	if dl := b.deadLetters(); len(dl) > 0 {
		t.Errorf("%d dead letters: %+v", len(dl), dl[0])
	}
	holds := 0.0
	for _, s := range services {
		holds += counterValue(t, s.m.handedBack.WithLabelValues("default", handBackSpend))
	}
	t.Logf("limit %d tokens per hour, 2 workers, 30 jobs (%d tokens, the largest %d): billed per hour %v; %d jobs held and run in the next hour; %.0f hand-backs",
		limit, total, ledger.maxJob, lines, heldRan, holds)
	if heldRan == 0 || holds == 0 {
		t.Error("no job was held: the limit was not exercised")
	}
}

// A limit of one store holds that store's jobs and not another's.
func TestSpendLimitPerStore(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	other := t.TempDir()
	clock := &fakeClock{t: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)}
	ledger := &spendLedger{billed: map[string]int{}, held: map[string]time.Time{}, doneIn: map[string]time.Time{}}
	cfg := b.config(spendHandler(clock, ledger, jobSize))
	cfg.Stores = append(cfg.Stores, Store{Name: "other", Dir: other})
	cfg.SpendLimits = []spend.Limit{{Store: "default", Window: 24 * time.Hour, Tokens: 2000}}
	cfg.spendClock, cfg.spendHoldMax = clock.now, 50*time.Millisecond
	b.run(b.service(cfg))
	for i := range 6 {
		for _, st := range []struct{ name, dir string }{{"default", b.dir}, {"other", other}} {
			rel := fmt.Sprintf("%s%02d.jsonl", st.name, i)
			sid, leaf := writeSession(t, st.dir, rel)
			b.enqueue(wire.Job{Kind: wire.KindCompact, Store: st.name, Path: rel, SessionID: sid, ExpectLeafID: leaf})
		}
	}
	waitfor.Until(t, "store other done and store default held", func() bool {
		ledger.mu.RLock()
		defer ledger.mu.RUnlock()
		done, held := 0, 0
		for i := range 6 {
			if _, ok := ledger.doneIn[fmt.Sprintf("other%02d.jsonl", i)]; ok {
				done++
			}
			p := fmt.Sprintf("default%02d.jsonl", i)
			if _, ok := ledger.held[p]; ok {
				if _, ran := ledger.doneIn[p]; !ran {
					held++
				}
			}
		}
		return done == 6 && held > 0
	})
	ledger.mu.RLock()
	defer ledger.mu.RUnlock()
	day := clock.now().Truncate(time.Hour).Format(time.RFC3339)
	if got := ledger.billed[day+" default"]; got > 2000+ledger.maxJob {
		t.Errorf("store default billed %d, over its limit 2000 + one job", got)
	}
	t.Logf("store default (2000 per day) billed %d; store other (no limit) billed %d", ledger.billed[day+" default"], ledger.billed[day+" other"])
}

// RunOnce does not wait for the jobs a limit holds or whose version it does not work: it
// ends when every job left is one of those, leaving them queued.
func TestRunOnceLeavesHeldJobsQueued(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	clock := &fakeClock{t: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)}
	ledger := &spendLedger{billed: map[string]int{}, held: map[string]time.Time{}, doneIn: map[string]time.Time{}}
	cfg := b.config(spendHandler(clock, ledger, jobSize))
	cfg.SpendLimits = []spend.Limit{{Window: time.Hour, Tokens: 1}}
	cfg.spendClock = clock.now
	s := b.service(cfg)
	for i := range 3 {
		rel := fmt.Sprintf("s%d.jsonl", i)
		sid, leaf := writeSession(t, b.dir, rel)
		b.enqueue(wire.Job{Kind: wire.KindCompact, Store: "default", Path: rel, SessionID: sid, ExpectLeafID: leaf})
	}
	sid, leaf := writeSession(t, b.dir, "v2.jsonl")
	j := wire.Job{Kind: wire.KindCompact, Store: "default", Path: "v2.jsonl", SessionID: sid, ExpectLeafID: leaf}
	j.Normalize(time.Now())
	b.publishRaw(j, 2)
	rep, err := s.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counts[OutcomeDone] != 1 || len(rep.Rows) != 1 {
		t.Errorf("report: %+v, want the one job the limit admitted", rep.Counts)
	}
	if n := b.pending(); n != 3 {
		t.Errorf("%d jobs queued after RunOnce, want 3 (2 held by the limit, 1 of version 2)", n)
	}
	if dl := b.deadLetters(); len(dl) > 0 {
		t.Errorf("dead letters: %+v", dl)
	}
}
