package tokenize

import (
	"encoding/json"
	"github.com/compactor-dev/compactor/sessionio/picontext"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/internal/pigolden"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
)

// corpusDir is the project's copy of the shared corpus.
const corpusDir = "../testdata/corpus"

// goldenFiles maps a file name in estimate-goldens/<version>.json to its path under
// corpusDir (the other names, such as "gen-<version>/NAME.jsonl", are paths under it already).
var goldenFiles = map[string]string{
	"synthetic-v3-session.jsonl":          "pi-generated/synthetic-v3-session.jsonl",
	"before-compaction.migrated-v3.jsonl": "pi-generated/before-compaction.migrated-v3.jsonl",
	"before-compaction.jsonl":             "pi-repo/before-compaction.jsonl",
	"large-session.jsonl":                 "pi-repo/large-session.jsonl",
}

type estimateGolden struct {
	Version int `json:"version"`
	Paths   []struct {
		Leaf    string              `json:"leaf"`
		Entries [][]json.RawMessage `json:"entries"` // [id, type, tokens|null]
	} `json:"paths"`
}

// perEntry is what Pi r counts for each path entry with est, nil where it counts nothing:
// before 0.80.4 each message entry's message; then (ContextMessagesWeigh) the messages each
// entry puts into the context, and from 0.87 (ContextEdits) into the projection (nil for an
// entry that puts none there).
func perEntry(path []*sessionio.Entry, r pi.Release, est Counter) []*int {
	out := make([]*int, len(path))
	if !r.Has(pi.ContextMessagesWeigh) {
		for i, e := range path {
			if e.Type == sessionio.TypeMessage {
				n := est.Count(e.Message)
				out[i] = &n
			}
		}
		return out
	}
	if !r.Has(pi.ContextEdits) {
		for i, e := range path {
			if msgs := picontext.MessagesOf(e, r); len(msgs) > 0 {
				n := 0
				for _, m := range msgs {
					n += est.Count(m)
				}
				out[i] = &n
			}
		}
		return out
	}
	for _, pe := range picontext.Project(path, r).Entries {
		if len(pe.Messages) == 0 {
			continue
		}
		n := 0
		for _, m := range pe.Messages {
			n += est.Count(m)
		}
		out[pe.Index] = &n
	}
	return out
}

// TestEstimateMatchesPi checks EstimateFor(r) against the real Pi's estimateTokens, for every
// Pi of the matrix, on every path entry of the corpus (every leaf's path, so side branches are
// covered too), as each release's cut walk counts them (perEntry). Goldens:
// testdata/gen-estimate-goldens.mjs (through interop/pi).
func TestEstimateMatchesPi(t *testing.T) {
	t.Parallel()
	versions, err := pigolden.Versions()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range versions {
		r := pi.MustParseRelease(v)
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			checkEstimateGoldens(t, r)
		})
	}
}

