package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/compactor-dev/compactor/access"
	"github.com/nats-io/nats.go"
)

// Readiness (/readyz) apart from liveness (/healthz): a worker is ready when it can work
// jobs now: connected to NATS, not stopping, every store's fetch loop fetching (or waiting
// for a free slot), every store writable, and every probe of Config.ReadyProbes (the LLM
// endpoint, in compactor run) answering. /healthz says only that the process is connected
// to NATS.

// fetchStale is how long a fetch loop may go without a fetch that ended well (a message, or
// the fetch's wait running out) before the worker is not ready. A fetch waits fetchWait at
// most, so a loop that fetches is seen within it.
const fetchStale = 4 * time.Second

// readyProbeTTL is how long a probe's result is used before it is run again (on demand,
// when /readyz is asked); readyProbeTimeout bounds one run.
const (
	readyProbeTTL     = 3 * time.Second
	readyProbeTimeout = 2 * time.Second
)

// ReadyProbe is a check /readyz runs, at most every few seconds (its result is cached).
type ReadyProbe struct {
	Name  string
	Check func(ctx context.Context) error
}

// loops is the state of the fetch loops, by store.
type loops struct {
	mu sync.Mutex
	st map[string]*loopState
}

type loopState struct {
	running bool
	waiting bool      // for a free slot: every slot is working a job
	paused  bool      // its store is paused: it fetches nothing, on purpose
	lastOK  time.Time // the last fetch that ended well
	err     error     // the last fetch's error, until one ends well
}

func (l *loops) state(store string) *loopState {
	if l.st == nil {
		l.st = map[string]*loopState{}
	}
	if l.st[store] == nil {
		l.st[store] = &loopState{}
	}
	return l.st[store]
}

func (l *loops) set(store string, f func(*loopState)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(l.state(store))
}

// fetched notes how a fetch ended: a timeout is a fetch that ended well (nothing to do).
func (l *loops) fetched(store string, err error) {
	l.set(store, func(st *loopState) {
		if err == nil || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
			st.lastOK, st.err = time.Now(), nil
			return
		}
		st.err = err
	})
}

// check says why store's fetch loop is not fetching, or "".
func (l *loops) check(store string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.state(store)
	switch {
	case !st.running:
		return "its fetch loop is not running"
	case st.waiting || st.paused:
		return ""
	case time.Since(st.lastOK) > fetchStale:
		why := fmt.Sprintf("no fetch ended well for %s", time.Since(st.lastOK).Round(100*time.Millisecond))
		if st.err != nil {
			why += ": " + st.err.Error()
		}
		return why
	}
	return ""
}

// probeResult is a probe's cached answer.
type probeResult struct {
	mu      sync.Mutex
	at      time.Time // when it was run last
	err     error     // its answer then
	lastErr error     // its last failure, kept after it answers again
	lastAt  time.Time // when that was
	running bool
}

// probeSeen is a probe's result as /readyz reports it.
type probeSeen struct {
	err, lastErr error
	at, lastAt   time.Time
}

// probe runs p unless its result is younger than readyProbeTTL or a run is in progress,
// and returns its result.
func (r *probeResult) probe(ctx context.Context, p ReadyProbe) probeSeen {
	r.mu.Lock()
	if !r.running && (r.at.IsZero() || time.Since(r.at) > readyProbeTTL) {
		r.running = true
		r.mu.Unlock()
		pctx, cancel := context.WithTimeout(ctx, readyProbeTimeout)
		err := p.Check(pctx)
		cancel()
		r.mu.Lock()
		r.running, r.at, r.err = false, time.Now(), err
		if err != nil {
			r.lastErr, r.lastAt = err, r.at
		}
	}
	defer r.mu.Unlock()
	return probeSeen{err: r.err, at: r.at, lastErr: r.lastErr, lastAt: r.lastAt}
}

// ready reports whether the worker can work jobs now, with one line per check.
func (s *Service) ready(ctx context.Context) (bool, []string) {
	ok := true
	var lines []string
	say := func(good bool, format string, args ...any) {
		ok = ok && good
		lines = append(lines, fmt.Sprintf(format, args...))
	}
	if err := s.healthy(); err != nil {
		say(false, "nats: %v", err)
	} else {
		say(true, "nats: connected")
	}
	if s.draining.Load() {
		say(false, "draining: the worker is stopping (no more fetches)")
	}
	for _, st := range s.cfg.Stores {
		if why := s.loops.check(st.Name); why != "" {
			say(false, "fetch %s: %s", st.Name, why)
		} else {
			say(true, "fetch %s: ok", st.Name)
		}
		if p := s.pausedNow(st.Name); p != nil {
			line := fmt.Sprintf("store %s: paused since %s by %s", st.Name, p.At.Format(time.RFC3339), p.By)
			if p.Reason != "" {
				line += " (" + p.Reason + ")"
			}
			say(true, "%s; it takes no jobs and keeps its queue (compactor resume %s)", line, st.Name)
		}
		if err := access.WritableDir(s.roots[st.Name]); err != nil {
			say(false, "store %s: not writable: %v", st.Name, err)
		} else {
			say(true, "store %s: writable", st.Name)
		}
	}
	for i, p := range s.cfg.ReadyProbes {
		r := s.probes[i].probe(ctx, p)
		ago := time.Since(r.at).Round(100 * time.Millisecond)
		line := fmt.Sprintf("%s: ok (checked %s ago)", p.Name, ago)
		if r.err != nil {
			line = fmt.Sprintf("%s: %v (checked %s ago)", p.Name, r.err, ago)
		} else if r.lastErr != nil {
			line += fmt.Sprintf("; last error %s ago: %v", time.Since(r.lastAt).Round(time.Second), r.lastErr)
		}
		say(r.err == nil, "%s", line)
	}
	return ok, lines
}

// readyText is /readyz's body: "ready" or "not ready", then a line per check.
func readyText(ok bool, lines []string) string {
	head := "ready"
	if !ok {
		head = "not ready"
	}
	return head + "\n" + strings.Join(lines, "\n") + "\n"
}
