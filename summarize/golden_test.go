package summarize

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"github.com/compactor-dev/compactor/internal/pigolden"
	"github.com/compactor-dev/compactor/sessionio/picontext"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/jsjson"
	"github.com/compactor-dev/compactor/tokenize"
)

// The goldens in testdata/golden/<version> were produced by the real Pi of that version
// (testdata/gen-goldens.mjs, through interop/pi) from the session files in testdata/corpus
// and the repository's generated corpus of that Pi (testdata/corpus/gen-<version>). Each
// test runs for every dialect, with that dialect's rules.

type textRef struct {
	Len    int    `json:"len"`
	SHA256 string `json:"sha256"`
}

// jsString and jsStrings decode JSON strings as JavaScript does (jsjson.Unquote keeps
// lone surrogates as WTF-8), where encoding/json would turn them into U+FFFD.
type jsString string

func (j *jsString) UnmarshalJSON(b []byte) error {
	s, err := jsjson.Unquote(b)
	*j = jsString(s)
	return err
}

type jsStrings []string

func (j *jsStrings) UnmarshalJSON(b []byte) error {
	var raws []json.RawMessage
	if err := json.Unmarshal(b, &raws); err != nil {
		return err
	}
	*j = make(jsStrings, len(raws))
	for i, r := range raws {
		s, err := jsjson.Unquote(r)
		if err != nil {
			return err
		}
		(*j)[i] = s
	}
	return nil
}

type goldenFileOps struct {
	Read          jsStrings `json:"read"`
	Written       jsStrings `json:"written"`
	Edited        jsStrings `json:"edited"`
	ReadFiles     jsStrings `json:"readFiles"`
	ModifiedFiles jsStrings `json:"modifiedFiles"`
}

type goldenCut struct {
	LeafID               string        `json:"leafId"`
	KeepRecentTokens     int           `json:"keepRecentTokens"`
	Prepared             bool          `json:"prepared"`
	FirstKeptEntryID     string        `json:"firstKeptEntryId"`
	IsSplitTurn          bool          `json:"isSplitTurn"`
	PreviousCompactionID *string       `json:"previousCompactionId"`
	PreviousSummary      *string       `json:"previousSummary"`
	MessagesToSummarize  []string      `json:"messagesToSummarize"`
	TurnPrefix           []string      `json:"turnPrefix"`
	SerializedHistory    textRef       `json:"serializedHistory"`
	SerializedPrefix     textRef       `json:"serializedPrefix"`
	FileOps              goldenFileOps `json:"fileOps"`
	Formatted            jsString      `json:"formatted"`
}

type goldenBranch struct {
	FromID           string        `json:"fromId"`
	ToID             string        `json:"toId"`
	TokenBudget      int           `json:"tokenBudget"`
	CommonAncestorID *string       `json:"commonAncestorId"`
	Entries          []string      `json:"entries"`
	Messages         []string      `json:"messages"`
	TotalTokens      int           `json:"totalTokens"`
	Serialized       textRef       `json:"serialized"`
	FileOps          goldenFileOps `json:"fileOps"`
}

type golden struct {
	File      string `json:"file"`
	PiVersion string `json:"piVersion"`
	LeafID    string `json:"leafId"`
	Context   struct {
		IDs        []string `json:"ids"`
		Serialized textRef  `json:"serialized"`
	} `json:"context"`
	Cuts     []goldenCut       `json:"cuts"`
	Branches []goldenBranch    `json:"branches"`
	Texts    map[string]string `json:"texts"`
}

var (
	corpusMu    sync.Mutex
	corpusCache = map[string]*sessionio.Session{}
)

// loadCorpus reads a session from testdata/corpus (gzip-compressed or plain), once per
// test binary: the tests only read sessions.
func loadCorpus(t testing.TB, name string) *sessionio.Session {
	t.Helper()
	corpusMu.Lock()
	defer corpusMu.Unlock()
	if s, ok := corpusCache[name]; ok {
		return s
	}
	p := filepath.Join("testdata", "corpus", name)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(name, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if data, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
	}
	s, err := sessionio.Parse(data, p)
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	corpusCache[name] = s
	return s
}

