package worker

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/engine"
	"github.com/compactor-dev/compactor/outcome"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/wire"
)

// The worker marks a skip busy from the engine's Result.Busy alone, never from the
// reason's words: every cause is marked (sweeps come back to such a session after their
// backoff), a skip without one is not, whatever its reason reads.
func TestBusyIsTheEnginesField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cause  engine.BusyCause
		reason string
	}{
		{engine.BusyTurn, "the words do not matter"},
		{engine.BusyWrite, ""},
		{engine.BusyChanged, "x"},
		{"", "turn in progress: words that once decided"},
		{"", "busy: nor do these"},
	} {
		res := jobResult(&engine.Result{Outcome: outcome.Skipped, Reason: tc.reason, Busy: tc.cause})
		want := tc.cause != ""
		if res.Busy != want || res.Reason != tc.reason {
			t.Errorf("cause %q, reason %q: %+v, want busy %v", tc.cause, tc.reason, res, want)
		}
		if dec := pipeline.Classify(res, nil, 1, 5, time.Second, time.Minute); dec.Outcome != pipeline.OutcomeSkipped || dec.Busy != want {
			t.Errorf("cause %q: decision %+v", tc.cause, dec)
		}
	}
}

// Through the handler with the real engine: the skips for a live agent (a turn in
// progress, a line being written) are marked busy, since left alone the session becomes
// compactable after AbandonedAfter without its file changing; a lasting skip is not.
func TestBusySkipsAreMarked(t *testing.T) {
	t.Parallel()
	eng, err := engine.New(summarize.NewExtractive(), engine.Settings{KeepRecentTokens: 2000, ContextWindow: 20000})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(liveSrc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sessionio.ReadFile(liveSrc)
	if err != nil {
		t.Fatal(err)
	}
	leaf := s.LeafID()
	for _, tc := range []struct {
		name, tail string
		busy       bool
	}{
		{"turn in progress", piUser("pu000001", leaf) + "\n", true},
		{"write in progress", `{"type":"message","id":"pu000002","parentId":"` + leaf + `","message":{"role":"us`, true},
		{"under budget", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			file := filepath.Join(t.TempDir(), "s.jsonl")
			if err := os.WriteFile(file, append(append([]byte{}, data...), tc.tail...), 0o644); err != nil {
				t.Fatal(err)
			}
			e := eng
			if !tc.busy {
				if e, err = engine.New(eng.Summarizer, engine.Settings{ContextWindow: 1 << 20}); err != nil {
					t.Fatal(err)
				}
			}
			res, herr := Handler(e, PiVersions{}, nil, Queues{}).Handle(context.Background(), wire.Job{Kind: wire.KindCompact, OnlyOverBudget: true}, file)
			if herr != nil || res.Outcome != pipeline.OutcomeSkipped {
				t.Fatalf("handler %+v, %v; want a skip", res, herr)
			}
			if res.Busy != tc.busy {
				t.Errorf("skip %q: busy %v, want %v", res.Reason, res.Busy, tc.busy)
			}
			dec := pipeline.Classify(res, herr, 1, 5, time.Second, time.Minute)
			if dec.Outcome != pipeline.OutcomeSkipped || dec.Busy != tc.busy {
				t.Errorf("decision %+v", dec)
			}
		})
	}
}
