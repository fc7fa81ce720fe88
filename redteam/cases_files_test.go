//go:build redteam

package redteam

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/wire"
)

// The files' race: what hostA's host can do to hostA's own store directory while hostA's
// worker works on it (swap a directory or the session file for a symlink, link, rename, put
// a FIFO or a device in a file's place), each with a job of hostA's enqueued with the role's
// key. A worker that resolves the path and then opens it again by name for the append is
// open to it: a directory swapped for a symlink during the summary gets the compaction
// appended to another store's file, and a job whose path is gone is matched by session id
// to a hard link of another store's file. Hence every open beneath the root, and the file
// pinned by device and inode. The aim is hostB's next session (the
// file its flows work on after the attack, written before the runner's first snapshot):
// hostA knows its name, never writes it. The runner compares it, and every other file of
// hostB's, byte for byte; each case also checks that nothing was written outside hostA's
// root and how hostA's job ended (its final event, read with hostA's admin's key: a
// worker's key may not read events).

// jobWait bounds the wait for one of hostA's jobs to end: a job that has not ended by then
// hangs (a FIFO opened for writing with no reader blocks for ever).
const jobWait = 90 * time.Second

// victim is hostB's next session: the file of hostB's an attack aims at.
func (a *Attacker) victim() (abs, base, id string) {
	return filepath.Join(a.f.roots["hostB"], a.f.next.rel), filepath.Base(a.f.next.rel), a.f.next.id
}

// ModelA is hostA's fake model: what it was asked (Requests, Count).
func (a *Attacker) ModelA() *fakellm.Server { return a.f.llm["hostA"] }

// scratch is a directory of hostA's root for one run of a case (name and role in its
// name), removed by the cleanup it returns.
func (a *Attacker) scratch(name string) (rel string, cleanup func()) {
	rel = "rt-" + name + "-" + string(a.Role)
	return rel, func() {
		_ = os.RemoveAll(filepath.Join(a.Root, rel))
		_ = os.RemoveAll(filepath.Join(a.Root, rel+".moved"))
	}
}

func newID() string { return uuid.Must(uuid.NewV7()).String() }

// writeA writes a copy of the source session into hostA's root at rel, under a new session
// id, and returns its id.
func (a *Attacker) writeA(rel string) (string, error) {
	return a.writeAs(rel, newID())
}

// writeAs writes a copy of the source session into hostA's root at rel as session id.
func (a *Attacker) writeAs(rel, id string) (string, error) {
	p := filepath.Join(a.Root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", err
	}
	return id, os.WriteFile(p, bytes.ReplaceAll(a.f.template, []byte(sourceID), []byte(id)), 0o644)
}

// compactA is hostA's forced compaction of its session id at rel.
func compactA(rel, id string) wire.Job {
	return wire.Job{Kind: wire.KindCompact, Store: "hostA", Path: filepath.ToSlash(rel), SessionID: id, Reason: "redteam", Force: true}
}

