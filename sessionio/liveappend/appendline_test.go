package liveappend

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/compactor-dev/compactor/internal/fulldisk"
)

// faultyLine is a real session file whose reservation or write can be made to fail: the
// write puts the first n bytes into the file for real, then runs afterWrite (a Pi line
// landing after the torn bytes) and returns writeErr.
type faultyLine struct {
	osLineFile
	reserveErr error
	n          int // -1: no fault
	writeErr   error
	afterWrite func()
	writes     int
}

func (f *faultyLine) Reserve(off, n int64) error {
	if f.reserveErr != nil {
		return f.reserveErr
	}
	return f.osLineFile.Reserve(off, n)
}

func (f *faultyLine) WriteOnce(b []byte) (int, error) {
	f.writes++
	if f.n < 0 {
		return f.osLineFile.WriteOnce(b)
	}
	n, err := f.osLineFile.WriteOnce(b[:f.n])
	if err != nil {
		return n, err
	}
	if f.afterWrite != nil {
		f.afterWrite()
	}
	return n, f.writeErr
}

// TestAppendLineShortWrite drives appendLine's failure paths through the injected seam:
// a refused reservation writes nothing; a file system without fallocate is written
// unreserved; a short write is taken back when nothing followed it, and left in place,
// with its offset and length in the error, when a Pi line came before or after it.
func TestAppendLineShortWrite(t *testing.T) {
	t.Parallel()
	base := hdr + "\n" + user("a", "", "hi") + "\n" + asst("b", "a", "yo") + "\n"
	line := []byte(`{"type":"compaction","id":"k1","parentId":"b","timestamp":"2026-01-02T03:04:05.678Z","summary":"` + strings.Repeat("s", 400) + `","firstKeptEntryId":"a","tokensBefore":9}` + "\n")
	pi := user("p1", "b", "typed meanwhile") + "\n"
	planned := int64(len(base))
	cases := []struct {
		name string
		f    faultyLine
		// piBefore writes Pi's line in the caller's final check, before the write.
		piBefore, piAfter bool
		want              string // the file after, in terms of base, line[:10] (torn), pi
		wantErr           error
		wantTorn          int64 // the torn bytes' offset; 0: no TornError
		wantWrites        int
	}{
		{name: "whole line", f: faultyLine{n: -1}, want: base + string(line), wantWrites: 1},
		{name: "reservation refused: full disk", f: faultyLine{n: -1, reserveErr: syscall.ENOSPC}, want: base, wantErr: syscall.ENOSPC},
		{name: "reservation refused: quota", f: faultyLine{n: -1, reserveErr: syscall.EDQUOT}, want: base, wantErr: syscall.EDQUOT},
		{name: "no fallocate (EOPNOTSUPP)", f: faultyLine{n: -1, reserveErr: syscall.EOPNOTSUPP}, want: base + string(line), wantWrites: 1},
		{name: "no fallocate (ENOSYS)", f: faultyLine{n: -1, reserveErr: syscall.ENOSYS}, want: base + string(line), wantWrites: 1},
		{name: "nothing written", f: faultyLine{n: 0, writeErr: syscall.EIO}, want: base, wantErr: syscall.EIO, wantWrites: 1},
		{name: "short write, I/O error: taken back", f: faultyLine{n: 10, writeErr: syscall.EIO}, want: base, wantErr: syscall.EIO, wantWrites: 1},
		{name: "short write, no error: taken back", f: faultyLine{n: 10}, want: base, wantErr: io.ErrShortWrite, wantWrites: 1},
		{name: "Pi line after the torn bytes: left, reported", f: faultyLine{n: 10, writeErr: syscall.EIO}, piAfter: true,
			want: base + string(line[:10]) + pi, wantErr: syscall.EIO, wantTorn: planned, wantWrites: 1},
		{name: "Pi line before the torn bytes: left, reported", f: faultyLine{n: 10, writeErr: syscall.EIO}, piBefore: true,
			want: base + pi + string(line[:10]), wantErr: syscall.EIO, wantTorn: planned + int64(len(pi)), wantWrites: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := writeTemp(t, base)
			file, err := os.OpenFile(p, os.O_RDWR|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer file.Close()
			f := tc.f
			f.osLineFile = osLineFile{File: file}
			piWrite := func() {
				if err := appendLikePi(p, strings.TrimSuffix(pi, "\n")); err != nil {
					t.Error(err)
				}
			}
			if tc.piAfter {
				f.afterWrite = piWrite
			}
			var final func() error
			if tc.piBefore {
				final = func() error { piWrite(); return nil }
			}
			err = appendLine(&f, planned, line, final)
			got, _ := os.ReadFile(p)
			if string(got) != tc.want {
				t.Errorf("file after:\n%q\nwant\n%q", got, tc.want)
			}
			if f.writes != tc.wantWrites {
				t.Errorf("%d writes, want %d", f.writes, tc.wantWrites)
			}
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			var torn *TornError
			switch {
			case tc.wantTorn == 0 && errors.As(err, &torn):
				t.Fatalf("reported torn bytes although the file is as it was: %v", err)
			case tc.wantTorn != 0 && !errors.As(err, &torn):
				t.Fatalf("error %v does not report the torn bytes", err)
			case tc.wantTorn != 0:
				if torn.Offset != tc.wantTorn || torn.Len != 10 || !strings.Contains(err.Error(), "offset "+strconv.FormatInt(tc.wantTorn, 10)) {
					t.Fatalf("torn bytes reported at %d (%d bytes), want %d (10): %v", torn.Offset, torn.Len, tc.wantTorn, err)
				}
			}
		})
	}
}