// goldenReleases are the Pi releases with goldens: the matrix (interop/pi/versions.txt).
func goldenReleases(t *testing.T) []pi.Release {
	t.Helper()
	vs, err := pigolden.Versions()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]pi.Release, len(vs))
	for i, v := range vs {
		out[i] = pi.MustParseRelease(v)
	}
	return out
}

// loadGoldens reads the goldens of Pi d (the golden store testdata/golden/, pigolden.Read).
func loadGoldens(t *testing.T, d pi.Release) map[string]*golden {
	t.Helper()
	names, err := pigolden.Names(filepath.Join("testdata", "golden"), d.String())
	if err != nil || len(names) == 0 {
		t.Fatalf("no goldens of Pi %s: %v", d, err)
	}
	out := map[string]*golden{}
	for _, f := range names {
		data, err := pigolden.Read(filepath.Join("testdata", "golden"), d.String(), f)
		if err != nil {
			t.Fatal(err)
		}
		var g golden
		if err := json.Unmarshal(data, &g); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if g.PiVersion != d.String() {
			t.Fatalf("%s: made by Pi %s, not %s", f, g.PiVersion, d)
		}
		out[strings.TrimSuffix(f, ".json")] = &g
	}
	return out
}

// forEachGolden runs fn as a parallel subtest "<version>/<golden>" for every golden of every
// release of the matrix.
func forEachGolden(t *testing.T, fn func(t *testing.T, d pi.Release, name string, g *golden)) {
	for _, d := range goldenReleases(t) {
		for name, g := range loadGoldens(t, d) {
			t.Run(d.String()+"/"+name, func(t *testing.T) {
				t.Parallel()
				fn(t, d, name, g)
			})
		}
	}
}

// pathTo is the session's path from the root to leaf.
func pathTo(t *testing.T, s *sessionio.Session, leaf string) []*sessionio.Entry {
	t.Helper()
	path, err := s.Path(leaf)
	if err != nil {
		t.Fatalf("path to %s: %v", leaf, err)
	}
	return path
}

// checkText compares a serialization with a golden reference (UTF-16 length + sha256).
func checkText(t *testing.T, what string, got string, want textRef, texts map[string]string) {
	t.Helper()
	sum := sha256.Sum256([]byte(got))
	if hex.EncodeToString(sum[:]) == want.SHA256 {
		return
	}
	if w, ok := texts[want.SHA256]; ok {
		t.Errorf("%s differs from Pi:\n got: %q\nwant: %q", what, clipForLog(got), clipForLog(w))
		return
	}
	t.Errorf("%s differs from Pi: got %d UTF-16 units, want %d (sha %s)", what, jsjson.UTF16Len(got), want.Len, want.SHA256[:12])
}

func clipForLog(s string) string {
	if len(s) > 3000 {
		return s[:3000] + "..."
	}
	return s
}

func messagesFor(t *testing.T, s *sessionio.Session, ids []string) []*sessionio.Message {
	t.Helper()
	out := make([]*sessionio.Message, 0, len(ids))
	for _, id := range ids {
		e := s.Get(id)
		if e == nil {
			t.Fatalf("entry %s not found", id)
		}
		m := picontext.AsMessage(e)
		if m == nil {
			t.Fatalf("entry %s (%s) yields no message", id, e.Type)
		}
		out = append(out, m)
	}
	return out
}

func checkFileOps(t *testing.T, what string, f *FileOps, want goldenFileOps) {
	t.Helper()
	read, modified := ComputeFileLists(f)
	checkFileLists(t, what, cutpoint.FileOps{Read: f.ReadSet(), Written: f.WrittenSet(), Edited: f.EditedSet(), ReadFiles: read, ModifiedFiles: modified}, want)
}

