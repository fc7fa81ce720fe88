package cli

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/compactor-dev/compactor/internal/cli/command"
	"github.com/compactor-dev/compactor/sweep"
)

// progressBar is the command line's one progress bar (sweeps, experiments):
// "label [=======>      ] done/total files, extra" on a terminal, redrawn at most ten
// times a second and erased when done. On anything else (a pipe, a file, a test buffer)
// it draws nothing. Safe for concurrent use.
type progressBar struct {
	w     io.Writer // nil: not a terminal
	label string
	mu    sync.Mutex
	last  time.Time
	drawn bool
}

func newProgressBar(w io.Writer, label string) *progressBar {
	if !command.IsTerminal(w) {
		return &progressBar{label: label}
	}
	return &progressBar{w: w, label: label}
}

// update redraws the bar (throttled, except for the last file).
func (p *progressBar) update(done, total int, extra string) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if done < total && now.Sub(p.last) < 100*time.Millisecond {
		return
	}
	p.last = now
	const width = 30
	fill := width
	if total > 0 {
		fill = done * width / total
	}
	bar := strings.Repeat("=", fill) + strings.Repeat(" ", width-fill)
	if fill > 0 && fill < width {
		bar = bar[:fill-1] + ">" + bar[fill:]
	}
	if extra != "" {
		extra = ", " + extra
	}
	fmt.Fprintf(p.w, "\r\033[K%s [%s] %d/%d files%s", p.label, bar, done, total, extra)
	p.drawn = true
}

// clear erases the bar, so what follows starts on a clean line.
func (p *progressBar) clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.w != nil && p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
		p.drawn = false
	}
}

// sweepProgress shows a sweep: the bar on stderr while it runs, then its summary line once
// on out (nil: no summary, as with --json). It remembers the files the sweep left alone,
// for the run report.
type sweepProgress struct {
	bar   *progressBar
	out   io.Writer
	alone []sweep.SweptFile
}

var _ sweep.Progress = (*sweepProgress)(nil)

func newSweepProgress(stderr, out io.Writer) *sweepProgress {
	return &sweepProgress{bar: newProgressBar(stderr, "sweep"), out: out}
}

// Update is called one call at a time (sweep.Progress), and the report reads
// alone only after the sweep.
func (s *sweepProgress) Update(done, total int, f sweep.SweptFile, st sweep.Stats) {
	switch f.Result {
	case "enqueued", "already_queued":
	default:
		s.alone = append(s.alone, f)
	}
	s.bar.update(done, total, fmt.Sprintf("%d enqueued", st.Enqueued))
}

func (s *sweepProgress) Finished(st sweep.Stats) {
	s.bar.clear()
	if s.out != nil {
		fmt.Fprintln(s.out, st.String())
	}
}
