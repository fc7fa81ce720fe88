package sessionio_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio/picontext"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/tokenize"
)

// tailChecks is the number of generated sessions TestTailMatchesFullRead checks: 300 in
// `make test`, 10,000 or more in `make proptest` (-tail.checks).
var tailChecks = flag.Int("tail.checks", 300, "generated sessions for TestTailMatchesFullRead")

// tailRead is one way to read a tail: what to establish, and how to keep what is read.
type tailRead struct {
	need sessionio.Need
	o    sessionio.TailOptions
}

var (
	content   = sessionio.TailOptions{DecodeContent: true}
	onDisk    = sessionio.TailOptions{LeaveMessagesOnDisk: true}
	onDiskDec = sessionio.TailOptions{LeaveMessagesOnDisk: true, DecodeContent: true}
	planLater = sessionio.TailOptions{LeaveMessagesOnDisk: true, DecodeContent: true, FileLater: true}
)

// reads are the combinations the commands use, and a few more.
var reads = []tailRead{
	{0, sessionio.TailOptions{}},
	{sessionio.NeedModel, sessionio.TailOptions{}},
	{sessionio.NeedMessages | sessionio.NeedModel, sessionio.TailOptions{}}, // engine Assess
	{sessionio.NeedMessages | sessionio.NeedModel, content},                 // planning a compaction
	{sessionio.NeedContext, sessionio.TailOptions{}},                        // the context alone
	{sessionio.NeedContext | sessionio.NeedRoot, content},                   // compactor plan
	{contextNeed, sessionio.TailOptions{}},                                  // compactor context
	{contextNeed, onDisk},
	{sessionio.NeedMessages | sessionio.NeedModel, onDiskDec}, // decoded as read
	{contextNeed, onDiskDec},
	{sessionio.NeedContext | sessionio.NeedFile, content},                  // everything
	{sessionio.NeedThinking | sessionio.NeedRoot, sessionio.TailOptions{}}, // path ids
	{sessionio.NeedMessages | sessionio.NeedThinking, content},             // odd ones
	{sessionio.NeedUsage | sessionio.NeedModel, content},                   // engine CheckBudget (sweeps)
	{sessionio.NeedUsage | sessionio.NeedModel, sessionio.TailOptions{}},
	{sessionio.NeedUsage, onDiskDec},
	{sessionio.NeedMessages | sessionio.NeedModel, planLater}, // compactor plan
}

// contextSize is Pi's measure of a path's context for both Pis: Pi 0.73's (below) and Pi
// 1.x's (cutpoint.ContextTokens over the projection).
func contextSize(path []*sessionio.Entry) [2]int {
	return [2]int{contextSize073(path), cutpoint.ContextTokens(path, pi.Latest, tokenize.EstimateFor(pi.Latest))}
}

// contextSize073 is Pi 0.73's measure of a path's context (estimateContextTokens over
// buildSessionContext): the usage of the newest message with valid usage plus the estimate
// of every message after it.
func contextSize073(path []*sessionio.Entry) int {
	msgs := picontext.Build(path, pi.MustParseRelease("0.73.1")).Messages
	last := -1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i] != nil && msgs[i].HasValidUsage() {
			last = i
			break
		}
	}
	total := 0
	if last >= 0 {
		total = int(msgs[last].Usage.ContextTokens())
	}
	est := tokenize.EstimateFor(pi.MustParseRelease("0.73.1"))
	for _, m := range msgs[last+1:] {
		if m != nil {
			total += est.Count(m)
		}
	}
	return total
}

// full is the reference: the full reader's view of a file.
type full struct {
	light, dec *sessionio.Session
	path       []*sessionio.Entry // from the light read
	err        error
}

func readFull(data []byte) full {
	var f full
	f.light, f.err = sessionio.ParseWith(data, "f.jsonl", sessionio.Options{Light: true})
	if f.err != nil {
		return f
	}
	f.path, f.err = f.light.Path("")
	if f.err != nil {
		return f
	}
	var err error
	if f.dec, err = sessionio.Parse(data, "f.jsonl"); err != nil {
		panic(fmt.Sprintf("light read succeeded, full read failed: %v", err))
	}
	return f
}

// checkTail compares a tail read with need against the full read of the same bytes, for
// everything need settles. It reports with fatal (the tests' t.Fatalf or rapid's).
func checkTail(fatal func(string, ...any), data []byte, f full, rd tailRead, sz sizes, plans bool) {
	checkTailWith(fatal, data, f, rd, sz, plans, nil)
}

