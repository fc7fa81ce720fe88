package pipeline

import (
	"log/slog"
	"slices"
	"sync"
	"time"
)

// What a shutdown waits for: the jobs in flight (flights) and the work NATS callbacks
// start (tasks).

// flights holds this worker's jobs from their fetch to the end of their goroutine: the
// shutdown waits for it to empty, and names the jobs still in it when it does not.
type flights struct {
	mu   sync.Mutex
	jobs map[*flight]struct{}
	none chan struct{} // closed while jobs is empty
}

// flight is one job in flight, as far as it is known: fetched (its store and subject), then
// admitted (its logger, with the job's identity, and its path).
type flight struct {
	store, subject string
	since          time.Time
	log            *slog.Logger // nil until admitted
	path           string
}

func newFlights() *flights {
	none := make(chan struct{})
	close(none)
	return &flights{jobs: map[*flight]struct{}{}, none: none}
}

func (fs *flights) add(store, subject string) *flight {
	f := &flight{store: store, subject: subject, since: time.Now()}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if len(fs.jobs) == 0 {
		fs.none = make(chan struct{})
	}
	fs.jobs[f] = struct{}{}
	return f
}

// admitted names the job of f once admission knows it: log carries its identity.
func (fs *flights) admitted(f *flight, log *slog.Logger, path string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f.log, f.path = log, path
}

func (fs *flights) done(f *flight) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	delete(fs.jobs, f)
	if len(fs.jobs) == 0 {
		close(fs.none)
	}
}

func (fs *flights) count() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.jobs)
}

// empty is closed once no job is in flight (at once if none is).
func (fs *flights) empty() <-chan struct{} {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.none
}

// list is a copy of the jobs in flight, the longest running first.
func (fs *flights) list() []flight {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make([]flight, 0, len(fs.jobs))
	for f := range fs.jobs {
		out = append(out, *f)
	}
	slices.SortFunc(out, func(a, b flight) int { return a.since.Compare(b.since) })
	return out
}

// tasks is a WaitGroup that refuses new tasks once closed: a NATS callback racing the
// shutdown cannot start work after the shutdown waited for it.
type tasks struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func (t *tasks) goTask(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed {
		t.wg.Go(f)
	}
}

func (t *tasks) closeAndWait() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.wg.Wait()
}
