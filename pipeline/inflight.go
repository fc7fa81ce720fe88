package pipeline

import (
	"log/slog"
	"slices"
	"sync"
	"time"
)

// What a shutdown waits for: the jobs running (runningJobs) and the work NATS callbacks
// start (tasks).

// runningJobs holds this worker's jobs from their fetch to the end of their goroutine: the
// shutdown waits for it to empty, and names the jobs still in it when it does not.
type runningJobs struct {
	mu   sync.Mutex
	jobs map[*runningJob]struct{}
	none chan struct{} // closed while jobs is empty
}

// runningJob is one job running, as far as it is known: fetched (its store and subject), then
// admitted (its logger, with the job's identity, and its path).
type runningJob struct {
	store, subject string
	since          time.Time
	log            *slog.Logger // nil until admitted
	path           string
}

func newRunningJobs() *runningJobs {
	none := make(chan struct{})
	close(none)
	return &runningJobs{jobs: map[*runningJob]struct{}{}, none: none}
}

func (fs *runningJobs) add(store, subject string) *runningJob {
	f := &runningJob{store: store, subject: subject, since: time.Now()}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if len(fs.jobs) == 0 {
		fs.none = make(chan struct{})
	}
	fs.jobs[f] = struct{}{}
	return f
}

// admitted names the job of f once admission knows it: log carries its identity.
func (fs *runningJobs) admitted(f *runningJob, log *slog.Logger, path string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f.log, f.path = log, path
}

func (fs *runningJobs) done(f *runningJob) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	delete(fs.jobs, f)
	if len(fs.jobs) == 0 {
		close(fs.none)
	}
}

func (fs *runningJobs) count() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.jobs)
}

// empty is closed once no job is running (at once if none is).
func (fs *runningJobs) empty() <-chan struct{} {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.none
}

// list is a copy of the jobs running, the longest running first.
func (fs *runningJobs) list() []runningJob {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make([]runningJob, 0, len(fs.jobs))
	for f := range fs.jobs {
		out = append(out, *f)
	}
	slices.SortFunc(out, func(a, b runningJob) int { return a.since.Compare(b.since) })
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