// checkTailWith is checkTail for a read from a copy of the checkpoint in ck (nil: none).
func checkTailWith(fatalf func(string, ...any), data []byte, f full, rd tailRead, sz sizes, plans bool, ck *sessionio.MemCheckpoint) {
	need := rd.need
	fatal := func(format string, args ...any) { fatalf("options %+v, "+format, append([]any{rd.o}, args...)...) }
	var st *sessionio.MemCheckpoint
	if ck != nil {
		st = &sessionio.MemCheckpoint{Data: ck.Data, Anywhere: ck.Anywhere}
	}
	t, err := sessionio.ParseTailCheckpointed(data, "f.jsonl", need, rd.o, st, 1, sz.block, sz.maxBlock, sz.batch, sz.workers)
	if f.err != nil {
		if err == nil {
			if errors.Is(f.err, sessionio.ErrCycle) && need&sessionio.NeedFile == 0 && cycleUnread(data, t) {
				return // a cycle in history a partial read never reaches (Pi never reaches it either)
			}
			fatal("need %b: the full read fails (%v), the tail read does not", need, f.err)
		}
		for _, want := range []error{sessionio.ErrCycle, sessionio.ErrEmpty, sessionio.ErrNoHeader} {
			if errors.Is(f.err, want) != errors.Is(err, want) {
				fatal("need %b: full read error %v, tail read error %v", need, f.err, err)
			}
		}
		return
	}
	if err != nil {
		fatal("need %b: tail read fails: %v", need, err)
	}
	s := f.light
	if t.LeafID != s.LeafID() || t.Size != s.Size || t.EndsWithNewline != s.EndsWithNewline ||
		t.HasAssistant != s.HasAssistant() || t.Version() != s.Version() || t.Header.ID != s.Header.ID ||
		!bytes.Equal(t.Header.Raw, s.Header.Raw) {
		fatal("need %b: leaf %q/%q size %d/%d newline %v/%v assistant %v/%v version %d/%d header %q/%q",
			need, t.LeafID, s.LeafID(), t.Size, s.Size, t.EndsWithNewline, s.EndsWithNewline,
			t.HasAssistant, s.HasAssistant(), t.Version(), s.Version(), t.Header.ID, s.Header.ID)
	}
	// Path: a suffix of the full path, entry for entry; all of it when complete.
	off := len(f.path) - len(t.Path)
	if off < 0 || (t.Complete && off != 0) || (need&sessionio.NeedRoot != 0 && !t.Complete) {
		fatal("need %b: path of %d entries (complete %v), full path %d", need, len(t.Path), t.Complete, len(f.path))
	}
	for i, e := range t.Path {
		w := f.path[off+i]
		if e.ID != w.ID || e.ParentID != w.ParentID || e.Type != w.Type || e.Timestamp != w.Timestamp {
			fatal("need %b: path[%d] %s %q (parent %q), full %s %q (parent %q)", need, i, e.Type, e.ID, e.ParentID, w.Type, w.ID, w.ParentID)
		}
		if i >= t.Window {
			if e.Type == sessionio.TypeMessage && rd.o.LeaveMessagesOnDisk && t.Fallback == "" {
				if e.Raw != nil || e.Message != nil && !bytes.Equal(rawOf(e.Message, data), w.Message.Raw) {
					fatal("need %b: path[%d] (%s): the message left on disk is not at %+v", need, i, e.ID, e.Message.At)
				}
			} else if !bytes.Equal(e.Raw, w.Raw) {
				fatal("need %b: path[%d] (%s) raw bytes differ in the window", need, i, e.ID)
			}
		}
	}
	if want := windowOf(f.path); len(t.Path) > 0 && (t.Window+off != want) && need&sessionio.NeedMessages != 0 {
		fatal("need %b: window %d (+%d), full %d", need, t.Window, off, want)
	}
	// Context, as each Pi builds it.
	for _, d := range readerReleases {
		got, want := picontext.Build(t.Path, d), picontext.Build(f.path, d)
		if need&sessionio.NeedMessages != 0 || t.Complete {
			if len(got.Messages) != len(want.Messages) || !reflect.DeepEqual(got.EntryIDs, want.EntryIDs) {
				fatal("need %b, Pi %s: %d context messages %v, full %d %v", need, d, len(got.Messages), got.EntryIDs, len(want.Messages), want.EntryIDs)
			}
			for i := range got.Messages {
				if g := rawOf(got.Messages[i], data); !bytes.Equal(g, want.Messages[i].Raw) {
					fatal("need %b, Pi %s: context message %d differs:\n%s\n%s", need, d, i, g, want.Messages[i].Raw)
				}
			}
		}
	}
	got, want := picontext.Build(t.Path, pi.MustParseRelease("0.73.1")), picontext.Build(f.path, pi.MustParseRelease("0.73.1"))
	if need&sessionio.NeedUsage != 0 && rd.o.DecodeContent {
		dpath, _ := f.dec.Path("")
		if g, w := contextSize(decodedOnDisk(t.Path, data)), contextSize(dpath); g != w {
			fatal("need %b: context size %d from a path of %d entries, full %d", need, g, len(t.Path), w)
		}
	}
	if (need&sessionio.NeedModel != 0 || t.Complete) && !reflect.DeepEqual(got.Model, want.Model) {
		fatal("need %b: model %v, full %v", need, got.Model, want.Model)
	}
	if (need&sessionio.NeedThinking != 0 || t.Complete) && got.ThinkingLevel != want.ThinkingLevel {
		fatal("need %b: thinking %q, full %q", need, got.ThinkingLevel, want.ThinkingLevel)
	}
	if rd.o.DecodeContent {
		dpath, _ := f.dec.Path("")
		for i, e := range t.Path[t.Window:] {
			w := dpath[off+t.Window+i]
			if e.Message != nil && e.Message.Raw == nil && e.Message.At.Len > 0 { // left on disk
				m := *e.Message
				m.Raw, m.At = rawOf(e.Message, data), sessionio.Span{}
				e = &sessionio.Entry{Message: &m}
			}
			if (e.Message == nil) != (w.Message == nil) || e.Message != nil && !reflect.DeepEqual(*e.Message, *w.Message) {
				fatal("need %b: decoded message of %s differs:\n%+v\n%+v", need, e.ID, e.Message, w.Message)
			}
		}
		if plans && need&sessionio.NeedMessages != 0 && need&sessionio.NeedModel != 0 {
			checkPlans(fatal, need, t, dpath, off)
		}
	}
	if !t.Complete && need&sessionio.NeedFile == 0 { // read on to the root: the whole path, nothing else changed
		msgs := len(got.Messages)
		if err := t.Extend(sessionio.NeedRoot); err != nil {
			if errors.Is(err, sessionio.ErrCycle) && errors.Is(f.err, sessionio.ErrCycle) {
				return
			}
			fatal("need %b: Extend: %v", need, err)
		}
		if !t.Complete || len(t.Path) != len(f.path) || t.Path[len(t.Path)-1].ID != t.LeafID {
			fatal("need %b: after Extend, path of %d (complete %v), full %d", need, len(t.Path), t.Complete, len(f.path))
		}
		for i, e := range t.Path {
			if e.ID != f.path[i].ID {
				fatal("need %b: after Extend, path[%d] = %q, full %q", need, i, e.ID, f.path[i].ID)
			}
		}
		if c := picontext.Build(t.Path, pi.MustParseRelease("0.73.1")); len(c.Messages) != msgs && need&sessionio.NeedMessages != 0 ||
			c.ThinkingLevel != want.ThinkingLevel || !reflect.DeepEqual(c.Model, want.Model) {
			fatal("need %b: after Extend, context %d messages %q %v, full %d %q %v", need, len(c.Messages), c.ThinkingLevel, c.Model, len(want.Messages), want.ThinkingLevel, want.Model)
		}
		if t.Window != windowOf(f.path) && need&sessionio.NeedMessages != 0 {
			fatal("need %b: after Extend, window %d, full %d", need, t.Window, windowOf(f.path))
		}
	}
	if rd.o.FileLater && need&sessionio.NeedFile == 0 { // the rest of the file, for its facts
		if err := t.Extend(sessionio.NeedRoot | sessionio.NeedFile); err != nil {
			fatal("need %b: Extend(NeedFile): %v", need, err)
		}
		if !t.Complete || len(t.Path) != len(f.path) {
			fatal("need %b: after Extend(NeedFile), path of %d (complete %v), full %d", need, len(t.Path), t.Complete, len(f.path))
		}
		need |= sessionio.NeedFile
	}
	if need&sessionio.NeedFile != 0 {
		wantDiags := s.Diagnostics
		if t.EntryCount != len(s.Entries) || !reflect.DeepEqual(t.Labels, s.Labels()) || t.Name != s.Name() ||
			!reflect.DeepEqual(t.Diagnostics, wantDiags) {
			fatal("need %b: entries %d/%d labels %v/%v name %q/%q\ndiagnostics %+v\nfull        %+v",
				need, t.EntryCount, len(s.Entries), t.Labels, s.Labels(), t.Name, s.Name(), t.Diagnostics, wantDiags)
		}
		if t.CheckpointAt == 0 && t.ReadFrom > int64(len(s.Header.Raw))+int64(bytes.Index(data, s.Header.Raw))+1 {
			fatal("need %b: a whole-file read stopped at %d", need, t.ReadFrom)
		}
	}
}

