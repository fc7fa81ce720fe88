package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/wire"
)

// The file attacks of the red team (docs/security.md), each run against a real worker (pipelinetest: an embedded
// nats-server, the engine, a fake model over HTTP) with the store's root confined as
// `compactor run` confines it. The attacker holds what a store's agent holds: write access
// to its own store's directory. "Outside" is another store's directory on the same file
// system, with a session at the same relative path: where a redirected append would land.

// outsideStore is another store's directory with a session at rel (the victim).
type outsideStore struct {
	dir, rel string
}

func newOutside(t *testing.T, rel, id string) outsideStore {
	t.Helper()
	o := outsideStore{dir: t.TempDir(), rel: rel}
	data, err := os.ReadFile(liveSrc)
	if err != nil {
		t.Fatal(err)
	}
	data = []byte(strings.Replace(string(data), "019ad9b0-0000-7000-8000-00000000aaaa", id, 1))
	p := filepath.Join(o.dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return o
}

func (o outsideStore) file() string { return filepath.Join(o.dir, filepath.FromSlash(o.rel)) }

// treeDigest is every regular file under dir, its size and its SHA-256 (symlinks not
// followed), and the total size: what "0 bytes written there" is checked against.
func treeDigest(t *testing.T, dir string) (string, int64) {
	t.Helper()
	var b strings.Builder
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		h := sha256.Sum256(data)
		total += int64(len(data))
		fmt.Fprintf(&b, "%s %d %s\n", p, len(data), hex.EncodeToString(h[:8]))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String(), total
}

// duringSummary enqueues j with --force and --wait semantics, waits for its summary
// request to reach the model (held there), runs attack, then lets the model answer and
// returns the job's final event.
func (b *liveBundle) duringSummary(t *testing.T, j wire.Job, attack func()) *wire.Event {
	t.Helper()
	hold := make(chan struct{})
	b.llm.SetDefault(fakellm.Behavior{Hold: hold})
	n := b.llm.Count()
	j.Force = true
	events := make(chan fleetops.EnqueueResult, 1)
	go func() {
		r, err := b.Enqueue(context.Background(), j, true, waitfor.HangGuard)
		if err != nil {
			t.Error(err)
		}
		events <- r
	}()
	waitfor.Until(t, "the summary request to reach the model", func() bool { return b.llm.Count() > n })
	attack()
	close(hold)
	ev := (<-events).Event
	if ev == nil {
		t.Fatal("no final event")
	}
	return ev
}

// inConfinementModes runs f with openat2 (where the kernel has it) and with os.Root, the
// fallback. Not parallel: the mode is the process's.
func inConfinementModes(t *testing.T, f func(t *testing.T)) {
	for _, m := range []sessionio.ConfineMode{sessionio.ConfineOpenat2, sessionio.ConfineRoot} {
		t.Run(map[sessionio.ConfineMode]string{sessionio.ConfineOpenat2: "openat2", sessionio.ConfineRoot: "os.Root"}[m], func(t *testing.T) {
			old, err := sessionio.SetConfinement(m)
			if err != nil {
				t.Skip(err)
			}
			defer sessionio.SetConfinement(old) //nolint:errcheck // the process's mode again
			f(t)
		})
	}
}

// The attack: a directory of the store is replaced by a symlink to another
// store's directory while the summary is being made (the request held at the model, where
// the issue swapped it 2.5 s into a 6 s call). Before: the compaction was appended to the
// other store's file. Now the append opens the path beneath the root with no symlink: the
// job fails, naming the file, and 0 bytes are written outside the root (nor to the moved
// original).
func TestRedteamSymlinkSwapDuringSummary(t *testing.T) {
	inConfinementModes(t, func(t *testing.T) {
		for _, kind := range []string{wire.KindCompact, wire.KindBranchSummary} {
			t.Run(kind, func(t *testing.T) {
				b := newLiveBundle(t, -1, nil, true)
				const id = "019a0000-0000-7000-8000-0000000032a1"
				rel := "--proj--/2026-01-01T00-00-00-000Z_" + id + ".jsonl"
				file := b.session(t, rel, id)
				victim := newOutside(t, rel, "019a0000-0000-7000-8000-0000000032b1")
				before, size := treeDigest(t, victim.dir)
				mine, _ := treeDigest(t, b.StoreDir)
				j := b.job(t, file)
				if kind == wire.KindBranchSummary {
					s, err := sessionio.ReadFile(file)
					if err != nil {
						t.Fatal(err)
					}
					j.Kind, j.TargetID = kind, s.Entries[0].ID
				}
				ev := b.duringSummary(t, j, func() {
					must(t, os.Rename(filepath.Join(b.StoreDir, "--proj--"), filepath.Join(b.StoreDir, "--moved--")))
					must(t, os.Symlink(filepath.Join(victim.dir, "--proj--"), filepath.Join(b.StoreDir, "--proj--")))
				})
				after, size2 := treeDigest(t, victim.dir)
				if after != before {
					t.Errorf("%d bytes written outside the store's root:\n%s\nwas\n%s", size2-size, after, before)
				}
				if ev.Outcome != pipeline.OutcomeFailed || !strings.Contains(ev.Reason+ev.Error, file) || !strings.Contains(ev.Reason+ev.Error, "unsafe session file") {
					t.Errorf("the job: %s, %q (error %q); want failed, naming %s as unsafe", ev.Outcome, ev.Reason, ev.Error, file)
				}
				_ = os.Remove(filepath.Join(b.StoreDir, "--proj--"))
				must(t, os.Rename(filepath.Join(b.StoreDir, "--moved--"), filepath.Join(b.StoreDir, "--proj--")))
				if now, _ := treeDigest(t, b.StoreDir); now != mine {
					t.Errorf("the store's own file changed:\n%s\nwas\n%s", now, mine)
				}
				t.Logf("%s: %s in %d ms: %s; %d bytes written outside the root", kind, ev.Outcome, ev.DurationMs, ev.Reason, size2-size)
			})
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A job whose path is a hard link to another store's file (made by the store's agent in
// its own directory) is refused before anything is read: dead-lettered, naming the path
// and its links; 0 bytes written to the other store's file. The same link made while the
// summary is being made refuses the append.
func TestRedteamHardLink(t *testing.T) {
	t.Parallel()
	t.Run("at the job's path", func(t *testing.T) {
		t.Parallel()
		b := newLiveBundle(t, -1, nil, true)
		const id = "019a0000-0000-7000-8000-0000000032a2"
		victim := newOutside(t, "--proj--/2026-01-01T00-00-00-000Z_"+id+".jsonl", id)
		before, size := treeDigest(t, victim.dir)
		link := filepath.Join(b.StoreDir, "--proj--", "2026-01-01T00-00-00-000Z_"+id+".jsonl")
		must(t, os.MkdirAll(filepath.Dir(link), 0o755))
		must(t, os.Link(victim.file(), link))
		j := b.job(t, link)
		j.Force = true
		r := b.enqueue(t, j)
		after, size2 := treeDigest(t, victim.dir)
		if after != before {
			t.Errorf("%d bytes written to the other store's file", size2-size)
		}
		if ev := r.Event; ev.Outcome != pipeline.OutcomeFailed || !strings.Contains(ev.Reason, j.Path) || !strings.Contains(ev.Reason, "2 hard links") {
			t.Errorf("the job: %s %q; want failed naming %s and its 2 links", ev.Outcome, ev.Reason, j.Path)
		}
		if b.llm.Count() != 0 {
			t.Errorf("%d summary requests for a refused file", b.llm.Count())
		}
	})
	t.Run("made during the summary", func(t *testing.T) {
		t.Parallel()
		b := newLiveBundle(t, -1, nil, true)
		const id = "019a0000-0000-7000-8000-0000000032a3"
		file := b.session(t, "--proj--/2026-01-01T00-00-00-000Z_"+id+".jsonl", id)
		outside := t.TempDir()
		mine, _ := treeDigest(t, b.StoreDir)
		ev := b.duringSummary(t, b.job(t, file), func() {
			must(t, os.Link(file, filepath.Join(outside, "stolen.jsonl")))
		})
		if ev.Outcome != pipeline.OutcomeFailed || !strings.Contains(ev.Reason+ev.Error, file) || !strings.Contains(ev.Reason+ev.Error, "2 hard links") {
			t.Errorf("the job: %s %q (error %q); want failed naming %s and its 2 links", ev.Outcome, ev.Reason, ev.Error, file)
		}
		if now, _ := treeDigest(t, b.StoreDir); now != mine {
			t.Errorf("the file changed")
		}
	})
}

// A job whose path is gone is matched by session id (the file moved while queued). The
// lookup must land on neither a hard link (the issue: it did, and the append went to
// another store's file) nor anything outside the root (a symlinked file or directory).
func TestRedteamSessionIDLookup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, root, victim, base string)
		want  string // in the dead letter's reason
	}{
		{"hard link named for the session", func(t *testing.T, root, victim, base string) {
			must(t, os.MkdirAll(filepath.Join(root, "--elsewhere--"), 0o755))
			must(t, os.Link(victim, filepath.Join(root, "--elsewhere--", base)))
		}, "2 hard links"},
		{"symlink named for the session", func(t *testing.T, root, victim, base string) {
			must(t, os.MkdirAll(filepath.Join(root, "--elsewhere--"), 0o755))
			must(t, os.Symlink(victim, filepath.Join(root, "--elsewhere--", base)))
		}, "no file in the store holds session"},
		{"symlinked directory holding the session", func(t *testing.T, root, victim, base string) {
			must(t, os.Symlink(filepath.Dir(victim), filepath.Join(root, "--elsewhere--")))
		}, "no file in the store holds session"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newLiveBundle(t, -1, nil, true)
			const id = "019a0000-0000-7000-8000-0000000032a4"
			base := "2026-01-01T00-00-00-000Z_" + id + ".jsonl"
			victim := newOutside(t, "--proj--/"+base, id)
			before, size := treeDigest(t, victim.dir)
			tc.plant(t, b.StoreDir, victim.file(), base)
			j := wire.Job{Kind: wire.KindCompact, Store: b.StoreName, Path: "--gone--/" + base, SessionID: id, Reason: "test", Force: true}
			r := b.enqueue(t, j)
			after, size2 := treeDigest(t, victim.dir)
			if after != before {
				t.Errorf("%d bytes written to the other store's file", size2-size)
			}
			if ev := r.Event; ev.Outcome != pipeline.OutcomeFailed || !strings.Contains(ev.Reason, tc.want) || !strings.Contains(ev.Reason, j.Path) {
				t.Errorf("the job: %s %q; want failed naming %s (%s)", ev.Outcome, ev.Reason, j.Path, tc.want)
			}
			if b.llm.Count() != 0 {
				t.Errorf("%d summary requests", b.llm.Count())
			}
		})
	}
}

// The session file is replaced by a rename while its summary is being made (a new inode
// at the same name). The job does not write to the old file, which has no name left, nor
// to the new one it never read: it ends skipped as busy, naming the replacement, and the
// next job plans the new file.
func TestRedteamRenameDuringSummary(t *testing.T) {
	t.Parallel()
	b := newLiveBundle(t, -1, nil, true)
	const id = "019a0000-0000-7000-8000-0000000032a5"
	file := b.session(t, "--proj--/2026-01-01T00-00-00-000Z_"+id+".jsonl", id)
	data, err := os.ReadFile(file)
	must(t, err)
	old, err := os.Open(file) // the file read, after it loses its name
	must(t, err)
	defer old.Close()
	s, err := sessionio.ReadFile(file)
	must(t, err)
	// The new file: the session and one more entry (as a tool that rewrites it would leave it).
	renamed := string(data) + `{"type":"session_info","id":"5e551f0a","parentId":"` + s.LeafID() + `","timestamp":"2026-01-02T00:00:00.000Z","name":"renamed"}` + "\n"
	ev := b.duringSummary(t, b.job(t, file), func() {
		tmp := file + ".tmp"
		must(t, os.WriteFile(tmp, []byte(renamed), 0o644))
		must(t, os.Rename(tmp, file))
	})
	if ev.Outcome != pipeline.OutcomeSkipped || !ev.Busy || !strings.Contains(ev.Reason, "another file") {
		t.Errorf("the job: %s busy=%v %q; want skipped busy, the file replaced", ev.Outcome, ev.Busy, ev.Reason)
	}
	if st, _ := old.Stat(); st.Size() != int64(len(data)) {
		t.Errorf("%d bytes written to the replaced file", st.Size()-int64(len(data)))
	}
	// The new file is the renamed one, or (a job the busy skip's recheck queued may have
	// run already) the renamed one and a compaction planned on it, after its last entry.
	plannedOnNew := func() bool {
		now, _ := os.ReadFile(file)
		rest, ok := strings.CutPrefix(string(now), renamed)
		return ok && (rest == "" || strings.Count(rest, "\n") == 1 && strings.Contains(rest, `"type":"compaction"`) && strings.Contains(rest, `"parentId":"5e551f0a"`))
	}
	if !plannedOnNew() {
		t.Errorf("the new file changed otherwise than by a compaction planned on it")
	}
	// The next job plans the new file, and compacts it (or finds it compacted by the recheck).
	b.llm.SetDefault(fakellm.Behavior{})
	j := b.job(t, file)
	j.Force = true
	if r := b.enqueue(t, j); r.Event.Outcome != pipeline.OutcomeDone && !strings.Contains(r.Event.Reason, "already compacted") {
		t.Errorf("the next job: %+v", r.Event)
	}
	if now, _ := os.ReadFile(file); !strings.HasPrefix(string(now), renamed) || !strings.Contains(string(now)[len(renamed):], `"parentId":"5e551f0a"`) || !plannedOnNew() {
		t.Errorf("the new file is not compacted once, after its own last entry")
	}
}