// enqueueA publishes job with the attacker's key and waits for its final event (read with
// hostA's admin's key), at most jobWait. Each job gets an id of its own: the same request
// again would be a duplicate of the first, answered by its event.
func (a *Attacker) enqueueA(ctx context.Context, job wire.Job) (*wire.Event, error) {
	job.ID = "rt-" + newID()
	var r pipeline.EnqueueResult
	for deadline := time.Now().Add(jobWait); ; {
		var err error
		r, err = pipeline.Enqueue(ctx, a.NC, job, false, 10*time.Second)
		if err != nil {
			return nil, fmt.Errorf("hostA's %s could not enqueue its own job: %w", a.Role, err)
		}
		if !r.Other {
			break
		}
		// The session's previous job, ended, may linger a moment after its event.
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("hostA's job %s (seq %d) holds %s's subject for %s", r.JobID, r.Seq, job.SessionID, jobWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
	subject := wire.JobEventSubject("hostA", job.SessionID, r.Seq)
	deadline := time.Now().Add(jobWait)
	for {
		data, err := directGet(ctx, a.adminA, wire.StreamEvents, subject)
		var ev wire.Event
		if err == nil && data != nil && json.Unmarshal(data, &ev) == nil && ev.JobID == r.JobID && ev.Final() {
			return &ev, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("hostA's job %s (seq %d, %s) did not end within %s: the worker hangs", r.JobID, r.Seq, job.Path, jobWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// duringSummary enqueues job with hostA's summaries held (a.HoldSummary), waits until its
// summary request reaches hostA's model, runs attack, lets the model answer and returns the
// job's final event.
func (a *Attacker) duringSummary(ctx context.Context, job wire.Job, attack func() error) (*wire.Event, error) {
	release := a.HoldSummary()
	defer release()
	n := a.ModelA().Count()
	type ended struct {
		ev  *wire.Event
		err error
	}
	done := make(chan ended, 1)
	go func() {
		ev, err := a.enqueueA(ctx, job)
		done <- ended{ev, err}
	}()
	for a.ModelA().Count() == n {
		select {
		case e := <-done:
			return nil, fmt.Errorf("hostA's job ended before its summary was asked for: %+v %v", e.ev, e.err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := attack(); err != nil {
		return nil, fmt.Errorf("the attack itself: %w", err)
	}
	release()
	e := <-done
	return e.ev, e.err
}

// said prints how one of hostA's jobs of an attack ended (the figures of the run).
func (a *Attacker) said(what string, ev *wire.Event) {
	busy := ""
	if ev.Busy {
		busy = " (busy)"
	}
	reason := strings.ReplaceAll(ev.Reason, a.Root+string(filepath.Separator), "")
	if len(reason) > 200 {
		reason = reason[:200] + "..."
	}
	fmt.Printf("=== red team: files, %s (%s): %s%s in %d ms: %s\n", what, a.Role, ev.Outcome, busy, ev.DurationMs, reason)
}

// endedNaming is nil when ev has outcome o and its reason and error together name rel and
// hold each of want.
func endedNaming(ev *wire.Event, o pipeline.Outcome, rel string, want ...string) error {
	text := ev.Reason + " " + ev.Error
	ok := ev.Outcome == o && strings.Contains(text, filepath.ToSlash(rel))
	for _, w := range want {
		ok = ok && strings.Contains(text, w)
	}
	if !ok {
		return fmt.Errorf("hostA's job on %s: %s %q (error %q); want %s naming the path and %q", rel, ev.Outcome, ev.Reason, ev.Error, o, want)
	}
	return nil
}

// deadLetterNaming is nil when hostA's account holds a dead letter of session id whose
// reason or error names rel (read with hostA's admin's key).
func (a *Attacker) deadLetterNaming(ctx context.Context, id, rel string) error {
	js, _ := jetstream.New(a.adminA)
	str, err := js.Stream(ctx, wire.StreamDLQ)
	if err != nil {
		return err
	}
	m, err := str.GetLastMsgForSubject(ctx, wire.DLQSubject("hostA", id))
	if err != nil {
		return fmt.Errorf("no dead letter of hostA's for %s: %w", rel, err)
	}
	var dl wire.DeadLetter
	if json.Unmarshal(m.Data, &dl) != nil || !strings.Contains(dl.Reason+dl.Error, filepath.ToSlash(rel)) {
		return fmt.Errorf("hostA's dead letter does not name %s: %s", rel, m.Data)
	}
	return nil
}

// unchanged is nil when the file at p holds was; else an error saying how many bytes it
// gained (written outside hostA's root, or to a file the job never read).
func unchanged(p string, was []byte, what string) error {
	now, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !bytes.Equal(now, was) {
		return fmt.Errorf("written: %s (%s): %d bytes, were %d (%+d)", what, p, len(now), len(was), len(now)-len(was))
	}
	return nil
}

// outsideBoth is a directory outside both stores' roots (the fleet's own directory) with a
// copy of the source session named base: where a redirected append lands when the symlink
// leads there.
func (a *Attacker) outsideBoth(name, base string) (file string, data []byte, cleanup func(), err error) {
	dir := filepath.Join(a.f.dir, "outside-"+name+"-"+string(a.Role))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, nil, err
	}
	data = bytes.ReplaceAll(a.f.template, []byte(sourceID), []byte(newID()))
	file = filepath.Join(dir, base)
	return file, data, func() { _ = os.RemoveAll(dir) }, os.WriteFile(file, data, 0o644)
}

// symlinkSwap is the attack of a symlink swapped in during hostA's summary (held at hostA's
// model): hostA's session file is named as hostB's victim is; at the summary, the directory
// holding it (dirLevel) or the file itself is moved aside and a symlink put in its place,
// to hostB's directory or file, then to one outside both roots. Each job must fail, naming
// the path, with 0 bytes written to the symlink's target or to hostA's moved original.
func symlinkSwap(dirLevel bool) func(ctx context.Context, a *Attacker) (func(), error) {
	return func(ctx context.Context, a *Attacker) (func(), error) {
		vfile, base, _ := a.victim()
		victimWas, err := os.ReadFile(vfile)
		if err != nil {
			return nil, err
		}
		name := map[bool]string{true: "dirswap", false: "fileswap"}[dirLevel]
		out, outData, rmOut, err := a.outsideBoth(name, base)
		defer rmOut()
		if err != nil {
			return nil, err
		}
		var errs []error
		for _, to := range []struct {
			name, file string
			was        []byte
		}{{"hostB's", vfile, victimWas}, {"outside both roots", out, outData}} {
			dir, cleanup := a.scratch(name)
			rel := filepath.Join(dir, base)
			id, err := a.writeA(rel)
			if err != nil {
				cleanup()
				return nil, err
			}
			swapped, target, what := filepath.Join(a.Root, rel), to.file, "the file"
			if dirLevel {
				swapped, target, what = filepath.Join(a.Root, dir), filepath.Dir(to.file), "a directory"
			}
			mine, _ := os.ReadFile(filepath.Join(a.Root, rel))
			ev, err := a.duringSummary(ctx, compactA(rel, id), func() error {
				if err := os.Rename(swapped, swapped+".moved"); err != nil {
					return err
				}
				return os.Symlink(target, swapped)
			})
			if err == nil {
				a.said(what+" swapped for a symlink to "+to.name, ev)
				moved := swapped + ".moved"
				if dirLevel {
					moved = filepath.Join(moved, base)
				}
				err = errors.Join(endedNaming(ev, pipeline.OutcomeFailed, rel, "unsafe session file"), a.deadLetterNaming(ctx, id, rel),
					unchanged(moved, mine, "hostA's moved original"))
			}
			err = errors.Join(err, unchanged(to.file, to.was, "the symlink's target, "+to.name))
			cleanup()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s swapped for a symlink to %s: %w", what, to.name, err))
			}
		}
		return nil, errors.Join(errs...)
	}
}

func init() {
	// The attack: a directory of hostA's root swapped for a symlink during the
	// summary (it was 2.5 s into a 6 s call).
	register(Case{Name: "a directory of hostA's root swapped for a symlink to hostB's directory (and to one outside both roots) during the summary", Roles: agentAndWorker,
		Attack: symlinkSwap(true)})
	// The session file itself swapped for a symlink during the summary.
	register(Case{Name: "hostA's session file swapped for a symlink to hostB's file (and to one outside both roots) during the summary", Roles: agentAndWorker,
		Attack: symlinkSwap(false)})
	// A hard link in hostA's root to hostB's file: a job names it by path; then a job whose
	// path is gone names hostB's session id, and the link is named for that session (the
	// lookup by session id). A symlink named for the session, and a symlinked directory
	// holding hostB's file, are tried in the lookup too. Refused before a summary is asked
	// for, naming the path; the link is removed before the runner's snapshot.
	register(Case{Name: "a hard link in hostA's root to hostB's file: by path, and found by hostB's session id (with a symlink and a symlinked directory)", Roles: agentAndWorker,
		Attack: func(ctx context.Context, a *Attacker) (func(), error) {
			vfile, base, vid := a.victim()
			dir, cleanup := a.scratch("link")
			defer cleanup()
			if err := os.MkdirAll(filepath.Join(a.Root, dir), 0o755); err != nil {
				return nil, err
			}
			n := a.ModelA().Count()
			link := filepath.Join(dir, base)
			if err := os.Link(vfile, filepath.Join(a.Root, link)); err != nil {
				return nil, err
			}
			victimWas, err := os.ReadFile(vfile)
			if err != nil {
				return nil, err
			}
			var errs []error
			ev, err := a.enqueueA(ctx, compactA(link, vid))
			if err == nil {
				a.said("a hard link to hostB's file, by path", ev)
				err = errors.Join(endedNaming(ev, pipeline.OutcomeFailed, link, "2 hard links"), a.deadLetterNaming(ctx, vid, link))
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("by path: %w", err))
			}
			gone := filepath.Join("rt-gone-"+string(a.Role), base)
			for _, plant := range []struct {
				name, want string
				do         func() error
			}{
				{"a hard link named for the session", "2 hard links", func() error { return nil }}, // the link made above
				{"a symlink named for the session", "no file in the store holds session", func() error {
					_ = os.Remove(filepath.Join(a.Root, link))
					return os.Symlink(vfile, filepath.Join(a.Root, link))
				}},
				{"a symlinked directory holding the session", "no file in the store holds session", func() error {
					if err := os.RemoveAll(filepath.Join(a.Root, dir)); err != nil {
						return err
					}
					return os.Symlink(filepath.Dir(vfile), filepath.Join(a.Root, dir))
				}},
			} {
				if err := plant.do(); err != nil {
					return nil, err
				}
				ev, err := a.enqueueA(ctx, compactA(gone, vid))
				if err == nil {
					a.said("looked up by hostB's session id, "+plant.name, ev)
					err = endedNaming(ev, pipeline.OutcomeFailed, gone, plant.want)
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("looked up by session id, %s: %w", plant.name, err))
				}
			}
			if m := a.ModelA().Count() - n; m != 0 {
				errs = append(errs, fmt.Errorf("%d summaries asked for refused files", m))
			}
			errs = append(errs, unchanged(vfile, victimWas, "hostB's file"))
			return nil, errors.Join(errs...)
		}})
	// hostA's file replaced by a rename during the summary, by one of the same size (what a
	// size check alone takes for the file planned): the job writes neither the new file, which
	// it never read, nor the old one, which has no name left; it ends busy, naming the path,
	// and the next job compacts the new file.
	register(Case{Name: "hostA's session file replaced by a rename during the summary", Roles: agentAndWorker,
		Attack: func(ctx context.Context, a *Attacker) (func(), error) {
			dir, cleanup := a.scratch("rename")
			defer cleanup()
			id := newID()
			rel := filepath.Join(dir, "2026-01-01T00-00-00-000Z_"+id+".jsonl")
			if _, err := a.writeAs(rel, id); err != nil {
				return nil, err
			}
			p := filepath.Join(a.Root, rel)
			old, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			fh, err := os.Open(p) // the file read, once it has no name left
			if err != nil {
				return nil, err
			}
			defer fh.Close()
			// The same bytes but the header's time: the same size, another file.
			renamed := bytes.Replace(old, []byte(`"timestamp":"2025-11-07T08:30:00.000Z"`), []byte(`"timestamp":"2025-11-07T08:30:01.000Z"`), 1)
			if bytes.Equal(renamed, old) {
				return nil, errors.New("the source session's header changed: the replacement is the same file")
			}
			ev, err := a.duringSummary(ctx, compactA(rel, id), func() error {
				if err := os.WriteFile(p+".tmp", renamed, 0o644); err != nil {
					return err
				}
				return os.Rename(p+".tmp", p)
			})
			if err != nil {
				return nil, err
			}
			a.said("the file replaced by a rename", ev)
			if ev.Outcome != pipeline.OutcomeSkipped || !ev.Busy || !strings.Contains(ev.Reason, "another file") || !strings.Contains(ev.Reason, filepath.ToSlash(rel)) {
				return nil, fmt.Errorf("hostA's job on a replaced file: %s busy=%v %q (error %q); want skipped busy, naming the file and its replacement", ev.Outcome, ev.Busy, ev.Reason, ev.Error)
			}
			if st, err := fh.Stat(); err != nil || st.Size() != int64(len(old)) {
				return nil, fmt.Errorf("written: the replaced file (no name left) is %d bytes, was %d (%v)", st.Size(), len(old), err)
			}
			if err := unchanged(p, renamed, "the new file, never read"); err != nil {
				return nil, err
			}
			ev, err = a.enqueueA(ctx, compactA(rel, id))
			if err == nil && ev.Outcome != pipeline.OutcomeDone {
				err = fmt.Errorf("the next job on the new file: %s %q %q", ev.Outcome, ev.Reason, ev.Error)
			}
			return nil, err
		}})
	// A FIFO put in the file's place during the summary, and at a job's path before it is
	// admitted; a device (/dev/null's numbers) in the file's place, where the host may make
	// one (root). The worker does not hang (a FIFO opened to read or write with no one at the
	// other end blocks for ever; every open beneath the root is non-blocking): each job ends,
	// failed, naming the path; then a job of hostA's is done. (The append alone never hangs
	// on these: it opens the file read-write, which a FIFO does not block, and refuses what
	// is not a regular file; the case holds every other open to the same.)
	register(Case{Name: "a FIFO and a device in hostA's session file's place", Roles: agentAndWorker,
		Attack: func(ctx context.Context, a *Attacker) (func(), error) {
			dir, cleanup := a.scratch("fifo")
			defer cleanup()
			type special struct {
				name, want string
				make       func(p string) error
			}
			specials := []special{{"a FIFO", "not a regular file", func(p string) error { return syscall.Mkfifo(p, 0o644) }}}
			probe := filepath.Join(a.f.dir, "rt-mknod-"+string(a.Role))
			if err := syscall.Mknod(probe, syscall.S_IFCHR|0o666, 1<<8|3); err == nil {
				_ = os.Remove(probe)
				specials = append(specials, special{"a character device (1,3)", "", func(p string) error { return syscall.Mknod(p, syscall.S_IFCHR|0o666, 1<<8|3) }})
			}
			for i, sp := range specials {
				rel := filepath.Join(dir, fmt.Sprintf("%d", i), "s.jsonl")
				id, err := a.writeA(rel)
				if err != nil {
					return nil, err
				}
				p := filepath.Join(a.Root, rel)
				ev, err := a.duringSummary(ctx, compactA(rel, id), func() error {
					if err := os.Rename(p, p+".moved"); err != nil {
						return err
					}
					return sp.make(p)
				})
				if err == nil {
					a.said(sp.name+" swapped in", ev)
					err = endedNaming(ev, pipeline.OutcomeFailed, rel, sp.want)
				}
				if err != nil {
					return nil, fmt.Errorf("%s swapped in during the summary: %w", sp.name, err)
				}
			}
			rel := filepath.Join(dir, "before", "s.jsonl")
			if err := os.MkdirAll(filepath.Dir(filepath.Join(a.Root, rel)), 0o755); err != nil {
				return nil, err
			}
			if err := syscall.Mkfifo(filepath.Join(a.Root, rel), 0o644); err != nil {
				return nil, err
			}
			ev, err := a.enqueueA(ctx, compactA(rel, newID()))
			if err == nil {
				a.said("a FIFO at the job's path", ev)
				err = endedNaming(ev, pipeline.OutcomeFailed, rel, "not a regular file")
			}
			if err != nil {
				return nil, fmt.Errorf("a FIFO at the job's path: %w", err)
			}
			rel = filepath.Join(dir, "after", "s.jsonl")
			id, err := a.writeA(rel)
			if err != nil {
				return nil, err
			}
			ev, err = a.enqueueA(ctx, compactA(rel, id))
			if err == nil && ev.Outcome != pipeline.OutcomeDone {
				err = fmt.Errorf("%s %q %q", ev.Outcome, ev.Reason, ev.Error)
			}
			if err != nil {
				return nil, fmt.Errorf("hostA's next job after the FIFOs: %w", err)
			}
			return nil, nil
		}})
}