// decodedOnDisk returns path with the messages a tail read left on disk given their bytes
// back (their decoded content is already there), so that they count as the full read's.
func decodedOnDisk(path []*sessionio.Entry, data []byte) []*sessionio.Entry {
	out := make([]*sessionio.Entry, len(path))
	for i, e := range path {
		out[i] = e
		if e.Message != nil && e.Message.Raw == nil && e.Message.At.Len > 0 {
			m := *e.Message
			m.Raw = rawOf(e.Message, data)
			c := *e
			c.Message = &m
			out[i] = &c
		}
	}
	return out
}

// rawOf is a message's bytes: in memory, or in the file where a tail read left them (with
// the content a Pi 1.x projection put in, as compactor context writes it).
func rawOf(m *sessionio.Message, data []byte) []byte {
	if m.Raw == nil && m.At.Len > 0 {
		raw := data[m.At.Off : m.At.Off+m.At.Len]
		if m.ContentRaw != nil {
			return picontext.ReplaceMember(raw, "content", m.ContentRaw)
		}
		return raw
	}
	return m.Raw
}

// sizes are a tail read's read sizes (see sessionio.ParseTailBlocks).
type sizes struct{ block, maxBlock, batch, workers int }

// windowOf is where the context's messages start in a full path.
func windowOf(path []*sessionio.Entry) int {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i].Type == sessionio.TypeCompaction {
			for j := 0; j < i; j++ {
				if path[j].ID == path[i].FirstKeptEntryID {
					return j
				}
			}
			return i
		}
	}
	return 0
}

