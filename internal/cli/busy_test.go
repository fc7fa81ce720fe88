package cli

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/engine"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
)

// The skips for a live agent (a turn in progress, a line being written) are marked busy,
// so that sweeps come back to such a session after their backoff: left alone it becomes
// compactable after AbandonedAfter without its file changing. Lasting skips are not.
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
			res, herr := jobHandler(e, nil).Handle(context.Background(), pipeline.Job{Kind: pipeline.KindCompact, OnlyOverBudget: true}, file)
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
