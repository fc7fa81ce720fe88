package liveappend

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/picontext"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/pisession"
)

// piLine is a message entry as Pi appends it: one line, parent = the writer's own leaf.
func piLine(id, parent string, n int) string {
	if n%2 == 0 {
		return user(id, parent, "prompt "+strconv.Itoa(n))
	}
	return asst(id, parent, "answer "+strconv.Itoa(n))
}

// appendLikePi writes one line the way Pi's appendFileSync does: open with O_APPEND, one
// write, close, no lock, no fsync.
func appendLikePi(file, line string) error { return pisession.Append(file, line) }

// checkPiEntriesOnPath loads the file as Pi would (leaf = last entry line) and fails if any
// of the ids Pi wrote is not on the path from that leaf.
func checkPiEntriesOnPath(t *testing.T, file string, piIDs []string) *sessionio.Session {
	t.Helper()
	s, err := sessionio.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	path := mustPath(t, s, "")
	on := map[string]bool{}
	for _, e := range path {
		on[e.ID] = true
	}
	var off []string
	for _, id := range piIDs {
		if !on[id] {
			off = append(off, id)
		}
	}
	if len(off) > 0 {
		t.Fatalf("%d of %d entries written by the Pi-like writer are off the path Pi loads (leaf %s): %v", len(off), len(piIDs), s.LeafID(), off)
	}
	return s
}

// TestAppendInterleavedWriter puts a live writer's lines exactly where they hurt: between
// the final check and the write, between a write and a restore, and right after the write.
func TestAppendInterleavedWriter(t *testing.T) {
	t.Parallel()
	base := hdr + "\n" + user("a", "", "hi") + "\n" + asst("b", "a", "yo") + "\n"
	cases := []struct {
		name string
		// at maps a hook point to the Pi lines written there (each at the first hit).
		at                                   map[string][]string
		wantIntruders, wantFollow, wantRests int
		wantLeafIsOurs                       bool
	}{
		{name: "nobody writes", wantLeafIsOurs: true},
		{name: "line before our write", at: map[string][]string{"write": {piLine("p1", "b", 2)}}, wantIntruders: 1, wantRests: 1},
		{name: "two lines before our write", at: map[string][]string{"write": {piLine("p1", "b", 2), piLine("p2", "p1", 3)}}, wantIntruders: 2, wantRests: 1},
		{name: "line before our write and before the restore", at: map[string][]string{
			"write": {piLine("p1", "b", 2)}, "restore": {piLine("p2", "p1", 3)}}, wantIntruders: 1, wantFollow: 1, wantRests: 2},
		{name: "line right after our write", at: map[string][]string{"verify": {piLine("p1", "b", 2)}}, wantFollow: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := writeTemp(t, base)
			s, _ := sessionio.ReadFile(p)
			var piIDs []string
			done := map[string]bool{}
			testHooks.Store(p, func(point string) {
				if done[point] {
					return
				}
				done[point] = true
				for _, l := range tc.at[point] {
					if err := appendLikePi(p, l); err != nil {
						t.Error(err)
					}
					var e struct{ ID string }
					_ = json.Unmarshal([]byte(l), &e)
					piIDs = append(piIDs, e.ID)
				}
			})
			t.Cleanup(func() { testHooks.Delete(p) })
			ap, err := Compaction(ctxb, sessionio.Named(p), ExpectOf(s), NewCompaction{Summary: "S", FirstKeptEntryID: "a", TokensBefore: 5})
			if err != nil {
				t.Fatal(err)
			}
			if len(ap.Intruders) != tc.wantIntruders || len(ap.Followers) != tc.wantFollow || len(ap.Restores) != tc.wantRests {
				t.Fatalf("intruders %v, followers %v, restores %v; want %d, %d, %d", ap.Intruders, ap.Followers, ap.Restores, tc.wantIntruders, tc.wantFollow, tc.wantRests)
			}
			if ap.Superseded() == tc.wantLeafIsOurs {
				t.Fatalf("Superseded() = %v", ap.Superseded())
			}
			s2 := checkPiEntriesOnPath(t, p, append([]string{"a", "b"}, piIDs...))
			path := mustPath(t, s2, "")
			onPath := slices.ContainsFunc(path, func(e *sessionio.Entry) bool { return e.ID == ap.ID })
			if onPath != tc.wantLeafIsOurs {
				t.Fatalf("compaction on the loaded path: %v, want %v", onPath, tc.wantLeafIsOurs)
			}
			if tc.wantRests > 0 {
				last := path[len(path)-1]
				if last.ID != ap.Restores[len(ap.Restores)-1] || last.Type != sessionio.TypeCustom || last.CustomType != RestoreCustomType {
					t.Fatalf("leaf %s (%s), want the last restore entry", last.ID, last.Type)
				}
				if got := picontext.Build(path, pi073); len(got.Messages) != 2+len(piIDs) {
					t.Fatalf("context has %d messages, want the %d entries Pi wrote", len(got.Messages), 2+len(piIDs))
				}
			}
			if os.Getenv("COMPACTOR_INTEROP") == "1" {
				checkLeafWithPi(t, p, s2.LeafID(), piIDs)
			}
		})
	}
}