// readerReleases are the releases whose contexts and plans the tail reader is checked with:
// one for each way Pi builds a context (the path before 0.80.4; what each entry puts into it,
// an older compaction's summary again, until 0.87; the projection). The reader reads the same
// bytes for every release; the rules only choose what of the path they use.
var readerReleases = []pi.Release{pi.MustParseRelease("0.75.5"), pi.MustParseRelease("0.86.1"), pi.Latest}

// checkPlans runs every policy on the tail's path and on the full path: the plans must be the
// same, path indices shifted by the part of the path the tail read did not need.
func checkPlans(fatal func(string, ...any), need sessionio.Need, t *sessionio.Tail, fullPath []*sessionio.Entry, off int) {
	for _, d := range readerReleases {
		checkPlansOf(fatal, need, t, fullPath, off, d)
	}
}

func checkPlansOf(fatal func(string, ...any), need sessionio.Need, t *sessionio.Tail, fullPath []*sessionio.Entry, off int, d pi.Release) {
	estimate := tokenize.EstimateFor(d)
	for _, name := range cutpoint.Names() {
		pol, _ := cutpoint.ByName(name)
		for _, keep := range []int{0, 300, 20000} {
			st := cutpoint.Settings{KeepRecentTokens: keep, ReserveTokens: 100, ContextWindow: 1000, Release: d}
			a, err1 := pol.Plan(t.Path, st, estimate)
			b, err2 := pol.Plan(fullPath, st, estimate)
			if (err1 == nil) != (err2 == nil) {
				fatal("need %b: %s plan errors %v / %v", need, name, err1, err2)
			}
			if err1 != nil {
				continue
			}
			if a.Prepared {
				a.FirstKeptEntryIndex += off
				a.BoundaryStartIndex += off
				if a.TurnStartIndex >= 0 {
					a.TurnStartIndex += off
				}
			}
			ja, _ := json.Marshal(a)
			jb, _ := json.Marshal(b)
			if !bytes.Equal(ja, jb) {
				fatal("need %b: %s plan (keep %d) differs:\ntail %s\nfull %s", need, name, keep, ja, jb)
			}
		}
	}
}

// cycleUnread reports whether every parentId cycle of the file has an entry before the part a
// tail read read (so that it could not see the cycle, and neither does Pi's walk from the leaf).
func cycleUnread(data []byte, t *sessionio.Tail) bool {
	type line struct {
		off    int64
		parent string
		root   bool
	}
	winner := map[string]line{} // id -> its last line, the one Pi keeps
	var o int64
	for _, l := range bytes.Split(data, []byte("\n")) {
		var e struct {
			Type     string  `json:"type"`
			ID       *string `json:"id"`
			ParentID *string `json:"parentId"`
		}
		if json.Unmarshal(l, &e) == nil && e.Type != "session" {
			id := ""
			if e.ID != nil {
				id = *e.ID
			}
			w := line{off: o, root: e.ParentID == nil || *e.ParentID == ""}
			if !w.root {
				w.parent = *e.ParentID
			}
			winner[id] = w
		}
		o += int64(len(l)) + 1
	}
	for start := range winner {
		seen := map[string]bool{}
		id := start
		for {
			w, ok := winner[id]
			if !ok || w.root {
				break
			}
			if seen[id] { // id is on a cycle: walk it once more and look for an unread member
				unread := false
				for c := id; ; {
					unread = unread || winner[c].off < t.ReadFrom
					if c = winner[c].parent; c == id {
						break
					}
				}
				if !unread {
					return false
				}
				break
			}
			seen[id] = true
			id = w.parent
		}
	}
	return true
}

// corpusFiles lists the session files of testdata/corpus, recorded and generated by the Pi
// harness (gen-<version>/).
func corpusFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	dirs := []string{"../testdata/corpus", "../testdata/corpus/bad", "../testdata/corpus/pi-generated", "../testdata/corpus/pi-repo"}
	gens, _ := filepath.Glob("../testdata/corpus/gen-*")
	dirs = append(dirs, gens...)
	for _, d := range dirs {
		m, _ := filepath.Glob(filepath.Join(d, "*.jsonl"))
		files = append(files, m...)
	}
	if len(files) < 20 {
		t.Fatalf("only %d corpus files", len(files))
	}
	return files
}