// checkFileLists compares Pi's file operation sets (in Set order) and the lists computed from them.
func checkFileLists(t *testing.T, what string, f cutpoint.FileOps, want goldenFileOps) {
	t.Helper()
	eq := func(field string, got, want []string) {
		if len(got) == 0 && len(want) == 0 {
			return
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: %s = %q, Pi %q", what, field, got, want)
		}
	}
	eq("read", f.Read, want.Read)
	eq("written", f.Written, want.Written)
	eq("edited", f.Edited, want.Edited)
	eq("readFiles", f.ReadFiles, want.ReadFiles)
	eq("modifiedFiles", f.ModifiedFiles, want.ModifiedFiles)
}

func corpusName(g *golden) string { return g.File }

// TestSerializeContextGolden: the context of every corpus file (the entries its messages come
// from, as the dialect's Pi builds it) and its serialization.
func TestSerializeContextGolden(t *testing.T) {
	t.Parallel()
	forEachGolden(t, func(t *testing.T, d pi.Release, name string, g *golden) {
		s := loadCorpus(t, corpusName(g))
		ctx := picontext.Project(pathTo(t, s, g.LeafID), d).Context()
		if !slices.Equal(ctx.EntryIDs, g.Context.IDs) {
			t.Fatalf("context of %s: entries %v, Pi %s %v", name, ctx.EntryIDs, d, g.Context.IDs)
		}
		checkText(t, "context serialization", SerializeConversation(ctx.Messages, d), g.Context.Serialized, g.Texts)
	})
}