// TestAppendRestoreGolden pins the bytes of a restored file and what the real Pi made of
// them: testdata/append/live-restore.jsonl is the file after a Pi line landed between the
// final check and the write, and live-restore.pi.json is `interop/pi/pi context` on it (leaf,
// path and messages). `make interop` re-checks it against the live Pi.
func TestAppendRestoreGolden(t *testing.T) {
	t.Parallel()
	base := hdr + "\n" + user("a", "", "hi") + "\n" + asst("b", "a", "yo") + "\n"
	p := writeTemp(t, base)
	s, _ := sessionio.ReadFile(p)
	testHooks.Store(p, func(point string) {
		if point == "write" {
			if err := appendLikePi(p, piLine("p1", "b", 2)); err != nil {
				t.Error(err)
			}
		}
	})
	t.Cleanup(func() { testHooks.Delete(p) })
	ap, err := Compaction(ctxb, sessionio.Named(p), ExpectOf(s), NewCompaction{Summary: "S", FirstKeptEntryID: "a", TokensBefore: 5})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p)
	// Ids and times come from the test clock; normalize ours so the golden is stable
	// whatever else ran first in this process.
	got = bytes.ReplaceAll(got, []byte(ap.ID), []byte("cafe0001"))
	got = bytes.ReplaceAll(got, []byte(ap.Restores[0]), []byte("cafe0002"))
	golden := "testdata/append/live-restore.jsonl"
	if os.Getenv("COMPACTOR_UPDATE") == "1" {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("restored file differs from the golden:\n got %s\nwant %s", got, want)
	}
	var pi struct {
		LeafID   string            `json:"leafId"`
		PathIDs  []string          `json:"pathIds"`
		Messages []json.RawMessage `json:"messages"`
	}
	piOut, err := os.ReadFile("testdata/append/live-restore.pi.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(piOut, &pi); err != nil {
		t.Fatal(err)
	}
	s2, err := sessionio.Parse(want, golden)
	if err != nil {
		t.Fatal(err)
	}
	path := mustPath(t, s2, "")
	var ids []string
	for _, e := range path {
		ids = append(ids, e.ID)
	}
	if s2.LeafID() != pi.LeafID || !slices.Equal(ids, pi.PathIDs) {
		t.Fatalf("leaf %s path %v; Pi: leaf %s path %v", s2.LeafID(), ids, pi.LeafID, pi.PathIDs)
	}
	if !jsonEqual(t, rawMessages(picontext.Build(path, pi073).Messages), pi.Messages) {
		t.Fatal("context differs from Pi's")
	}
	if os.Getenv("COMPACTOR_INTEROP") == "1" {
		checkLeafWithPi(t, golden, pi.LeafID, []string{"p1"})
	}
}

// checkLeafWithPi runs the real Pi on the file: its leaf must be leaf and every id in
// piIDs must be on its path.
func checkLeafWithPi(t *testing.T, file, leaf string, piIDs []string) {
	t.Helper()
	pi := piContext(t, file)
	if pi.LeafID != leaf {
		t.Errorf("Pi's leaf %s, want %s", pi.LeafID, leaf)
	}
	for _, id := range piIDs {
		if !slices.Contains(pi.PathIDs, id) {
			t.Errorf("Pi's path lacks %s, written by the live writer", id)
		}
	}
}

// The Pi-like writer runs in its own process (this test binary, re-executed): it reads the
// file once to learn its leaf, as Pi does on load, then appends message entries under its
// own leaf, one write per line with no lock, and prints the ids it wrote.
//
// Its timing is tied to the appender's so that the race is fair whatever the machine's
// load (the race detector makes the appender several times slower): the appender sends a
// byte on the writer's stdin when it starts an attempt; the writer then waits a random
// delay within the duration of a typical attempt (measured between those bytes) and,
// three times out of four, writes a burst of one to three lines a few microseconds apart.
// Bursts thus land anywhere in an attempt: before the final check (the append is refused
// as changed), between the check and the write (intruders, which the append must repair),
// or after the write (followers). The writer ends when its stdin is closed.
const piWriterEnv = "COMPACTOR_TEST_PI_WRITER"