// TestTailMatchesFullReadCorpus: every corpus file, every need, with the default blocks and
// with blocks small enough to split lines.
func TestTailMatchesFullReadCorpus(t *testing.T) {
	t.Parallel()
	partial := 0
	seen := map[string]bool{} // the generated corpora repeat a few files (x-bom-*, x-no-final-newline-*)
	for _, file := range corpusFiles(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if seen[string(data)] {
			continue
		}
		seen[string(data)] = true
		f := readFull(data)
		if tl, err := sessionio.ParseTail(data, file, sessionio.NeedMessages|sessionio.NeedModel); err == nil && !tl.Complete {
			partial++
		}
		for _, rd := range reads {
			for _, sz := range []sizes{{64 << 10, 512 << 10, 1 << 20, 2}, {100, 1000, 0, 1}, {1, 7, 0, 1}, {64 << 10, 512 << 10, 5000, 3}} {
				if sz.block < 64<<10 && len(data) > 600<<10 || sz.block == 1 && len(data) > 120<<10 {
					continue // the default blocks already split these files' lines; tiny ones only cost time
				}
				checkTail(func(format string, args ...any) {
					t.Fatalf("%s (sizes %v): %s", file, sz, fmt.Sprintf(format, args...))
				}, data, f, rd, sz, sz.block == 64<<10 && sz.batch == 1<<20)
			}
		}
	}
	if partial < 3 { // 05-compactions, 08-large, 09-ends-with-compaction at least
		t.Errorf("only %d corpus files were read partially for the messages and the model", partial)
	}
}

// TestTailMatchesFullRead: generated sessions (branches, branch summaries, labels, names,
// repeated compactions, model and thinking changes before compactions, duplicate ids,
// orphans, cycles, malformed and torn lines, extra headers, white space, v1/v2 headers).
func TestTailMatchesFullRead(t *testing.T) {
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "rapid.checks" })
	if !explicit { // sessionio's TestMain is not this file's: set rapid's count here
		if err := flag.Set("rapid.checks", fmt.Sprint(*tailChecks)); err != nil {
			t.Fatal(err)
		}
	}
	var runs, partial, fallbacks int
	rapid.Check(t, func(rt *rapid.T) {
		data := genTree(rt)
		f := readFull(data)
		first := rapid.IntRange(1, 2048).Draw(rt, "block")
		sz := sizes{first, rapid.IntRange(first, 8192).Draw(rt, "maxBlock"), rapid.SampledFrom([]int{0, 1, 16, 200, 3000}).Draw(rt, "batch"), rapid.IntRange(1, 3).Draw(rt, "workers")}
		for _, rd := range reads {
			checkTail(func(format string, args ...any) {
				rt.Fatalf("%s (sizes %v)\n--- file:\n%s", fmt.Sprintf(format, args...), sz, data)
			}, data, f, rd, sz, true)
		}
		runs++
		if tl, err := sessionio.ParseTail(data, "f.jsonl", sessionio.NeedContext); err == nil {
			switch {
			case tl.Fallback != "":
				fallbacks++
			case !tl.Complete:
				partial++
			}
		}
	})
	// The property is only worth something if the fast path is taken: the generator must
	// give a good share of sessions whose context is settled before the root.
	t.Logf("%d sessions: %d contexts settled before the root, %d full-read fallbacks", runs, partial, fallbacks)
	if runs >= 100 && (partial < runs/10 || fallbacks > runs/4) {
		t.Errorf("generator coverage: %d of %d partial, %d fallbacks", partial, runs, fallbacks)
	}
}

// gen builds one session file line by line.
type gen struct {
	rnd     *rand.Rand
	lines   []string
	ids     []string          // every id written, in order (duplicates included)
	parents map[string]string // id -> parent of its last line ("" for a root)
	leaf    string            // "" = none (the next entry is a root)
	future  []string          // ids reserved for later entries (forward parents, cycles)
	n       int
	clock   int
}

// intn returns an int in [lo, hi].
func (g *gen) intn(lo, hi int) int { return lo + g.rnd.IntN(hi-lo+1) }

func pick[T any](g *gen, xs []T) T { return xs[g.rnd.IntN(len(xs))] }

func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func (g *gen) id() string {
	switch {
	case len(g.ids) > 0 && g.intn(0, 150) == 0:
		return pick(g, g.ids)
	case len(g.future) > 0 && g.intn(0, 5) == 0:
		id := g.future[0]
		g.future = g.future[1:]
		return id
	}
	g.n++
	return fmt.Sprintf("%08x", g.n*2654435761%(1<<32))
}