// TestAppendFullDisk fills a real file system (a 1 MiB tmpfs, mounted by the test: root
// only) to its last block under a session and appends to it: a compaction, a branch
// summary, a compaction after a torn tail (the newline it adds is part of the one write),
// and a restore entry (a Pi line landed between the final check and the compaction's
// write; the disk fills before the restore). Each append must fail and leave the file
// byte for byte as it was, although the file's last page had room for part of the line
// (which is what the unreserved write used to leave behind). Then space is freed and Pi
// appends its next line as it does (one write, no lock): it must land intact and be the
// leaf (checked by the real Pi too with COMPACTOR_INTEROP=1, which `make chaos` sets).
//
// Each case runs twice: with the reservation (the append fails before writing: no space
// left on device), and as on a file system without fallocate (the write stops short in
// the last page and its bytes are taken back).
func TestAppendFullDisk(t *testing.T) {
	for _, reserved := range []bool{true, false} {
		name := "reserved"
		if !reserved {
			name = "no fallocate"
		}
		t.Run(name, func(t *testing.T) { testAppendFullDisk(t, reserved) })
	}
}

func testAppendFullDisk(t *testing.T, reserved bool) {
	big := strings.Repeat("The session so far, summarized at length. ", 500) // 21 KB: several pages
	base := hdr + "\n" + user("a", "", "hi") + "\n" + asst("b", "a", "yo") + "\n"
	page := int64(os.Getpagesize())
	interop := os.Getenv("COMPACTOR_INTEROP") == "1"

	// onFullDisk writes content at p (on a fresh tmpfs), runs doAppend, which fills the
	// disk and must then fail without changing the file, frees the space and appends Pi's
	// next line under piParent ("": none).
	type setup func(t *testing.T, p string, fill func()) error
	onFullDisk := func(t *testing.T, p, content string, piParent string, doAppend setup) {
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if !reserved {
			testLineFiles.Store(p, func(f *os.File) lineFile { return osLineFile{File: f, noReserve: true} })
			defer testLineFiles.Delete(p)
		}
		var before []byte
		var free func()
		fill := func() {
			free = fulldisk.Fill(t, filepath.Dir(p))
			var err error
			if before, err = os.ReadFile(p); err != nil {
				t.Fatal(err)
			}
		}
		err := doAppend(t, p, fill)
		if free == nil {
			t.Fatal("the disk was never filled")
		}
		want, says := error(syscall.ENOSPC), "(nothing written)"
		if !reserved {
			want, says = io.ErrShortWrite, "taken back: the file is as it was"
		}
		if !errors.Is(err, want) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), says) {
			t.Fatalf("append on a full disk: %v; want %v, naming the file, saying %q", err, want, says)
		}
		after, _ := os.ReadFile(p)
		if !bytes.Equal(after, before) {
			added := after[min(len(before), len(after)):]
			t.Fatalf("the failed append changed the file: %d bytes before, %d after; added %q...", len(before), len(after), added[:min(len(added), 100)])
		}
		free()
		if piParent == "" {
			return
		}
		line := user("pnext", piParent, "the next prompt")
		if err := appendLikePi(p, line); err != nil {
			t.Fatal(err)
		}
		after, _ = os.ReadFile(p)
		if want := string(before) + line + "\n"; string(after) != want {
			t.Fatalf("after Pi's next line the file is not the file before plus that line (%d bytes, want %d)", len(after), len(want))
		}
		s, err := sessionio.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if s.LeafID() != "pnext" {
			t.Fatalf("leaf %s, want Pi's new entry", s.LeafID())
		}
		if interop {
			if pi := piContext(t, p); pi.LeafID != "pnext" {
				t.Fatalf("the real Pi's leaf is %s, want its new entry pnext", pi.LeafID)
			}
		}
	}

	t.Run("compaction", func(t *testing.T) {
		onFullDisk(t, onTmpfs(t), base, "b", func(t *testing.T, p string, fill func()) error {
			s, _ := sessionio.ReadFile(p)
			fill()
			_, err := Compaction(ctxb, sessionio.Named(p), ExpectOf(s), NewCompaction{Summary: big, FirstKeptEntryID: "a", TokensBefore: 5})
			return err
		})
	})
	t.Run("branch summary", func(t *testing.T) {
		onFullDisk(t, onTmpfs(t), base, "b", func(t *testing.T, p string, fill func()) error {
			s, _ := sessionio.ReadFile(p)
			fill()
			_, err := BranchSummary(ctxb, sessionio.Named(p), ExpectOf(s), NewBranchSummary{ParentID: "a", Summary: big})
			return err
		})
	})
	t.Run("compaction after a torn tail", func(t *testing.T) {
		// Pi's next line would be glued to its own torn tail: only the file is checked.
		onFullDisk(t, onTmpfs(t), base+`{"type":"message","id":"tor`, "", func(t *testing.T, p string, fill func()) error {
			s, _ := sessionio.ReadFile(p)
			fill()
			_, err := Compaction(ctxb, sessionio.Named(p), ExpectOf(s), NewCompaction{Summary: big, FirstKeptEntryID: "a", TokensBefore: 5})
			return err
		})
	})
	t.Run("restore entry", func(t *testing.T) {
		// The compaction line's length, from the same append on a scratch copy (ids and
		// times are fixed-width in tests).
		scratch := writeTemp(t, base)
		s0, _ := sessionio.ReadFile(scratch)
		ap0, err := Compaction(ctxb, sessionio.Named(scratch), ExpectOf(s0), NewCompaction{Summary: "S", FirstKeptEntryID: "a", TokensBefore: 5})
		if err != nil {
			t.Fatal(err)
		}
		ours := int64(len(ap0.Line) + 1)
		const slack = 60 // room left in the last page for the restore line (~170 bytes)
		p := onTmpfs(t)
		onFullDisk(t, p, base, "p1", func(t *testing.T, p string, fill func()) error {
			s, _ := sessionio.ReadFile(p)
			testHooks.Store(p, func(point string) {
				switch point {
				case "write": // Pi's line, sized so that ours then ends slack bytes short of a page
					short := int64(len(user("p1", "b", "")) + 1)
					n := ((page-slack-int64(len(base))-ours-short)%page + page) % page
					if err := appendLikePi(p, user("p1", "b", strings.Repeat("x", int(n)))); err != nil {
						t.Error(err)
					}
				case "restore":
					if st, err := os.Stat(p); err != nil || page-st.Size()%page != slack {
						t.Errorf("the last page has %d bytes of room, want %d (%v)", page-st.Size()%page, slack, err)
					}
					fill()
				}
			})
			defer testHooks.Delete(p)
			_, err := Compaction(ctxb, sessionio.Named(p), ExpectOf(s), NewCompaction{Summary: "S", FirstKeptEntryID: "a", TokensBefore: 5})
			if err != nil && !strings.Contains(err.Error(), "restore entry") {
				t.Errorf("the error does not say the restore entry failed: %v", err)
			}
			return err
		})
		// Every entry Pi wrote is on the path it loads; the compaction is a side branch.
		checkPiEntriesOnPath(t, p, []string{"a", "b", "p1", "pnext"})
	})
}

