package sessionio_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/compactor-dev/compactor/sessionio"
)

// contextNeed and contextOpts are what compactor context reads with: the read that writes
// checkpoints.
const contextNeed = sessionio.NeedContext | sessionio.NeedRoot | sessionio.NeedFile

var contextOpts = sessionio.TailOptions{LeaveMessagesOnDisk: true}

// tailChecked is how far before a checkpoint's end every byte is checked (internal/checkpoint: TailHashLen).
const tailChecked = 4096

// TestCheckpointMatchesFullRead: a session read whole at an earlier size writes a checkpoint
// (at any byte the file had then: torn lines included), and then reads of the grown file,
// with every need and block size, through that checkpoint, equal the full read of the grown
// file; so do reads through a checkpoint written from another checkpoint (two earlier
// sizes). Generated trees as TestTailMatchesFullRead's: branches, branch summaries, labels,
// names, repeated compactions, duplicate ids, orphans, cycles, malformed and torn lines.
func TestCheckpointMatchesFullRead(t *testing.T) {
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "rapid.checks" })
	if !explicit {
		if err := flag.Set("rapid.checks", fmt.Sprint(*tailChecks)); err != nil {
			t.Fatal(err)
		}
	}
	var runs, written, used, chained, rejected int
	reasons := map[string]int{}
	rapid.Check(t, func(rt *rapid.T) {
		data := genTree(rt)
		f := readFull(data)
		first := rapid.IntRange(1, 2048).Draw(rt, "block")
		sz := sizes{first, rapid.IntRange(first, 8192).Draw(rt, "maxBlock"), rapid.SampledFrom([]int{0, 1, 16, 200, 3000}).Draw(rt, "batch"), rapid.IntRange(1, 3).Draw(rt, "workers")}
		// Checkpoints where the policy puts them (the context's first entry) or, to reach
		// the history for the context too, at an earlier entry.
		ck := &sessionio.MemCheckpoint{Anywhere: rapid.Uint64().Draw(rt, "anywhere") % 3}
		// One or two earlier sizes of the file, each read whole with the checkpoint so far.
		cut1 := rapid.IntRange(len(data)/3, len(data)).Draw(rt, "cut1")
		cuts := []int{cut1}
		if rapid.Bool().Draw(rt, "twice") {
			cuts = append(cuts, rapid.IntRange(cut1, len(data)).Draw(rt, "cut2"))
		}
		for i, c := range cuts {
			before := ck.Data
			tl, err := sessionio.ParseTailCheckpointed(data[:c], "f.jsonl", contextNeed, contextOpts, ck, 1, sz.block, sz.maxBlock, sz.batch, sz.workers)
			if err == nil && i == 1 && tl.CheckpointAt > 0 && !bytes.Equal(before, ck.Data) {
				chained++
			}
		}
		if ck.Data == nil {
			runs++
			return
		}
		written++
		for _, rd := range reads {
			checkTailWith(func(format string, args ...any) {
				rt.Fatalf("%s (sizes %v, earlier sizes %v)\n--- file:\n%s", fmt.Sprintf(format, args...), sz, cuts, data)
			}, data, f, rd, sz, true, ck)
		}
		if tl, err := sessionio.ParseTailCheckpointed(data, "f.jsonl", contextNeed, contextOpts, &sessionio.MemCheckpoint{Data: ck.Data}, 1, sz.block, sz.maxBlock, sz.batch, sz.workers); err == nil {
			if tl.CheckpointAt > 0 {
				used++
			} else if strings.HasPrefix(tl.CheckpointNote, "not used") {
				rejected++
				switch {
				case strings.Contains(tl.CheckpointNote, "reuses an id"):
					reasons["a new line reuses an id of the history"]++
				case strings.Contains(tl.CheckpointNote, "missing from the history"):
					reasons["a parent missing from the history was appended"]++
				default:
					reasons[tl.CheckpointNote]++
				}
			} else {
				reasons["not used, no reason: "+tl.CheckpointNote]++
			}
		}
		runs++
	})
	t.Logf("rejected: %v", reasons)
	t.Logf("%d sessions: %d checkpoints written, %d used by the grown file's context read (%d rejected by its new lines), %d written from a checkpoint",
		runs, written, used, rejected, chained)
	if runs >= 100 && (written < runs/5 || used < written/3 || chained < runs/50) {
		t.Errorf("generator coverage: %d runs, %d written, %d used, %d chained", runs, written, used, chained)
	}
}