func (g *gen) parent() string {
	switch g.intn(0, 100) {
	case 0: // an orphan
		return "missing-" + fmt.Sprint(g.n)
	case 1: // a root
		return ""
	case 2: // a parent that a later line will define (a forward reference; maybe a cycle)
		g.n++
		id := fmt.Sprintf("f%07x", g.n)
		g.future = append(g.future, id)
		return id
	case 3:
		if len(g.ids) > 0 {
			return pick(g, g.ids)
		}
	}
	return g.leaf
}

func (g *gen) ts() string {
	g.clock += g.intn(0, 5000)
	return js(fmt.Sprintf("2026-01-01T%02d:%02d:%02d.%03dZ", g.clock/3600000%24, g.clock/60000%60, g.clock/1000%60, g.clock%1000))
}

// entry writes an entry line of typ with extra members (already JSON, leading comma).
func (g *gen) entry(typ, extra string) string {
	id := g.id()
	p := g.parent()
	pj := "null"
	if p != "" {
		pj = js(p)
	}
	idj := js(id)
	switch g.intn(0, 60) {
	case 0:
		idj = "7" // a bad field
	case 1:
		line := fmt.Sprintf(`{"type":%s,"parentId":%s,"timestamp":%s%s}`, js(typ), pj, g.ts(), extra) // no id at all
		g.lines = append(g.lines, line)
		return ""
	}
	line := fmt.Sprintf(`{"type":%s,"id":%s,"parentId":%s,"timestamp":%s%s}`, js(typ), idj, pj, g.ts(), extra)
	if g.intn(0, 40) == 0 { // JSON.parse keeps the last of duplicate keys
		line = strings.TrimSuffix(line, "}") + `,"parentId":` + pj + `}`
	}
	g.lines = append(g.lines, line)
	if idj != "7" {
		g.ids = append(g.ids, id)
		g.parents[id] = p
		g.leaf = id
	}
	return id
}

// path returns the ids on the current leaf's path as far as the generator knows it (leaf
// first; it stops at a missing parent or a cycle).
func (g *gen) path() []string {
	var out []string
	seen := map[string]bool{}
	for id := g.leaf; id != "" && !seen[id]; id = g.parents[id] {
		if _, ok := g.parents[id]; !ok {
			break
		}
		seen[id] = true
		out = append(out, id)
	}
	return out
}

var (
	texts     = []string{"hi", "naïve café 🚀", "日本語", "line\nbreak \"quoted\" \\ tab\t", "\u2028sep", strings.Repeat("long ", 40)}
	models    = []string{"claude-sonnet-4-5", "gpt-5.1-codex", "gemini-2.5-pro"}
	providers = []string{"anthropic", "openai", "google"}
	thinking  = []string{"off", "low", "medium", "high"}
)

func (g *gen) text() string { return js(pick(g, texts)) }

func (g *gen) message() {
	var m string
	switch g.intn(0, 9) {
	case 0, 1, 2:
		m = fmt.Sprintf(`{"role":"user","content":%s,"timestamp":%d}`, g.text(), g.clock)
		if g.intn(0, 1) == 1 {
			m = fmt.Sprintf(`{"role":"user","content":[{"type":"text","text":%s},{"type":"image","data":"AAAA","mimeType":"image/png"}],"timestamp":%d}`, g.text(), g.clock)
		}
	case 3, 4, 5:
		stop := pick(g, []string{"stop", "toolUse", "aborted", "error", "length"})
		usage := fmt.Sprintf(`{"input":%d,"output":5,"cacheRead":0,"cacheWrite":0,"totalTokens":0}`, g.intn(0, 900))
		if g.intn(0, 8) == 0 {
			usage = "null"
		}
		k := g.intn(0, len(models)-1)
		m = fmt.Sprintf(`{"role":"assistant","content":[{"type":"thinking","thinking":%s},{"type":"text","text":%s},{"type":"toolCall","id":"c%d","name":"read","arguments":{"path":"src/a.go"}}],"api":"x","provider":%s,"model":%s,"usage":%s,"stopReason":%s,"timestamp":%d}`,
			g.text(), g.text(), g.n, js(providers[k]), js(models[k]), usage, js(stop), g.clock)
	case 6, 7:
		m = fmt.Sprintf(`{"role":"toolResult","toolCallId":"c%d","toolName":"read","content":[{"type":"text","text":%s}],"isError":false,"timestamp":%d}`, g.n-1, g.text(), g.clock)
	case 8:
		m = fmt.Sprintf(`{"role":"bashExecution","command":"ls","output":%s,"exitCode":0,"cancelled":false,"truncated":false,"timestamp":%d}`, g.text(), g.clock)
	default:
		m = fmt.Sprintf(`{"role":"hookMessage","customType":"x","content":%s,"display":true,"timestamp":%d}`, g.text(), g.clock)
	}
	g.entry("message", `,"message":`+m)
}