// onTmpfs is the path of a session file on a fresh 1 MiB tmpfs.
func onTmpfs(t *testing.T) string {
	return filepath.Join(fulldisk.Mount(t, 1<<20), "s.jsonl")
}

// noSync is a lineFile whose fsync does nothing: the benchmark's view of what the
// reservation costs the file system without the flush that dominates an append.
type noSync struct{ osLineFile }

func (noSync) Sync() error { return nil }

// BenchmarkAppendLine measures what the reservation costs: appendLine (reserve, one write,
// fsync) of a restore-sized and a compaction-sized line, with the reservation and without
// it (the baseline: the write alone), on the test's temporary directory (the disk), on the
// disk without the fsync, and on a tmpfs (no I/O: the system calls alone). The file is
// emptied every 1,000 lines, outside the timer.
func BenchmarkAppendLine(b *testing.B) {
	type target struct {
		name, dir string
		sync      bool
	}
	dirs := []target{{"disk", b.TempDir(), true}, {"disk-nofsync", b.TempDir(), false}}
	if os.Geteuid() == 0 {
		dirs = append(dirs, target{"tmpfs", fulldisk.Mount(b, 64<<20), true})
	}
	for _, d := range dirs {
		for _, size := range []int{200, 16 << 10} {
			line := append(bytes.Repeat([]byte("x"), size-1), '\n')
			for _, reserved := range []bool{false, true} {
				name := d.name + "/" + strconv.Itoa(size) + "B/write-only"
				if reserved {
					name = d.name + "/" + strconv.Itoa(size) + "B/reserved"
				}
				b.Run(name, func(b *testing.B) {
					f, err := os.OpenFile(filepath.Join(d.dir, "bench.jsonl"), os.O_CREATE|os.O_TRUNC|os.O_RDWR|os.O_APPEND, 0o644)
					if err != nil {
						b.Fatal(err)
					}
					defer f.Close()
					var lf lineFile = osLineFile{File: f, noReserve: !reserved}
					if !d.sync {
						lf = noSync{osLineFile{File: f, noReserve: !reserved}}
					}
					var size int64
					b.SetBytes(int64(len(line)))
					for i := 0; b.Loop(); i++ {
						if i%1000 == 999 {
							b.StopTimer()
							if err := f.Truncate(0); err != nil {
								b.Fatal(err)
							}
							size = 0
							b.StartTimer()
						}
						if err := appendLine(lf, size, line, nil); err != nil {
							b.Fatal(err)
						}
						size += int64(len(line))
					}
				})
			}
		}
	}
}

