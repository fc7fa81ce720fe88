package liveappend

import (
	"errors"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// confineModes runs f under each confinement this machine has (openat2 where the kernel
// has it, os.Root always), restoring the process's mode after. The tests that use it do not
// run in parallel: the mode is the process's.
func confineModes(t *testing.T, f func(t *testing.T, m sessionio.ConfineMode)) {
	t.Helper()
	probed, why := sessionio.Confinement()
	modes := []sessionio.ConfineMode{sessionio.ConfineRoot}
	if probed == sessionio.ConfineOpenat2 {
		modes = append([]sessionio.ConfineMode{sessionio.ConfineOpenat2}, modes...)
	} else {
		t.Logf("openat2 not tested here: %s", why)
	}
	for _, m := range modes {
		t.Run(map[sessionio.ConfineMode]string{sessionio.ConfineOpenat2: "openat2", sessionio.ConfineRoot: "os.Root"}[m], func(t *testing.T) {
			old, err := sessionio.SetConfinement(m)
			if err != nil {
				t.Fatal(err)
			}
			defer sessionio.SetConfinement(old) //nolint:errcheck // the mode the process had
			f(t, m)
		})
	}
}

// store is a store's root with one session at rel, and a directory outside it holding
// another store's session under the same relative name.
type fixtureStore struct {
	root, outside, rel string
	content            string
}

func newFixtureStore(t *testing.T) fixtureStore {
	t.Helper()
	root, _ := filepath.EvalSymlinks(t.TempDir())
	outside, _ := filepath.EvalSymlinks(t.TempDir())
	fs := fixtureStore{root: root, outside: outside, rel: "proj/s.jsonl",
		content: hdr + "\n" + user("a", "", "hi") + "\n" + asst("b", "a", "yo") + "\n"}
	for _, dir := range []string{root, outside} {
		writeFile(t, filepath.Join(dir, fs.rel), fs.content)
	}
	return fs
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (fs fixtureStore) in(rel string) string { return filepath.Join(fs.root, filepath.FromSlash(rel)) }
func (fs fixtureStore) out(rel string) string {
	return filepath.Join(fs.outside, filepath.FromSlash(rel))
}

// checkOutsideUntouched fails if the session outside the root changed.
func (fs fixtureStore) checkOutsideUntouched(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(fs.out(fs.rel))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != fs.content {
		t.Fatalf("%d bytes written outside the store's root (%s)", len(b)-len(fs.content), fs.out(fs.rel))
	}
}

func compaction() NewCompaction {
	return NewCompaction{Summary: "S", FirstKeptEntryID: "a", TokensBefore: 5}
}

// TestRedteamBeneathRefuses: what a store's agent can put on a job's path before the job
// opens it. Each case is refused with ErrUnsafeFile naming the file, nothing is written
// inside or outside the root, and no open hangs.
func TestRedteamBeneathRefuses(t *testing.T) {
	confineModes(t, func(t *testing.T, m sessionio.ConfineMode) {
		cases := []struct {
			name  string
			setup func(t *testing.T, fs fixtureStore) string // the job's path
			want  string
		}{
			{"directory symlinked out of the root", func(t *testing.T, fs fixtureStore) string {
				must(t, os.Symlink(fs.out("proj"), fs.in("link")))
				return "link/s.jsonl"
			}, "out of the store's root|symlink"},
			{"file symlinked out of the root", func(t *testing.T, fs fixtureStore) string {
				must(t, os.Symlink(fs.out(fs.rel), fs.in("proj/out.jsonl")))
				return "proj/out.jsonl"
			}, "out of the store's root|symlink"},
			{"dot-dot out of the root", func(t *testing.T, fs fixtureStore) string {
				r, _ := filepath.Rel(fs.root, fs.out(fs.rel))
				return r
			}, "out of the store's root"},
			{"hard link to another store's file", func(t *testing.T, fs fixtureStore) string {
				must(t, os.Link(fs.out(fs.rel), fs.in("proj/hl.jsonl")))
				return "proj/hl.jsonl"
			}, "2 hard links"},
			{"hard link to a file of the store", func(t *testing.T, fs fixtureStore) string {
				must(t, os.Link(fs.in(fs.rel), fs.in("proj/alias.jsonl")))
				return fs.rel
			}, "2 hard links"},
			{"FIFO", func(t *testing.T, fs fixtureStore) string {
				must(t, syscall.Mkfifo(fs.in("proj/fifo.jsonl"), 0o644))
				return "proj/fifo.jsonl"
			}, "not a regular file"},
			{"directory", func(t *testing.T, fs fixtureStore) string { return "proj" }, "not a regular file"},
		}
		if m == sessionio.ConfineOpenat2 {
			cases = append(cases, struct {
				name  string
				setup func(t *testing.T, fs fixtureStore) string
				want  string
			}{"symlink inside the root (openat2 follows none)", func(t *testing.T, fs fixtureStore) string {
				must(t, os.Symlink("s.jsonl", fs.in("proj/alias.jsonl")))
				return "proj/alias.jsonl"
			}, "symlink"})
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				fs := newFixtureStore(t)
				rel := tc.setup(t, fs)
				f := sessionio.Beneath(fs.root, rel)
				for what, err := range map[string]error{
					"read":     func() error { _, err := f.Read(sessionio.Options{}); return err }(),
					"tail":     func() error { _, err := f.ReadTail(sessionio.NeedContext, sessionio.TailOptions{}); return err }(),
					"stat":     func() error { _, err := f.Stat(); return err }(),
					"writable": f.CheckWritable(),
					"append": func() error {
						_, err := Compaction(ctxb, f, Expect{Size: int64(len(fs.content)), LeafID: "b"}, compaction())
						return err
					}(),
				} {
					if !errors.Is(err, sessionio.ErrUnsafeFile) || !matchesAny(err.Error(), tc.want) || !strings.Contains(err.Error(), f.Name()) {
						t.Errorf("%s: %v; want ErrUnsafeFile (%s) naming %s", what, err, tc.want, f.Name())
					}
				}
				fs.checkOutsideUntouched(t)
				if b, _ := os.ReadFile(fs.in(fs.rel)); string(b) != fs.content {
					t.Errorf("the store's own file changed")
				}
			})
		}
	})
}

