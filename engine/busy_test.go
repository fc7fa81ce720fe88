package engine

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/compactor-dev/compactor/outcome"
	"github.com/compactor-dev/compactor/summarize"
)

// writingSummarizer is the extractive summarizer with a live agent beside it: the first
// time it is asked for a summary, the agent appends lines to the session file.
type writingSummarizer struct {
	summarize.Summarizer
	once  sync.Once
	write func()
}

func (w *writingSummarizer) Summarize(ctx context.Context, req summarize.Request) (summarize.Result, error) {
	w.once.Do(w.write)
	return w.Summarizer.Summarize(ctx, req)
}

func appendLines(t *testing.T, file, text string) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Error(err)
	}
}

func userLine(id, parent string) string {
	return fmt.Sprintf(`{"type":"message","id":%q,"parentId":%q,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":[{"type":"text","text":"and now?"}],"timestamp":1767225601000}}`+"\n", id, parent)
}

// Every skip for a busy session says its cause in Result.Busy, which the worker decides
// on (sweeps try the session again after a backoff), whatever the reason's words; a skip
// that lasts until the file changes says none, and a preparation is never busy.
func TestBusySkipsSayTheirCause(t *testing.T) {
	t.Parallel()
	// model_change bbbb0001, user bbbb0002, ... leaf bbbb0007 (an answer): idle.
	const src = "../testdata/corpus/12-tricky-custom-message-cut.jsonl"
	const leaf = "bbbb0007"
	for _, tc := range []struct {
		name   string
		branch bool   // a branch summary to bbbb0002, else a compaction
		before string // appended to the file before the request (just now)
		during string // appended while the summary is written
		keep   int
		want   BusyCause
	}{
		{name: "turn in progress", before: userLine("pu000001", leaf), want: BusyTurn},
		{name: "write in progress", before: `{"type":"message","id":"pu000002","parentId":"` + leaf + `","message":{"role":"us`, want: BusyWrite},
		{name: "branch summary, turn in progress", branch: true, before: userLine("pu000001", leaf), want: BusyTurn},
		{name: "a turn started while summarizing", during: userLine("pu000003", leaf), want: BusyTurn},
		{name: "changed while summarizing: the agent went to another branch", during: userLine("pu000004", "bbbb0001"), want: BusyChanged},
		{name: "branch summary, changed while summarizing", branch: true, during: userLine("pu000005", leaf), want: BusyChanged},
		{name: "nothing to summarize: not busy", keep: 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			file := copyFile(t, src)
			appendLines(t, file, tc.before)
			sum := &writingSummarizer{Summarizer: summarize.NewExtractive(), write: func() { appendLines(t, file, tc.during) }}
			eng, err := New(sum, Settings{KeepRecentTokens: 2000})
			if err != nil {
				t.Fatal(err)
			}
			req := Request{File: file, Settings: Settings{KeepRecentTokens: tc.keep}}
			var res *Result
			if tc.branch {
				req.TargetID = "bbbb0002"
				res, err = eng.BranchSummary(context.Background(), req)
			} else {
				res, err = eng.Compact(context.Background(), req)
			}
			if err != nil || res.Outcome != outcome.Skipped {
				t.Fatalf("%+v, %v; want a skip", res, err)
			}
			if res.Busy != tc.want {
				t.Errorf("skip %q: busy %q, want %q", res.Reason, res.Busy, tc.want)
			}
		})
	}
	t.Run("prepare mid-turn", func(t *testing.T) {
		t.Parallel()
		file := copyFile(t, src)
		appendLines(t, file, userLine("pu000001", leaf))
		eng, err := New(summarize.NewExtractive(), Settings{KeepRecentTokens: 2000})
		if err != nil {
			t.Fatal(err)
		}
		pr, res, err := eng.Prepare(context.Background(), Request{File: file}, nil)
		if err != nil || pr == nil || res.Outcome != outcome.Done || res.Busy != "" {
			t.Fatalf("%+v, %v; want a preparation, not busy", res, err)
		}
	})
}