func (g *gen) step() {
	op := g.intn(0, 99)
	switch {
	case op < 50:
		g.message()
		return
	case op < 53:
		op = 9
	case op < 56:
		op = 10
	case op < 63:
		op = 11
	case op < 66:
		op = 13
	case op < 69:
		op = 14
	case op < 72:
		op = 15
	case op < 74:
		op = 16
	case op < 76:
		op = 17
	case op < 79:
		op = 18
	case op < 80:
		op = 19
	case op < 84:
		op = 20
	case op < 85:
		op = 21
	case op < 86:
		op = 22
	case op < 89:
		op = 23 // Pi 1.x: a context edit
	case op < 91:
		op = 24 // Pi 1.x: a system message
	case op < 92:
		op = 25 // Pi 1.x: a usage entry
	case op < 93:
		op = 26 // Pi 1.x: a compaction with a checkpoint, or one that keeps nothing
	default:
		g.message()
		return
	}
	switch op {
	case 9:
		k := g.intn(0, len(models)-1)
		g.entry("model_change", fmt.Sprintf(`,"provider":%s,"modelId":%s`, js(providers[k]), js(models[k])))
	case 10:
		g.entry("thinking_level_change", `,"thinkingLevel":`+js(pick(g, thinking)))
	case 11:
		first := "nowhere"
		switch p := g.path(); {
		case len(p) > 0 && g.intn(0, 9) > 1:
			first = p[g.intn(0, min(len(p)-1, 12))] // a few entries back on the path
		case len(g.ids) > 0 && g.intn(0, 1) == 1:
			first = pick(g, g.ids)
		}
		g.entry("compaction", fmt.Sprintf(`,"summary":%s,"firstKeptEntryId":%s,"tokensBefore":%d,"details":{"readFiles":["a.go"],"modifiedFiles":[]},"fromHook":%v`,
			g.text(), js(first), g.intn(0, 90000), g.intn(0, 4) == 0))
	case 13: // /tree navigation: the next entry hangs off an earlier one
		if len(g.ids) > 0 {
			g.leaf = pick(g, g.ids)
		}
	case 14:
		from := "root"
		if g.leaf != "" {
			from = g.leaf
		}
		summary := g.text()
		if g.intn(0, 3) == 0 {
			summary = `""`
		}
		g.entry("branch_summary", fmt.Sprintf(`,"fromId":%s,"summary":%s,"details":{"readFiles":[],"modifiedFiles":["b.go"]},"fromHook":false`, js(from), summary))
	case 15:
		if len(g.ids) > 0 {
			label := js(pick(g, []string{"start", "checkpoint ✅", ""}))
			if g.intn(0, 5) == 0 {
				g.entry("label", `,"targetId":`+js(pick(g, g.ids)))
			} else {
				g.entry("label", `,"targetId":`+js(pick(g, g.ids))+`,"label":`+label)
			}
		}
	case 16:
		g.entry("session_info", `,"name":`+js(pick(g, []string{"  Refactor  ", "", "名前"})))
	case 17:
		g.entry("custom", `,"customType":"ext","data":{"k":[1,2]}`)
	case 18:
		g.entry("custom_message", fmt.Sprintf(`,"customType":"note","content":%s,"display":%v,"details":{"n":1}`, g.text(), g.intn(0, 1) == 1))
	case 19:
		g.entry("future_thing", `,"payload":{"x":null}`)
	case 20: // lines Pi skips or ignores
		g.lines = append(g.lines, pick(g, []string{
			`{"type":"message","id":"broken",`, `42`, `[1,2]`, ``, `   `, "\u00a0", `{"type":"message","id":"ctl","x":"` + "\x01" + `"}`,
			`{"type":"session","version":3,"id":"other","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/y"}`,
		}))
	case 21: // a line glued to a torn one, as after a crash mid-write
		if n := len(g.lines); n > 0 && len(g.lines[n-1]) > 2 {
			l := g.lines[n-1]
			g.lines[n-1] = l[:g.intn(1, len(l)-1)]
			g.message()
			g.lines[n-1] += g.lines[n]
			g.lines = g.lines[:n]
		}
	case 22:
		g.leaf = "" // reset: the next entry is a new root
	case 23:
		target := "nowhere"
		switch p := g.path(); {
		case len(p) > 0 && g.intn(0, 9) > 1:
			target = p[g.intn(0, min(len(p)-1, 12))]
		case len(g.ids) > 0:
			target = pick(g, g.ids)
		}
		replacement := pick(g, []string{"null", "null", `{"content":` + g.text() + `}`,
			`{"content":[{"type":"text","text":` + g.text() + `}]}`, `{"content":7}`, `"odd"`})
		g.entry("context_edit", `,"targetId":`+js(target)+`,"replacement":`+replacement)
	case 24:
		m := pick(g, []string{
			`{"role":"system","content":` + g.text() + `,"sections":{"rules":` + g.text() + `,"1":"n"},"toolsAdded":[{"name":"read","description":"r"},{"name":"bash"}],"timestamp":5}`,
			`{"role":"system","content":"","sections":{"rules":null,"env":` + g.text() + `},"toolsAdded":[{"name":"read","x":1.50}],"toolsRemoved":[{"name":"bash"}],"timestamp":6}`,
			`{"role":"system","content":null,"toolsAdded":[{"name":"edit"}]}`,
		})
		g.entry("message", `,"message":`+m)
	case 25:
		g.entry("usage", `,"kind":"cache_warm","provider":"anthropic","model":"claude-sonnet-4-5","usage":{"input":1,"output":0,"cacheRead":800,"cacheWrite":0,"totalTokens":801}`)
	case 26:
		if g.intn(0, 1) == 0 {
			id := g.entry("compaction", `,"summary":`+g.text()+`,"firstKeptEntryId":"__SELF__","tokensBefore":9,"details":{"readFiles":[],"modifiedFiles":[]},"fromHook":false`)
			if n := len(g.lines); id != "" {
				g.lines[n-1] = strings.Replace(g.lines[n-1], `"__SELF__"`, js(id), 1)
			}
			return
		}
		first := "nowhere"
		if p := g.path(); len(p) > 0 {
			first = p[g.intn(0, min(len(p)-1, 8))]
		}
		g.entry("compaction", `,"summary":`+g.text()+`,"firstKeptEntryId":`+js(first)+`,"tokensBefore":9,"details":{"readFiles":[],"modifiedFiles":[]},"fromHook":false,`+
			`"systemMessage":{"role":"system","content":"prompt","sections":{"rules":"be brief"},"toolsAdded":[{"name":"read"}],"timestamp":7}`)
	}
}

