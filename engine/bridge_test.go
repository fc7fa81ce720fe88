package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/tokenize"
)

// bridgeSession is a session grown to 16 turns, prepared as Pi's extension asks for it
// (policy pi, Pi's estimate), then grown by 5 more turns while the preparation was made.
func bridgeSession(t *testing.T) (eng *Engine, file string, prep *Prepared) {
	t.Helper()
	eng, err := New(summarize.NewExtractive(), Settings{KeepRecentTokens: 3000, Policy: cutpoint.PolicyPi, Counter: tokenize.CounterEstimate})
	if err != nil {
		t.Fatal(err)
	}
	file = filepath.Join(t.TempDir(), "s.jsonl")
	if err := os.WriteFile(file, []byte(`{"type":"session","version":3,"id":"019a0000-0000-7000-8000-0000000b41d6","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	leaf := growSession(t, file, "", 0, 16)
	prep, _, err = eng.Prepare(context.Background(), Request{File: file}, nil)
	if err != nil || prep == nil {
		t.Fatalf("prepare: %v", err)
	}
	prep.Store, prep.Path = "default", "s.jsonl"
	growSession(t, file, leaf, 16, 21)
	return eng, file, prep
}

// TestBridgeReachesPisCut: bridged to the cut Pi makes now, the preparation summarizes
// exactly what Pi would (its messages and split-turn prefix), lists the files of the whole
// span, keeps its own summary and adds the gap's commands, and its context fits as Pi
// will build it.
func TestBridgeReachesPisCut(t *testing.T) {
	t.Parallel()
	eng, file, prep := bridgeSession(t)
	pi, err := Plan(file, Settings{Policy: cutpoint.PolicyPi, Counter: tokenize.CounterEstimate, KeepRecentTokens: 3000, ReserveTokens: 16384}, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pi.Plan.FirstKeptEntryIndex <= indexOf(pi.Path, prep.FirstKeptEntryID) {
		t.Fatalf("the test needs Pi's cut (%s) after the prepared one (%s)", pi.Plan.FirstKeptEntryID, prep.FirstKeptEntryID)
	}
	got, err := eng.Bridge(context.Background(), BridgeRequest{File: file, FirstKeptEntryID: pi.Plan.FirstKeptEntryID}, prep)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]string{}, pi.Plan.MessagesToSummarize...), pi.Plan.TurnPrefix...)
	if !slices.Equal(got.SummarizedEntryIDs, want) {
		t.Fatalf("summarized entries differ from Pi's:\n got %v\nwant %v", got.SummarizedEntryIDs, want)
	}
	if got.FirstKeptEntryID != pi.Plan.FirstKeptEntryID || got.LeafID != pi.Path[len(pi.Path)-1].ID || got.PreviousCompactionID != nil {
		t.Fatalf("cut %s leaf %s, want %s and the file's leaf", got.FirstKeptEntryID, got.LeafID, pi.Plan.FirstKeptEntryID)
	}
	if !slices.Equal(got.Details.ReadFiles, pi.Plan.FileOps.ReadFiles) || !slices.Equal(got.Details.ModifiedFiles, nonNil(pi.Plan.FileOps.ModifiedFiles)) {
		t.Fatalf("file lists differ from Pi's: %v vs %v", got.Details, pi.Plan.FileOps)
	}
	base, _ := strings.CutSuffix(prep.Summary, summarize.FormatFileOperations(prep.Details.ReadFiles, prep.Details.ModifiedFiles))
	for _, line := range strings.Split(base, "\n") {
		if line != "- (none)" && !strings.Contains(got.Summary, line) {
			t.Fatalf("the prepared summary's line %q is gone", line)
		}
	}
	// The gap's last file read is named (its turn was summarized by the bridge alone).
	lastGapRead := fmt.Sprintf("src/mod%d.go", indexTurn(pi.Path, pi.Plan.FirstKeptEntryIndex-1))
	if !strings.Contains(got.Summary, lastGapRead) || !strings.HasSuffix(got.Summary, summarize.FormatFileOperations(got.Details.ReadFiles, got.Details.ModifiedFiles)) {
		t.Fatalf("the bridged summary lacks %s or its file lists:\n%s", lastGapRead, got.Summary)
	}
	if got.Bridge == nil || got.Bridge.FromEntryID != prep.FirstKeptEntryID || got.Bridge.Messages != len(want)-len(prep.SummarizedEntryIDs) || got.Bridge.Items == 0 {
		t.Fatalf("bridge info %+v", got.Bridge)
	}
	est := tokenize.Estimate()
	if kept := keptTokens(pi.Path, pi.Plan.FirstKeptEntryIndex, pi.Release, est); got.KeptTokensEstimate != kept {
		t.Fatalf("kept estimate %d, want %d", got.KeptTokensEstimate, kept)
	}
	if got.History != "" {
		t.Fatalf("a bridged value offers its history to incremental preparations")
	}
	// The bridged cut is the plan Pi makes: the invariants hold for it.
	if v := cutpoint.CheckInvariants(pi.Path, pi.Plan); len(v) > 0 {
		t.Fatalf("Pi's plan breaks an invariant: %v", v)
	}
	// The file was only read.
	s, err := sessionio.ReadFile(file)
	if err != nil || s.LeafID() != got.LeafID {
		t.Fatalf("the session changed (%v)", err)
	}
}

// TestBridgeRefuses: a preparation made for another state is stale, a cut that is not one
// is bad input; neither writes anything.
func TestBridgeRefuses(t *testing.T) {
	t.Parallel()
	eng, file, prep := bridgeSession(t)
	s, err := sessionio.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	path, _ := s.Path("")
	var toolResult, earlyUser string
	for _, e := range path {
		if e.IsMessage(sessionio.RoleToolResult) {
			toolResult = e.ID
		}
		if e.IsMessage(sessionio.RoleUser) && earlyUser == "" {
			earlyUser = e.ID
		}
	}
	other := *prep
	other.SessionID = "019a0000-0000-7000-8000-000000000000"
	compacted := *prep
	c := "c0mp0001"
	compacted.PreviousCompactionID = &c
	offBranch := *prep
	offBranch.LeafID = "deadbeef"
	otherRules := *prep
	otherRules.PiVersion = "1.0.3" // thinking still serialized: not what the session's Pi 1.6.0 asks
	if prep.PiVersion != pi.Latest.String() {
		t.Fatalf("a preparation says the release whose rules made it: %q", prep.PiVersion)
	}
	for _, tc := range []struct {
		name  string
		prep  *Prepared
		cut   string
		stale bool
	}{
		{"other session", &other, prep.FirstKeptEntryID, true},
		{"another compaction", &compacted, prep.FirstKeptEntryID, true},
		{"leaf off the branch", &offBranch, prep.FirstKeptEntryID, true},
		{"made by another Pi's rules", &otherRules, prep.FirstKeptEntryID, true},
		{"cut before the prepared one", prep, earlyUser, true},
		{"cut on a tool result", prep, toolResult, false},
		{"cut not in the file", prep, "nosuchid", false},
	} {
		_, err := eng.Bridge(context.Background(), BridgeRequest{File: file, FirstKeptEntryID: tc.cut}, tc.prep)
		var se *StaleError
		var ie *InputError
		switch {
		case err == nil:
			t.Errorf("%s: bridged", tc.name)
		case tc.stale && !errors.As(err, &se):
			t.Errorf("%s: %v, want a stale preparation", tc.name, err)
		case !tc.stale && !errors.As(err, &ie):
			t.Errorf("%s: %v, want bad input", tc.name, err)
		}
	}
	if after, _ := sessionio.ReadFile(file); after.LeafID() != s.LeafID() {
		t.Fatal("the session changed")
	}
}

func indexOf(path []*sessionio.Entry, id string) int {
	for i, e := range path {
		if e.ID == id {
			return i
		}
	}
	return -1
}

// indexTurn is the turn number growSession gave the entry at path[i] (its id's digits).
func indexTurn(path []*sessionio.Entry, i int) int {
	var n int
	fmt.Sscanf(path[i].ID[1:], "%d", &n)
	return n
}

// A bridged compaction asks a base job for its gap at once only when compactions come less
// than two summary latencies apart: the cycle since the latest compaction (or the session's
// start) against the preparation's latency.
func TestFastPace(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	ts := func(d time.Duration) string { return now.Add(-d).Format(time.RFC3339Nano) }
	src := func(start string, compactedAt ...string) *Source {
		s := &Source{Session: &sessionio.Session{Header: sessionio.Header{Timestamp: start}}}
		s.Path = []*sessionio.Entry{{ID: "u1", Type: sessionio.TypeMessage}}
		for i, at := range compactedAt {
			s.Path = append(s.Path, &sessionio.Entry{ID: fmt.Sprint("c", i), Type: sessionio.TypeCompaction, Timestamp: at})
		}
		return s
	}
	prep := func(latency time.Duration) *Prepared {
		return &Prepared{RequestedAt: now.Add(-time.Hour), CreatedAt: now.Add(-time.Hour + latency)}
	}
	for _, c := range []struct {
		name string
		src  *Source
		prep *Prepared
		want bool
	}{
		{"1.5 latencies since the latest compaction", src(ts(time.Hour), ts(time.Minute), ts(15*time.Second)), prep(10 * time.Second), true},
		{"2.5 latencies since the latest compaction", src(ts(time.Hour), ts(25*time.Second)), prep(10 * time.Second), false},
		{"no compaction: since the session's start", src(ts(15 * time.Second)), prep(10 * time.Second), true},
		{"no compaction, an old session", src(ts(time.Hour)), prep(10 * time.Second), false},
		{"a preparation not asked by a job", src(ts(time.Second)), &Prepared{CreatedAt: now}, false},
		{"no timestamp to judge by", src("", "not a time"), prep(10 * time.Second), true},
	} {
		if got := fastPace(c.src, c.prep, now); got != c.want {
			t.Errorf("%s: fast pace %v, want %v", c.name, got, c.want)
		}
	}
}