// TestCheckpointRejected: a checkpoint is not used for a file whose history changed, that
// is shorter, or another file; and a damaged checkpoint is ignored.
func TestCheckpointRejected(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../testdata/corpus/08-large.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	ck := &sessionio.MemCheckpoint{}
	if _, err := sessionio.ParseTailCheckpointed(data, "f.jsonl", contextNeed, contextOpts, ck, 1, 64<<10, 512<<10, 1<<20, 2); err != nil {
		t.Fatal(err)
	}
	if ck.Data == nil {
		t.Fatal("no checkpoint written for 08-large")
	}
	read := func(d []byte, c []byte) *sessionio.Tail {
		t.Helper()
		tl, err := sessionio.ParseTailCheckpointed(d, "f.jsonl", contextNeed, contextOpts, &sessionio.MemCheckpoint{Data: c}, 1<<40, 64<<10, 512<<10, 1<<20, 2)
		if err != nil {
			t.Fatal(err)
		}
		return tl
	}
	if tl := read(data, ck.Data); tl.CheckpointAt == 0 {
		t.Fatalf("the checkpoint was not used on the same bytes: %s", tl.CheckpointNote)
	}
	want := readFull(data)
	// A byte changed in place: in the header (its id), and in the last 4 KiB before the
	// checkpoint. Both are still valid JSON.
	at := read(data, ck.Data).CheckpointAt
	idAt := bytes.Index(data, []byte(`"id":"`)) + len(`"id":"`)
	lastE := bytes.LastIndexByte(data[:at-2], 'e')
	if lastE < int(at)-tailChecked {
		t.Fatalf("no 'e' in the last 4 KiB before %d", at)
	}
	for _, i := range []int{idAt, lastE} {
		changed := bytes.Clone(data)
		changed[i] ^= 0x20 // the letter's case, or a digit to another character
		if changed[i] == '"' || changed[i] == '\\' || changed[i] < 0x20 {
			changed[i] = 'q'
		}
		if tl := read(changed, ck.Data); tl.CheckpointAt != 0 {
			t.Errorf("byte %d changed: the checkpoint was used", i)
		}
	}
	// Shorter than the checkpoint.
	if tl := read(data[:at-1], ck.Data); tl.CheckpointAt != 0 {
		t.Errorf("a file shorter than the checkpoint used it")
	}
	// Damaged: every byte flipped in turn would take long; flip a few.
	for _, i := range []int{0, 9, len(ck.Data) / 2, len(ck.Data) - 1} {
		bad := bytes.Clone(ck.Data)
		bad[i] ^= 0x40
		if tl := read(data, bad); tl.CheckpointAt != 0 {
			t.Errorf("a checkpoint damaged at byte %d was used", i)
		}
	}
	// A line appended that reuses an id of the history: not used, and the result is the
	// full read's.
	s := want.light
	old := s.Entries[1]
	dup := bytes.Clone(data)
	line := fmt.Sprintf(`{"type":"label","id":%q,"parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","targetId":%q,"label":"x"}`+"\n", old.ID, s.LeafID())
	dup = append(dup, line...)
	tl := read(dup, ck.Data)
	if tl.CheckpointAt != 0 {
		t.Fatalf("a line reusing history id %s: the checkpoint was used", old.ID)
	}
	full := readFull(dup)
	if tl.EntryCount != len(full.light.Entries) || !reflect.DeepEqual(tl.Diagnostics, full.light.Diagnostics) {
		t.Errorf("after the rejected checkpoint: %d entries %v, full %d %v", tl.EntryCount, tl.Diagnostics, len(full.light.Entries), full.light.Diagnostics)
	}
}

