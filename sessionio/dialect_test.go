package sessionio_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/sessionio"
)

func TestParseRelease(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"": "1.6.0", "latest": "1.6.0", "1.6": "1.6.0", "1.6.0": "1.6.0", "v1.6.0": "1.6.0",
		"0.73": "0.73.1", " 0.73.1 ": "0.73.1", "0.73.0": "0.73.0", "0.80.3": "0.80.3", "1.5": "1.5.2", "9.9.9": "9.9.9",
		"1.7.0-beta.1": "1.7.0-beta.1", "0.0.0": "0.0.0", "1.2": "1.2.0"} {
		got, err := sessionio.ParseRelease(in)
		if err != nil || got.String() != want {
			t.Errorf("ParseRelease(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"1", "1.6.0.1", "x.y.z", "1.-6.0", "+1.6.0", "01.6.0", "1.6.0-", "1.6-beta", "1.6.0-be ta",
		strings.Repeat("1", 40), "123456.0.0"} {
		if _, err := sessionio.ParseRelease(bad); err == nil {
			t.Errorf("ParseRelease(%q) accepted", bad)
		}
	}
	if !sessionio.MustParseRelease("0.80.3").Known() || sessionio.MustParseRelease("9.9.9").Known() ||
		sessionio.MustParseRelease("1.2.0").Known() || sessionio.MustParseRelease("1.6.0-rc.1").Known() || sessionio.MustParseRelease("0.0.0").Known() {
		t.Error("Known: only the published releases compactor is proven against")
	}
	if (sessionio.Release{}).String() != sessionio.Latest.String() || !(sessionio.Release{}).Has(sessionio.ContextEdits) {
		t.Error("the zero release is the newest")
	}
}

// TestBehavioursFollowTheirReleases: each behaviour holds from its first release (and until
// the release that undid it), in every known release and in unknown ones by their number;
// an unknown release newer than every known one has the newest's rules.
func TestBehavioursFollowTheirReleases(t *testing.T) {
	t.Parallel()
	for _, b := range sessionio.Behaviours() {
		since := b.Since()
		before := sessionio.MustParseRelease(fmt.Sprintf("%d.%d.%d-x", major(since), minor(since), patch(since)))
		if !since.Has(b) || before.Has(b) {
			t.Errorf("%s: holds in %s %v, in a pre-release of it %v", b, since, since.Has(b), before.Has(b))
		}
		if until, ok := b.Until(); ok && (until.Has(b) || !sessionio.MustParseRelease("0.86.1").Has(b)) {
			t.Errorf("%s: still holds in %s", b, until)
		}
		if b.Evidence() == "" || b.String() == "" {
			t.Errorf("%s: no evidence", b)
		}
	}
	if got, want := sessionio.MustParseRelease("9.9.9").Rules(), sessionio.Latest.Rules(); !slices.Equal(got, want) {
		t.Errorf("9.9.9 has %v, the newest %v", got, want)
	}
	if r := sessionio.MustParseRelease("0.75.5"); len(r.Rules()) != 0 {
		t.Errorf("0.75.5 has %v; it reads, cuts and writes as 0.73", r.Rules())
	}
	for _, c := range []struct {
		v    string
		b    sessionio.Behaviour
		want bool
	}{
		{"0.75.5", sessionio.UserImagesWeigh, false}, {"0.76.0", sessionio.UserImagesWeigh, true},
		{"0.79.7", sessionio.NoPlanWhenNothingToSummarize, false}, {"0.79.8", sessionio.NoPlanWhenNothingToSummarize, true},
		{"0.80.3", sessionio.ContextMessagesWeigh, false}, {"0.80.6", sessionio.ContextMessagesWeigh, true},
		{"0.85.1", sessionio.ResentSummary, true}, {"0.86.1", sessionio.ResentSummary, true}, {"0.87.0", sessionio.ResentSummary, false},
		{"1.0.3", sessionio.ThinkingOmitted, false}, {"1.3.0", sessionio.ThinkingOmitted, true},
		{"1.5.2", sessionio.SurrogateSafeTruncation, true}, {"1.5.0", sessionio.SurrogateSafeTruncation, false},
	} {
		if got := sessionio.MustParseRelease(c.v).Has(c.b); got != c.want {
			t.Errorf("%s has %s: %v, want %v", c.v, c.b, got, c.want)
		}
	}
	sets := sessionio.RuleSets()
	if sets[len(sets)-1] != sessionio.Latest || len(sets) < 8 {
		t.Errorf("rule sets %v", sets)
	}
}

func major(r sessionio.Release) int { return part(r, 0) }
func minor(r sessionio.Release) int { return part(r, 1) }
func patch(r sessionio.Release) int { return part(r, 2) }
func part(r sessionio.Release, i int) int {
	var n [3]int
	fmt.Sscanf(r.String(), "%d.%d.%d", &n[0], &n[1], &n[2])
	return n[i]
}

// TestUnproven: a known release is served silently; any other says how it is served.
func TestUnproven(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]string{"1.6.0": "", "0.80.3": "", "9.9.9": "newer than every release", "1.7.0-beta.1": "newer than every release",
		"0.72.1": "older than every release", "1.2.0": "not a release compactor has proven", "1.6.0-rc.1": "not a release compactor has proven"} {
		got := sessionio.MustParseRelease(v).Unproven()
		if want == "" && got != "" || want != "" && !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", v, got, want)
		}
	}
}