func matchesAny(s, alternatives string) bool {
	for _, a := range strings.Split(alternatives, "|") {
		if strings.Contains(s, a) {
			return true
		}
	}
	return false
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestRedteamBeneathAfterTheRead: the file is read (and pinned), then the agent changes
// what its path leads to before the append. The append refuses, writes 0 bytes inside or
// outside the root, and names the file; a symlink swapped in is unsafe (openat2 refuses
// it; os.Root refuses it when it leads out, and finds another file when it stays in).
func TestRedteamBeneathAfterTheRead(t *testing.T) {
	confineModes(t, func(t *testing.T, m sessionio.ConfineMode) {
		cases := []struct {
			name   string
			change func(t *testing.T, fs fixtureStore)
			unsafe bool // ErrUnsafeFile; else ErrReplaced (and ErrChanged)
		}{
			{"directory swapped for a symlink out of the root", func(t *testing.T, fs fixtureStore) {
				must(t, os.Rename(fs.in("proj"), fs.in("proj-old")))
				must(t, os.Symlink(fs.out("proj"), fs.in("proj")))
			}, true},
			{"file swapped for a symlink out of the root", func(t *testing.T, fs fixtureStore) {
				must(t, os.Remove(fs.in(fs.rel)))
				must(t, os.Symlink(fs.out(fs.rel), fs.in(fs.rel)))
			}, true},
			{"directory swapped for a symlink to a copy inside the root", func(t *testing.T, fs fixtureStore) {
				writeFile(t, fs.in("copy/s.jsonl"), fs.content)
				must(t, os.Rename(fs.in("proj"), fs.in("proj-old")))
				must(t, os.Symlink("copy", fs.in("proj")))
			}, m == sessionio.ConfineOpenat2},
			{"hard link made to the file", func(t *testing.T, fs fixtureStore) {
				must(t, os.Link(fs.in(fs.rel), fs.out("proj/hl.jsonl")))
			}, true},
			{"file replaced by a rename", func(t *testing.T, fs fixtureStore) {
				writeFile(t, fs.in("proj/new.tmp"), fs.content)
				must(t, os.Rename(fs.in("proj/new.tmp"), fs.in(fs.rel)))
			}, false},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				fs := newFixtureStore(t)
				f := sessionio.Beneath(fs.root, fs.rel)
				s, err := f.Read(sessionio.Options{})
				must(t, err)
				tc.change(t, fs)
				before := snapshot(t, fs.root)
				_, err = Compaction(ctxb, f, ExpectOf(s), compaction())
				if tc.unsafe && !errors.Is(err, sessionio.ErrUnsafeFile) || !tc.unsafe && (!errors.Is(err, sessionio.ErrReplaced) || !errors.Is(err, ErrChanged)) {
					t.Fatalf("append: %v; want unsafe=%v", err, tc.unsafe)
				}
				if !strings.Contains(err.Error(), f.Name()) {
					t.Errorf("the error does not name the file %s: %v", f.Name(), err)
				}
				fs.checkOutsideUntouched(t)
				if after := snapshot(t, fs.root); after != before {
					t.Errorf("the store changed:\n%s\nwas\n%s", after, before)
				}
			})
		}
	})
}