// TestReadTailWithCheckpointDir: ReadTailWith writes a checkpoint file, uses it on the next
// read (same result as without), does not use it for another file at the same path.
func TestReadTailWithCheckpointDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data, err := os.ReadFile("../testdata/corpus/08-large.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "s.jsonl")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	o := contextOpts
	o.Checkpoints = &sessionio.Checkpoints{Dir: filepath.Join(dir, "ck"), MinGain: 1}
	t1, err := sessionio.ReadTailWith(file, contextNeed, o)
	if err != nil {
		t.Fatal(err)
	}
	if t1.CheckpointNote != "written" || t1.CheckpointAt != 0 {
		t.Fatalf("first read: note %q at %d", t1.CheckpointNote, t1.CheckpointAt)
	}
	// Pi appends a line.
	fh, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(fh, `{"type":"session_info","id":"zz000001","parentId":%q,"timestamp":"2026-01-01T00:00:00.000Z","name":"grown"}`+"\n", t1.LeafID)
	fh.Close()
	t2, err := sessionio.ReadTailWith(file, contextNeed, o)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := sessionio.ReadTailWith(file, contextNeed, contextOpts)
	if err != nil {
		t.Fatal(err)
	}
	if t2.CheckpointAt == 0 {
		t.Fatalf("second read did not use the checkpoint: %s", t2.CheckpointNote)
	}
	if t2.ReadFrom < t2.CheckpointAt/2 {
		t.Errorf("second read read from %d (checkpoint at %d)", t2.ReadFrom, t2.CheckpointAt)
	}
	ids := func(tl *sessionio.Tail) []string {
		var out []string
		for _, e := range tl.Path {
			out = append(out, e.ID)
		}
		return out
	}
	if !reflect.DeepEqual(ids(t2), ids(plain)) || t2.EntryCount != plain.EntryCount || t2.Name != "grown" ||
		!reflect.DeepEqual(t2.Labels, plain.Labels) || !reflect.DeepEqual(t2.Diagnostics, plain.Diagnostics) {
		t.Fatalf("with the checkpoint: %d path entries, %d entries, name %q; without: %d, %d, %q",
			len(t2.Path), t2.EntryCount, t2.Name, len(plain.Path), plain.EntryCount, plain.Name)
	}
	// Another session written at the same path (its inode may be the old one's again):
	// not used.
	other, err := os.ReadFile("../testdata/corpus/05-compactions.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, other, 0o644); err != nil {
		t.Fatal(err)
	}
	t3, err := sessionio.ReadTailWith(file, contextNeed, o)
	if err != nil {
		t.Fatal(err)
	}
	if t3.CheckpointAt != 0 {
		t.Errorf("a new file at the same path used the old one's checkpoint")
	}
}

// FuzzCheckpoint: a checkpoint damaged anywhere, with a checksum that matches (a bug or a
// tool that wrote it), makes a read fail or fall back, never panic or loop.
func FuzzCheckpoint(f *testing.F) {
	data, err := os.ReadFile("../testdata/corpus/05-compactions.jsonl")
	if err != nil {
		f.Fatal(err)
	}
	var ck *sessionio.MemCheckpoint
	for cut := len(data); ck == nil || ck.Data == nil; cut = bytes.LastIndexByte(data[:cut-1], '\n') + 1 {
		if cut <= 1 {
			f.Fatal("no checkpoint to start from")
		}
		ck = &sessionio.MemCheckpoint{Anywhere: 2} // half way: the context reaches into the history
		if _, err := sessionio.ParseTailCheckpointed(data[:cut], "f.jsonl", contextNeed, contextOpts, ck, 1, 4096, 65536, 0, 1); err != nil {
			f.Fatal(err)
		}
	}
	f.Add(ck.Data, uint32(0), byte(0))
	f.Fuzz(func(t *testing.T, seed []byte, at uint32, x byte) {
		b := bytes.Clone(seed)
		if len(b) > 12 {
			b[12+int(at)%(len(b)-12)] ^= x
		}
		sessionio.SealCheckpoint(b)
		for _, rd := range []tailRead{{contextNeed, contextOpts}, {sessionio.NeedContext | sessionio.NeedRoot, sessionio.TailOptions{}}} {
			_, _ = sessionio.ParseTailCheckpointed(data, "f.jsonl", rd.need, rd.o, &sessionio.MemCheckpoint{Data: b}, 1, 4096, 65536, 0, 1)
		}
	})
}