// genTree draws a whole file.
//
// The shape is drawn from a seed (rapid draws small numbers far more often than large ones,
// which would make every rare case common); a failure prints the whole file.
func genTree(t *rapid.T) []byte {
	seed := rapid.Uint64().Draw(t, "seed")
	g := &gen{rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), parents: map[string]string{}}
	version := pick(g, []int{3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 2, 1})
	head := fmt.Sprintf(`{"type":"session","version":%d,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/p"}`, version)
	if version == 1 {
		head = `{"type":"session","id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/p"}`
	}
	prefix := pick(g, []string{"", "", "\ufeff", "\n\n", " "})
	g.lines = append(g.lines, prefix+head)
	if g.intn(0, 1) == 1 {
		g.entry("model_change", `,"provider":"anthropic","modelId":"claude-sonnet-4-5"`)
		g.entry("thinking_level_change", `,"thinkingLevel":"medium"`)
	}
	for i, n := 0, g.intn(0, 150); i < n; i++ {
		g.step()
	}
	sep := pick(g, []string{"\n", "\n", "\n", "\r\n"})
	data := strings.Join(g.lines, sep)
	switch g.intn(0, 6) {
	case 0: // no final newline
	case 1: // torn last line
		if len(data) > 0 {
			data = data[:g.intn(len(data)/2, len(data))]
		}
	case 2:
		data += "\n\n \u00a0\t"
	default:
		data += "\n"
	}
	return []byte(data)
}

// FuzzTailMatchesFullRead: on any bytes, a tail read with any need and any block size agrees
// with the full read (or fails the same way), and never panics.
func FuzzTailMatchesFullRead(f *testing.F) {
	for _, p := range []string{"../testdata/corpus/01-minimal.jsonl", "../testdata/corpus/bad/orphan-and-dup.jsonl", "../testdata/corpus/bad/malformed-line.jsonl", "../testdata/corpus/bad/legacy-v1.jsonl"} {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data, uint16(0xffff), uint16(64))
		}
	}
	h := `{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/p"}`
	f.Add([]byte(h+"\n"+`{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","content":"x"}}`+"\n"+
		`{"type":"compaction","id":"c","parentId":"a","timestamp":"t","summary":"S","firstKeptEntryId":"a","tokensBefore":1}`+"\n"), uint16(3), uint16(5))
	f.Fuzz(func(t *testing.T, data []byte, needBits, block uint16) {
		// The goals are needBits' low five bits; bits 5 and 7 (the places the options had when
		// the corpus was written) decode the content and leave the messages on disk.
		rd := tailRead{sessionio.Need(needBits) & (sessionio.NeedContext | sessionio.NeedRoot | sessionio.NeedFile),
			sessionio.TailOptions{DecodeContent: needBits&(1<<5) != 0, LeaveMessagesOnDisk: needBits&(1<<7) != 0}}
		first := int(block%4096) + 1
		checkTail(func(format string, args ...any) {
			t.Fatalf("%s\n--- file:\n%q", fmt.Sprintf(format, args...), data)
		}, data, readFull(data), rd, sizes{first, first * 4, int(block >> 10), 1 + int(block&3)}, false)
	})
}