// TestCheckLoadsBOM: Pi 1.6 refuses a header line with a byte-order mark (its loader parses
// each line as it is), Pi 0.73 trimmed it away; blank lines before the header are skipped by
// both.
func TestCheckLoadsBOM(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	header := `{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/p"}`
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bom := write("bom.jsonl", "\ufeff"+header+"\n")
	err := sessionio.CheckLoads(bom, sessionio.MustParseRelease("0.78.1"))
	var fe *sessionio.FileError
	if !errors.As(err, &fe) || fe.Line != 1 || !errors.Is(err, sessionio.ErrPaddedHeader) || !strings.Contains(err.Error(), "byte-order mark") {
		t.Fatalf("Pi 1.6, BOM: %v", err)
	}
	if err := sessionio.CheckLoads(bom, sessionio.MustParseRelease("0.78.0")); err != nil {
		t.Fatalf("Pi 0.78.0 reads a BOM'd file: %v", err)
	}
	nbsp := write("nbsp.jsonl", "\n  \n\u00a0"+header+"\n")
	if err := sessionio.CheckLoads(nbsp, sessionio.Latest); !errors.As(err, &fe) || fe.Line != 3 {
		t.Fatalf("Pi 1.6, a no-break space on line 3: %v", err)
	}
	for name, content := range map[string]string{"plain": header + "\n", "blank-first": "\n\r\n" + header + "\r\n", "empty": "", "garbage": "hello\n"} {
		if err := sessionio.CheckLoads(write(name+".jsonl", content), sessionio.Latest); err != nil {
			t.Errorf("%s: %v (what both Pis refuse is left to the read)", name, err)
		}
	}
}

func systemMsg(t *testing.T, raw string) *sessionio.Message {
	t.Helper()
	m, err := sessionio.DecodeMessage(json.RawMessage(raw))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCurrentSystemMessage: the replay of system messages keeps a JavaScript Map's order
// (a section or tool set again keeps its place, one removed and set again goes last), joins
// the texts that are not empty, and takes the first timestamp.
func TestCurrentSystemMessage(t *testing.T) {
	t.Parallel()
	msgs := []*sessionio.Message{
		systemMsg(t, `{"role":"system","content":"You are an agent.","sections":{"a":"A1","b":"B1","c":"C1"},"toolsAdded":[{"name":"read","d":1.50},{"name":"bash"}],"timestamp":5}`),
		systemMsg(t, `{"role":"user","content":"not a system message"}`),
		systemMsg(t, `{"role":"system","content":"","sections":{"a":null,"b":"B2"},"toolsRemoved":[{"name":"read"}],"timestamp":9}`),
		systemMsg(t, `{"role":"system","content":[{"type":"text","text":"More."},{"type":"text","text":"Lines."}],"sections":{"a":"A3"},"toolsAdded":[{"name":"read"},{"name":"bash","v":2}]}`),
	}
	got := sessionio.CurrentSystemMessage(msgs)
	want := `{"role":"system","content":"You are an agent.\n\nMore.\nLines.","sections":{"b":"B2","c":"C1","a":"A3"},"toolsAdded":[{"name":"bash","v":2},{"name":"read"}],"timestamp":5}`
	if got == nil || string(got.Raw) != want {
		t.Fatalf("current system message\n got %s\nwant %s", got.Raw, want)
	}
	if sessionio.CurrentSystemMessage(msgs[1:2]) != nil {
		t.Error("no system message: none")
	}
	if m := sessionio.CurrentSystemMessage([]*sessionio.Message{systemMsg(t, `{"role":"system","content":"x"}`)}); m != nil {
		t.Errorf("no timestamp and no tools: Pi returns none, got %s", m.Raw)
	}
	if s := string(got.WithTimestamp(1.7e12).Raw); !strings.HasSuffix(s, `,"timestamp":1700000000000}`) {
		t.Errorf("WithTimestamp: %s", s)
	}
}

func TestReplaceMember(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ obj, val, want string }{
		{`{"role":"user","content":"a","timestamp":1}`, `[]`, `{"role":"user","content":[],"timestamp":1}`},
		{`{"role":"user","timestamp":1}`, `"x"`, `{"role":"user","timestamp":1,"content":"x"}`},
		{`{ "role" : "user", "content":null, "content":"b" }`, `"c"`, `{"role":"user","content":"c"}`},
	} {
		if got := string(sessionio.ReplaceMember(json.RawMessage(tc.obj), "content", json.RawMessage(tc.val))); got != tc.want {
			t.Errorf("ReplaceMember(%s) = %s, want %s", tc.obj, got, tc.want)
		}
	}
}

// TestCompatibilityDocNamesEveryBehaviour: docs/compatibility.md has a row for every
// behaviour, with the release it holds from (and until).
func TestCompatibilityDocNamesEveryBehaviour(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/compatibility.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range sessionio.Behaviours() {
		until := " "
		if u, ok := b.Until(); ok {
			until = " " + u.String() + " "
		}
		row := fmt.Sprintf("| `%s` | %s |%s|", b, b.Since(), until)
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/compatibility.md has no row starting %q", row)
		}
	}
}