// snapshot is every regular file under dir with its content's length (symlinks not followed).
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s: %d bytes\n%s", p, len(data), data)
		return nil
	})
	must(t, err)
	return b.String()
}

// TestRedteamBeneathAtTheFinalCheck: the change comes after the append opened and read the
// file, in the instant before its final check (the "check" hook): one fstat of the
// descriptor sees it. A rename over the file leaves the descriptor's file with no name; a
// hard link gives it two. Nothing is written to either file.
func TestRedteamBeneathAtTheFinalCheck(t *testing.T) {
	confineModes(t, func(t *testing.T, m sessionio.ConfineMode) {
		for _, tc := range []struct {
			name   string
			change func(fs fixtureStore) error
			want   error
		}{
			{"renamed over", func(fs fixtureStore) error {
				writeFile(t, fs.in("proj/new.tmp"), fs.content)
				return os.Rename(fs.in("proj/new.tmp"), fs.in(fs.rel))
			}, sessionio.ErrReplaced},
			{"hard-linked", func(fs fixtureStore) error { return os.Link(fs.in(fs.rel), fs.out("proj/hl.jsonl")) }, sessionio.ErrUnsafeFile},
		} {
			t.Run(tc.name, func(t *testing.T) {
				fs := newFixtureStore(t)
				f := sessionio.Beneath(fs.root, fs.rel)
				s, err := f.Read(sessionio.Options{})
				must(t, err)
				old, err := os.Open(fs.in(fs.rel)) // the file read, whatever its name becomes
				must(t, err)
				defer old.Close()
				testHooks.Store(f.Name(), func(point string) {
					if point == "check" {
						must(t, tc.change(fs))
					}
				})
				defer testHooks.Delete(f.Name())
				_, err = Compaction(ctxb, f, ExpectOf(s), compaction())
				if !errors.Is(err, tc.want) {
					t.Fatalf("append: %v; want %v", err, tc.want)
				}
				if st, _ := old.Stat(); st.Size() != int64(len(fs.content)) {
					t.Errorf("the file read grew to %d bytes", st.Size())
				}
				if b, _ := os.ReadFile(fs.in(fs.rel)); string(b) != fs.content {
					t.Errorf("the file now at the path changed")
				}
				fs.checkOutsideUntouched(t)
			})
		}
	})
}

// A rename over the file in the instant between the final check and the write cannot be
// stopped; the line goes to the file read, which has no name left. The append says so
// instead of reporting an entry the session does not hold.
func TestRedteamRenameBetweenCheckAndWrite(t *testing.T) {
	t.Parallel()
	fs := newFixtureStore(t)
	f := sessionio.Beneath(fs.root, fs.rel)
	s, err := f.Read(sessionio.Options{})
	must(t, err)
	testHooks.Store(f.Name(), func(point string) {
		if point == "write" {
			writeFile(t, fs.in("proj/new.tmp"), fs.content)
			must(t, os.Rename(fs.in("proj/new.tmp"), fs.in(fs.rel)))
		}
	})
	defer testHooks.Delete(f.Name())
	_, err = Compaction(ctxb, f, ExpectOf(s), compaction())
	if !errors.Is(err, sessionio.ErrReplaced) || !strings.Contains(err.Error(), "no name left") {
		t.Fatalf("append: %v; want the entry reported as written to a file with no name left", err)
	}
	if b, _ := os.ReadFile(fs.in(fs.rel)); string(b) != fs.content {
		t.Errorf("the file now at the path changed")
	}
}

// A plain session beneath its root: read, then appended to through the same File; a
// symlinked directory that stays inside the root is what the job's resolution resolves
// before the File is made (pipeline), so the File itself names no symlink.
func TestBeneathAppends(t *testing.T) {
	confineModes(t, func(t *testing.T, m sessionio.ConfineMode) {
		fs := newFixtureStore(t)
		f := sessionio.Beneath(fs.root, fs.rel)
		s, err := f.Read(sessionio.Options{})
		must(t, err)
		must(t, f.CheckWritable())
		ap, err := Compaction(ctxb, f, ExpectOf(s), compaction())
		if err != nil || ap.Superseded() {
			t.Fatalf("append: %v %+v", err, ap)
		}
		s2, err := sessionio.ReadFile(fs.in(fs.rel))
		if err != nil || s2.LeafID() != ap.ID {
			t.Fatalf("read back: %v, leaf %s want %s", err, s2.LeafID(), ap.ID)
		}
		fs.checkOutsideUntouched(t)
	})
}