// BenchmarkAppendCompaction is the whole append (lock, read and check the file, encode,
// reserve, write, fsync, verify where the line landed) of a compaction with an 8 KB summary
// to an 80 KB session on the disk, with the reservation and without it (the baseline, as
// on a file system without fallocate). Before each append, outside the timer, a user and
// an assistant line are appended as Pi does, so the leaf is not a compaction; the file is
// reset every 200 appends.
func BenchmarkAppendCompaction(b *testing.B) {
	src, err := os.ReadFile("../../testdata/corpus/02-tools-parallel-errors-images.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	s0, err := sessionio.Parse(src, "src")
	if err != nil {
		b.Fatal(err)
	}
	first := ""
	for _, e := range s0.Entries {
		if e.IsMessage(sessionio.RoleUser) {
			first = e.ID
			break
		}
	}
	summary := strings.Repeat("The session so far. ", 400)
	for _, reserved := range []bool{false, true} {
		name := "write-only"
		if reserved {
			name = "reserved"
		}
		b.Run(name, func(b *testing.B) {
			p := filepath.Join(b.TempDir(), "s.jsonl")
			if !reserved {
				testLineFiles.Store(p, func(f *os.File) lineFile { return osLineFile{File: f, noReserve: true} })
				defer testLineFiles.Delete(p)
			}
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				if i%200 == 0 {
					if err := os.WriteFile(p, src, 0o644); err != nil {
						b.Fatal(err)
					}
				}
				s, err := sessionio.ReadFileWith(p, sessionio.Options{Light: true})
				if err != nil {
					b.Fatal(err)
				}
				u, a := fmt.Sprintf("u%07x", i), fmt.Sprintf("a%07x", i)
				if err := appendLikePi(p, user(u, s.LeafID(), "more")+"\n"+asst(a, u, "done")); err != nil {
					b.Fatal(err)
				}
				if s, err = sessionio.ReadFileWith(p, sessionio.Options{Light: true}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if _, err := Compaction(ctxb, sessionio.Named(p), ExpectOf(s), NewCompaction{Summary: summary, FirstKeptEntryID: first, TokensBefore: 9}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