// TestCutGolden: for every cut Pi considered (many leaves and keepRecentTokens values), the
// plan of cutpoint's pi policy under the dialect's rules: whether there is one, the first kept
// entry, the split turn, the previous compaction, the entries summarized and those of the
// turn prefix; the serialization of both message lists, the file operations in Pi's set
// order, the sorted lists and the formatted block.
func TestCutGolden(t *testing.T) {
	t.Parallel()
	forEachGolden(t, func(t *testing.T, d pi.Release, name string, g *golden) {
		s := loadCorpus(t, corpusName(g))
		est := tokenize.EstimateFor(d)
		n := 0
		for _, c := range g.Cuts {
			what := name + " leaf " + c.LeafID + " keep " + itoa(c.KeepRecentTokens)
			settings := cutpoint.Settings{KeepRecentTokens: c.KeepRecentTokens, ReserveTokens: cutpoint.DefaultReserveTokens, Release: d}
			p, err := cutpoint.Pi{}.Plan(pathTo(t, s, c.LeafID), settings, est)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if p.Prepared != c.Prepared {
				t.Fatalf("%s: prepared %v (%s), Pi %v", what, p.Prepared, p.Reason, c.Prepared)
			}
			if !c.Prepared {
				continue
			}
			n++
			if p.FirstKeptEntryID != c.FirstKeptEntryID || p.IsSplitTurn != c.IsSplitTurn {
				t.Fatalf("%s: cut before %s (split %v), Pi before %s (split %v)", what, p.FirstKeptEntryID, p.IsSplitTurn, c.FirstKeptEntryID, c.IsSplitTurn)
			}
			wantPrev := ""
			if c.PreviousCompactionID != nil {
				wantPrev = *c.PreviousCompactionID
			}
			if p.PreviousCompactionID != wantPrev || (p.PreviousSummary == nil) != (c.PreviousSummary == nil) ||
				(p.PreviousSummary != nil && *p.PreviousSummary != *c.PreviousSummary) {
				t.Errorf("%s: previous compaction %q, Pi %q (or its summary differs)", what, p.PreviousCompactionID, wantPrev)
			}
			if !slices.Equal(p.MessagesToSummarize, nonNil(c.MessagesToSummarize)) || !slices.Equal(p.TurnPrefix, nonNil(c.TurnPrefix)) {
				t.Fatalf("%s: summarizes %v + prefix %v, Pi %v + %v", what, p.MessagesToSummarize, p.TurnPrefix, c.MessagesToSummarize, c.TurnPrefix)
			}
			checkText(t, what+" history", SerializeConversation(p.Summarize, d), c.SerializedHistory, g.Texts)
			checkText(t, what+" prefix", SerializeConversation(p.Prefix, d), c.SerializedPrefix, g.Texts)
			checkFileLists(t, what, p.FileOps, c.FileOps)
			var prev *sessionio.Entry
			if c.PreviousCompactionID != nil {
				prev = s.Get(*c.PreviousCompactionID)
			}
			checkFileOps(t, what+" ExtractFileOps", ExtractFileOps(d, prev, p.Summarize, p.Prefix), c.FileOps)
			if got := FormatFileOperations(p.FileOps.ReadFiles, p.FileOps.ModifiedFiles); got != string(c.Formatted) {
				t.Errorf("%s: formatted file lists %q, Pi %q", what, got, c.Formatted)
			}
			if t.Failed() {
				return
			}
		}
		if n == 0 && !strings.Contains(name, "09-") {
			t.Fatalf("no prepared cut in %s", name)
		}
	})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// TestBranchGolden: CollectBranch and PrepareBranch (with the dialect's estimate) against
// Pi's collectEntriesForBranchSummary and prepareBranchEntries, for every (tip, target,
// budget) the generator tried, and the serialization of the prepared messages.
func TestBranchGolden(t *testing.T) {
	t.Parallel()
	for _, d := range goldenReleases(t) {
		total := 0
		for _, g := range loadGoldens(t, d) {
			total += len(g.Branches)
		}
		if total < 500 {
			t.Errorf("only %d branch goldens of Pi %s", total, d)
		}
	}
	forEachGolden(t, func(t *testing.T, d pi.Release, name string, g *golden) {
		s := loadCorpus(t, corpusName(g))
		est := tokenize.EstimateFor(d)
		for _, b := range g.Branches {
			what := name + " " + b.FromID + "→" + b.ToID + " budget " + itoa(b.TokenBudget)
			entries, ancestor, err := CollectBranch(s, b.FromID, b.ToID)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			wantAnc := ""
			if b.CommonAncestorID != nil {
				wantAnc = *b.CommonAncestorID
			}
			if ancestor != wantAnc {
				t.Errorf("%s: common ancestor %q, Pi %q", what, ancestor, wantAnc)
			}
			var ids []string
			for _, e := range entries {
				ids = append(ids, e.ID)
			}
			if !slices.Equal(ids, b.Entries) && (len(ids) > 0 || len(b.Entries) > 0) {
				t.Errorf("%s: entries %v, Pi %v", what, ids, b.Entries)
				continue
			}
			msgs, f, tokens := PrepareBranch(entries, b.TokenBudget, est, d)
			if len(msgs) != len(b.Messages) {
				t.Errorf("%s: %d messages, Pi %d (%v)", what, len(msgs), len(b.Messages), b.Messages)
			}
			if tokens != b.TotalTokens {
				t.Errorf("%s: totalTokens %d, Pi %d", what, tokens, b.TotalTokens)
			}
			checkFileOps(t, what, f, b.FileOps)
			checkText(t, what+" serialization", SerializeConversation(msgs, d), b.Serialized, g.Texts)
			if t.Failed() {
				return
			}
		}
	})
}

// TestSerializeSyntheticV3Golden: Pi's own serializeConversation output shipped with the
// shared corpus — the span its compaction summarized (history up to the split turn).
func TestSerializeSyntheticV3Golden(t *testing.T) {
	t.Parallel()
	s := loadCorpus(t, "synthetic-v3-session.jsonl")
	want, err := os.ReadFile(filepath.Join("testdata", "corpus", "synthetic-v3-session.serializeConversation.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// compaction f0398941 keeps 75c27ff3 (an assistant): the turn started at 8651b18c,
	// so the history is everything before it that yields a message.
	ids := []string{"abd4e31a", "e1aeb4c4", "b576be37", "8c71f6e5", "448287a6", "9ef025ce", "1bccc52e", "74d2b0e0"}
	got := SerializeConversation(messagesFor(t, s, ids), pi.MustParseRelease("0.73.1"))
	if got != string(want) {
		t.Fatalf("serializeConversation differs from Pi:\n got %q\nwant %q", got, want)
	}
}

func itoa(n int) string { return string(jsjson.AppendNumber(nil, float64(n))) }