func checkEstimateGoldens(t *testing.T, d pi.Release) {
	data, err := os.ReadFile(filepath.Join("testdata", "estimate-goldens", d.String()+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var goldens map[string]estimateGolden
	if err := json.Unmarshal(data, &goldens); err != nil {
		t.Fatal(err)
	}
	if len(goldens) < 16 {
		t.Fatalf("only %d golden files", len(goldens))
	}
	est := EstimateFor(d)
	checked, nothing := 0, 0
	for name, g := range goldens {
		rel := goldenFiles[name]
		if rel == "" {
			rel = name
		}
		s, err := sessionio.ReadFile(filepath.Join(corpusDir, rel))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, gp := range g.Paths {
			path, err := s.Path(gp.Leaf)
			if err != nil {
				t.Fatalf("%s leaf %q: %v", name, gp.Leaf, err)
			}
			if len(path) != len(gp.Entries) {
				t.Fatalf("%s leaf %q: path has %d entries, Pi's %d", name, gp.Leaf, len(path), len(gp.Entries))
			}
			got := perEntry(path, d, est)
			for i, ge := range gp.Entries {
				var id, typ string
				var want *int
				_ = json.Unmarshal(ge[0], &id)
				_ = json.Unmarshal(ge[1], &typ)
				_ = json.Unmarshal(ge[2], &want)
				e := path[i]
				// v1 files get fresh random ids when migrated (by Pi and by sessionio alike):
				// compare those by position and type.
				if g.Version >= 3 && e.ID != id {
					t.Fatalf("%s leaf %q index %d: id %s, Pi %s", name, gp.Leaf, i, e.ID, id)
				}
				if gotType := strings.SplitN(typ, ":", 2)[0]; e.Type != gotType {
					t.Fatalf("%s index %d: type %s, Pi %s", name, i, e.Type, typ)
				}
				switch {
				case want == nil && got[i] == nil:
					nothing++
					continue
				case want == nil:
					t.Errorf("%s %s (%s): counted %d, Pi counts nothing", name, id, typ, *got[i])
				case got[i] == nil:
					t.Errorf("%s %s (%s): counted nothing, Pi %d", name, id, typ, *want)
				case *got[i] != *want:
					t.Errorf("%s %s (%s): estimate %d, Pi %d", name, id, typ, *got[i], *want)
				}
				checked++
			}
		}
	}
	t.Logf("Pi %s: %d path entries counted as Pi counts them, %d more that both count nothing", d, checked, nothing)
	if checked < 2500 { // the corpus without a generated corpus of the release: about 3,000
		t.Errorf("only %d entries checked", checked)
	}
}

func msg(t *testing.T, raw string) *sessionio.Message {
	t.Helper()
	m, err := sessionio.DecodeMessage(json.RawMessage(raw))
	if err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return m
}

// TestEstimateRules pins the per-role rules on small hand-made messages, including the
// UTF-16 and JSON.stringify subtleties the corpus may not exercise.
func TestEstimateRules(t *testing.T) {
	t.Parallel()
	// want073 is Pi 0.73's count, want086 Pi 0.86's (UserImagesWeigh), want16 Pi 1.6's
	// (SystemMessagesWeigh too).
	tests := []struct {
		name                     string
		raw                      string
		want073, want086, want16 int
	}{
		{"user string", `{"role":"user","content":"abcde"}`, 2, 2, 2},
		{"user blocks, image", `{"role":"user","content":[{"type":"text","text":"abcd"},{"type":"image","data":"AAAA","mimeType":"image/png"},{"type":"text","text":""}]}`, 1, 1201, 1201},
		{"astral char is 2 units", `{"role":"user","content":"😀😀😀"}`, 2, 2, 2},
		{"assistant all parts", `{"role":"assistant","content":[{"type":"text","text":"ab"},{"type":"thinking","thinking":"cd","thinkingSignature":"zzzzzzzzzzzz"},{"type":"toolCall","id":"x","name":"read","arguments":{"path":"a\nb"}}]}`, 6, 6, 6}, // 2+2+4+15 = 23 → 6
		{"tool args reformatted", `{"role":"assistant","content":[{"type":"toolCall","id":"x","name":"","arguments":{ "n" : 1.50 , "b":[true, null] }}]}`, 7, 7, 7},                                                                                    // {"n":1.5,"b":[true,null]} = 25 → 7
		{"toolResult image 4800", `{"role":"toolResult","toolCallId":"x","toolName":"read","content":[{"type":"image","data":"AA","mimeType":"image/png"},{"type":"text","text":"abcd"}],"isError":false}`, 1201, 1201, 1201},
		{"custom string", `{"role":"custom","customType":"x","content":"abcdefgh","display":true}`, 2, 2, 2},
		{"bash", `{"role":"bashExecution","command":"ls","output":"a\nb","exitCode":0,"cancelled":false,"truncated":false}`, 2, 2, 2},
		{"bash excluded still counts (as Pi)", `{"role":"bashExecution","command":"ls","output":"abc","excludeFromContext":true}`, 2, 2, 2},
		{"branch summary", `{"role":"branchSummary","summary":"abcdefghi","fromId":"x"}`, 3, 3, 3},
		{"compaction summary", `{"role":"compactionSummary","summary":"abcd","tokensBefore":5}`, 1, 1, 1},
		// 8 + 3 ("abc"; the removed section counts nothing) + len(`[{"name":"r","n":1}]`) = 20 → 31 chars → 8
		{"system", `{"role":"system","content":"abcdefgh","sections":{"a":"abc","b":null},"toolsAdded":[{ "name":"r", "n":1.0 }]}`, 0, 0, 8},
		{"unknown role", `{"role":"hookMessage","content":"abcdefgh"}`, 0, 0, 0},
		{"empty", `{"role":"user","content":""}`, 0, 0, 0},
	}
	pi073, pi086 := EstimateFor(pi.MustParseRelease("0.73.1")), EstimateFor(pi.MustParseRelease("0.86.1"))
	for _, tc := range tests {
		if got := pi073.Count(msg(t, tc.raw)); got != tc.want073 {
			t.Errorf("%s (Pi 0.73): %d, want %d", tc.name, got, tc.want073)
		}
		if got := pi086.Count(msg(t, tc.raw)); got != tc.want086 {
			t.Errorf("%s (Pi 0.86): %d, want %d", tc.name, got, tc.want086)
		}
		if got := Estimate().Count(msg(t, tc.raw)); got != tc.want16 {
			t.Errorf("%s (Pi 1.6): %d, want %d", tc.name, got, tc.want16)
		}
	}
	if a, b, c := pi073.Name(), pi086.Name(), Estimate().Name(); a == b || b == c || a == c {
		t.Errorf("estimates that count differently share a name (caches key on it): %q %q %q", a, b, c)
	}
	if Estimate().Count(nil) != 0 {
		t.Error("nil message")
	}
}

func TestOverBudget(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tokens, window, reserve int
		want                    bool
	}{
		{183616, 200000, 16384, false}, // exactly at the threshold: still fits (Pi: strictly greater)
		{183617, 200000, 16384, true},
		{0, 0, 16384, true}, // unknown window (0), as in Pi
		{1000, 128000, 16384, false},
	}
	for _, tc := range tests {
		if got := OverBudget(tc.tokens, tc.window, tc.reserve); got != tc.want {
			t.Errorf("OverBudget(%d, %d, %d) = %v", tc.tokens, tc.window, tc.reserve, got)
		}
	}
}