func runPiWriter() {
	spec := strings.Split(os.Getenv(piWriterEnv), "|") // file|seed
	file := spec[0]
	seed, _ := strconv.ParseUint(spec[1], 10, 64)
	s, err := sessionio.ReadFile(file)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	leaf := s.LeafID()
	rnd := rand.New(rand.NewPCG(seed, 1))
	out := bufio.NewWriter(os.Stdout)
	starts := make(chan time.Time, 1024)
	go func() {
		b := make([]byte, 1)
		for {
			if _, err := os.Stdin.Read(b); err != nil {
				close(starts)
				return
			}
			starts <- time.Now()
		}
	}()
	typical := time.Millisecond
	var prev time.Time
	i := 0
	for start := range starts {
		for len(starts) > 0 { // catch up with the newest attempt
			start = <-starts
		}
		if !prev.IsZero() {
			typical = (typical*7 + start.Sub(prev)) / 8
		}
		prev = start
		if rnd.IntN(4) == 0 {
			continue
		}
		time.Sleep(time.Duration(rnd.Int64N(int64(typical) + 1)))
		for n := 1 + rnd.IntN(3); n > 0; n-- {
			id := fmt.Sprintf("f%07x", i)
			if err := appendLikePi(file, piLine(id, leaf, i)); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			leaf = id
			i++
			fmt.Fprintln(out, id)
			time.Sleep(time.Duration(rnd.IntN(20)) * time.Microsecond)
		}
		_ = out.Flush()
	}
	_ = out.Flush()
}

// TestAppendRacesLiveWriter races 1,000 compaction appends (appends that wrote, each read
// and written through one File beneath the file's directory, as a worker's job) against a
// Pi-like writer in another process, in 10 rounds of 100 on a fresh file each (so the file
// stays the size of a session, not of the test), then loads each file as Pi would: every
// entry the writer wrote must be on the path from the leaf. Under the race detector, which
// makes each attempt about 20 times slower and adds nothing to a race between processes,
// it runs one round; `make test` also runs it in full without the race detector.
func TestAppendRacesLiveWriter(t *testing.T) {
	t.Parallel()
	rounds, perRound := 10, 100
	if raceEnabled {
		rounds = 1
	}
	var st raceStats
	for r := range rounds {
		raceRound(t, r, perRound, &st)
	}
	t.Logf("%d appends wrote (%d attempts: %d refused as changed, %d while our compaction was still the leaf); %d superseded: %d intruder lines, %d follower lines, %d restore entries; the writer wrote %d lines; 0 writer entries off the path",
		st.writes, st.attempts, st.changed, st.compacted, st.superseded, st.intruders, st.followers, st.restores, st.piLines)
}

type raceStats struct {
	writes, superseded, intruders, followers, restores, changed, compacted, attempts, piLines int
}

func raceRound(t *testing.T, round, want int, st *raceStats) {
	seed := round + 1 // the writer's random seed
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("round %d: the Pi-like writer ran with seed %d (%s=FILE|%d replays it)", round, seed, piWriterEnv, seed)
		}
	})
	p := filepath.Join(t.TempDir(), fmt.Sprintf("race-%d.jsonl", round))
	if err := os.WriteFile(p, []byte(hdr+"\n"+user("a", "", "hi")+"\n"+asst("b", "a", "yo")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%d", piWriterEnv, p, seed))
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	tick, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	for writes := 0; writes < want; {
		st.attempts++
		if _, err := tick.Write([]byte{1}); err != nil {
			t.Fatalf("round %d: the writer stopped: %v", round, err)
		}
		// As a worker's job does: read and append through one File beneath the store's root.
		f := sessionio.Beneath(filepath.Dir(p), filepath.Base(p))
		s, err := f.Read(sessionio.Options{Light: true})
		if err != nil {
			t.Fatal(err)
		}
		ap, err := Compaction(ctxb, f, ExpectOf(s), NewCompaction{Summary: "S", FirstKeptEntryID: "a", TokensBefore: 5})
		switch {
		case errors.Is(err, ErrChanged):
			st.changed++
			continue
		case errors.Is(err, ErrAlreadyCompacted):
			st.compacted++ // our last compaction is still the leaf: the writer has not written since
			continue
		case err != nil:
			t.Fatal(err)
		}
		writes++
		st.writes++
		st.intruders += len(ap.Intruders)
		st.followers += len(ap.Followers)
		st.restores += len(ap.Restores)
		if ap.Superseded() {
			st.superseded++
		}
	}
	_ = tick.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("round %d: writer: %v", round, err)
	}
	piIDs := strings.Fields(stdout.String())
	st.piLines += len(piIDs)
	s := checkPiEntriesOnPath(t, p, append([]string{"a", "b"}, piIDs...))
	if os.Getenv("COMPACTOR_INTEROP") == "1" {
		checkLeafWithPi(t, p, s.LeafID(), piIDs)
	}
}
