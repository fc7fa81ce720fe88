package cutpoint

import (
	"flag"
	"os"
	"testing"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/tokenize"
	"pgregory.net/rapid"
)

// TestMain sets rapid's number of checks to 200 unless -rapid.checks is given (make
// proptest runs 10,000) or CUTPOINT_PROPTEST_CHECKS says otherwise.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "rapid.checks" {
			explicit = true
		}
	})
	if !explicit {
		n := os.Getenv("CUTPOINT_PROPTEST_CHECKS")
		if n == "" {
			n = "200"
		}
		if err := flag.Set("rapid.checks", n); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}

var counters = func() []Counter {
	tk, err := tokenize.New(tokenize.CounterTiktoken, "o200k_base")
	if err != nil {
		panic(err)
	}
	return []Counter{tokenize.Estimate(), tk}
}()

// drawCase parses a random session and draws settings and a counter.
func drawCase(t *rapid.T) ([]*sessionio.Entry, Settings, Counter) {
	d := rapid.SampledFrom(pi.Releases()).Draw(t, "release")
	data := genSession(t, d)
	s, err := sessionio.Parse(data, "gen.jsonl")
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, data)
	}
	path, err := s.Path("")
	if err != nil {
		t.Fatalf("Path: %v", err)
	}
	settings := DefaultSettings()
	settings.Release = d
	settings.KeepRecentTokens = rapid.IntRange(0, 6000).Draw(t, "keepRecentTokens")
	c := counters[rapid.IntRange(0, len(counters)-1).Draw(t, "counter")]
	if c.Name() == tokenize.CounterEstimate {
		c = tokenize.EstimateFor(settings.Release) // Pi's own estimate for the dialect's Pi
	}
	return path, settings, c
}

func checkPolicy(t *testing.T, pol Policy, allowPiQuirk bool) {
	rapid.Check(t, func(t *rapid.T) {
		path, s, c := drawCase(t)
		p, err := pol.Plan(path, s, c)
		if err != nil {
			t.Fatalf("Plan: %v", err)
		}
		if !p.Prepared {
			if len(path) > 0 && path[len(path)-1].Type != sessionio.TypeCompaction && p.Reason != ReasonNothingToSummarize {
				t.Fatalf("not prepared (%s) although the path does not end in a compaction", p.Reason)
			}
			return
		}
		for _, v := range CheckInvariants(path, p) {
			if allowPiQuirk && isDocumentedPiQuirk(path, p, v) {
				continue
			}
			t.Fatalf("%s plan (keep %d, counter %s, firstKept %s): %v", pol.Name(), s.KeepRecentTokens, c.Name(), p.FirstKeptEntryID, v)
		}
		if len(p.Summarize) != len(p.MessagesToSummarize) || len(p.Prefix) != len(p.TurnPrefix) {
			t.Fatalf("messages and ids disagree")
		}
		if p.IsSplitTurn != (p.TurnStartIndex >= 0) && pol.Name() != PolicyPi {
			t.Fatalf("isSplitTurn %v with turnStartIndex %d", p.IsSplitTurn, p.TurnStartIndex)
		}
		switch pol.Name() {
		case PolicyTurn:
			if p.IsSplitTurn {
				t.Fatalf("turn policy split a turn at %s", p.FirstKeptEntryID)
			}
		case PolicyNearest:
			// Pi's cut, when it is safe, is one of nearest's candidates: nearest must be
			// at least as close to the budget. (Pi may plan nothing: from 0.79.8 when its cut
			// would summarize nothing.)
			pp, _ := Pi{}.Plan(path, s, c)
			if pp.Prepared && len(CheckInvariants(path, pp)) == 0 && abs(p.KeptTokens-s.KeepRecentTokens) > abs(pp.KeptTokens-s.KeepRecentTokens) {
				t.Fatalf("nearest keeps %d, pi keeps %d, budget %d: pi is closer", p.KeptTokens, pp.KeptTokens, s.KeepRecentTokens)
			}
		}
	})
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func TestPropertyPiKeepsInvariantsOrDocumentedQuirk(t *testing.T) {
	t.Parallel()
	checkPolicy(t, Pi{}, true)
}

func TestPropertyTurnKeepsInvariants(t *testing.T) {
	t.Parallel()
	checkPolicy(t, Turn{}, false)
}

func TestPropertyNearestKeepsInvariants(t *testing.T) {
	t.Parallel()
	checkPolicy(t, Nearest{}, false)
}

// TestPropertyPiQuirkOccurs makes sure the generator does produce the case Pi gets wrong
// (a cut between a tool call and its result), so the properties above are not vacuous.
func TestPropertyPiQuirkOccurs(t *testing.T) {
	t.Parallel()
	found := false
	rapid.Check(t, func(t *rapid.T) {
		if found {
			return
		}
		path, s, c := drawCase(t)
		p, _ := Pi{}.Plan(path, s, c)
		for _, v := range CheckInvariants(path, p) {
			if isDocumentedPiQuirk(path, p, v) {
				found = true
			}
		}
	})
	if !found {
		t.Errorf("no generated session made Pi cut between a tool call and its result")
	}
}
