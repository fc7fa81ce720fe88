package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/tokenize"
)

// makeSpanJob runs a span-only base job for anchor on what is stored now, without landing
// it (the job is in flight while the world moves on).
func (w *baseWorld) makeSpanJob(anchor BaseAnchor) *Base {
	w.t.Helper()
	anchor = BaseAnchor{LeafID: anchor.LeafID, FirstKeptEntryID: anchor.FirstKeptEntryID, SummarySHA256: anchor.SummarySHA256}
	b, res, err := w.eng.MakeBase(context.Background(), BaseRequest{File: w.file, Anchor: anchor, SpanOnly: true, Settings: Settings{Pi: w.pi, Counter: tokenize.CounterEstimate}}, w.stored)
	if err != nil || b == nil {
		w.t.Fatalf("span job for %s: %v %+v", anchor.FirstKeptEntryID, err, res)
	}
	return b
}

// extractedCompactions has Pi compact n times with the extract (no base lands between them),
// the agent going on after each, and returns each compaction's anchor and the steps of its
// span.
func (w *baseWorld) extractedCompactions(n int) (anchors []BaseAnchor, spans [][]int) {
	w.t.Helper()
	for k := 1; k <= n; k++ {
		x := w.extract()
		anchors = append(anchors, w.stored.Anchor)
		w.leaf = piWrites(w.t, w.file, fmt.Sprintf("c000000%d", k), w.leaf, x)
		spans = append(spans, w.spanSteps(x.FirstKeptEntryID))
		w.grow(12)
	}
	return anchors, spans
}

// x4Anchor names the compaction Pi writes with x (the base's anchor after the extract).
func x4Anchor(t *testing.T, w *baseWorld, x *Prepared) BaseAnchor {
	t.Helper()
	made, _ := x.LeftBase(w.leaf)
	return made.Anchor
}

func (w *baseWorld) land(b *Base) string {
	next, why := b.Land(w.stored)
	if next != nil {
		w.stored = next
	}
	if !b.spanOnly || why == "" {
		cut := b.Anchor.FirstKeptEntryID
		if b.spanOnly {
			cut = b.Segments[0].Anchor.FirstKeptEntryID
		}
		w.stored = w.stored.WithoutPending(cut) // the job has ended
	}
	return why
}

// TestSegmentsWhenFasterThanTheModel: three compactions come faster than a summary; each
// span's job starts at once. The first reads its span (nothing before it); the two after
// it read their own spans alone, with no previous summary, while the first is in flight.
// They land in any order; the next compaction's summary builds on all three model texts,
// reads nothing again, and a merge folds them into one with one request over model text
// only. For both Pi releases.
func TestSegmentsWhenFasterThanTheModel(t *testing.T) {
	t.Parallel()
	for i, pi := range []string{"0.73.1", "1.6.0"} {
		t.Run(pi, func(t *testing.T) {
			t.Parallel()
			w := newBaseWorld(t, pi, fmt.Sprintf("019a0000-0000-7000-8000-00000005e6a%d", i))
			anchors, spans := w.extractedCompactions(3)
			// All three jobs start before any lands.
			var jobs []*Base
			for k, a := range anchors {
				jobs = append(jobs, w.makeSpanJob(a))
				req := w.model.last()
				if got := steps(req.Messages); !slices.Equal(got, spans[k]) || req.PreviousSummary != "" {
					t.Fatalf("job %d read steps %v on %q, its span is %v", k+1, got, firstLine(req.PreviousSummary), spans[k])
				}
			}
			if jobs[0].spanOnly || !jobs[1].spanOnly || !jobs[2].spanOnly {
				t.Fatalf("span-only: %v %v %v, want the first whole (nothing before it), the others alone", jobs[0].spanOnly, jobs[1].spanOnly, jobs[2].spanOnly)
			}
			// The later spans land first, then the first.
			for _, k := range []int{2, 1, 0} {
				if why := w.land(jobs[k]); why != "" {
					t.Fatalf("job %d did not land: %s", k+1, why)
				}
			}
			if why := w.land(jobs[1]); why != "duplicate" {
				t.Fatalf("a segment landed twice: %q", why)
			}
			if len(w.stored.Segments) != 2 || !w.stored.Anchor.Equal(anchors[2]) || w.stored.Source != SourceModel {
				t.Fatalf("stored after the three landed: anchor %s, %d segments, source %s", w.stored.Anchor.FirstKeptEntryID, len(w.stored.Segments), w.stored.Source)
			}

			// The next extract builds on the three model texts, reading nothing again.
			x4 := w.extract()
			bo := x4.BuiltOn
			if bo.Source != SourceModel || bo.Segments != 2 || bo.ReadAgainTokens != 0 || bo.FromEntryID != anchors[2].FirstKeptEntryID {
				t.Fatalf("the extract after the segments landed built on %+v", bo)
			}
			for k := range 3 {
				if !strings.Contains(x4.Summary, fmt.Sprintf("of steps %v", spans[k])) {
					t.Fatalf("the extract's text lacks the model's summary of span %d (steps %v):\n%s", k+1, spans[k], x4.Summary)
				}
			}
			if len(w.stored.Segments) != 2 || w.stored.FromEntryID != anchors[0].FirstKeptEntryID || !w.stored.Anchor.Equal(x4Anchor(t, w, x4)) {
				t.Fatalf("the base the extract left: from %s, %d segments; want the first compaction's text and its 2 segments", w.stored.FromEntryID, len(w.stored.Segments))
			}
			w.leaf = piWrites(t, w.file, "c0000004", w.leaf, x4)

			// A merge: one request over the joined model texts, nothing else.
			calls := w.model.count()
			m, res, err := w.eng.MakeBase(context.Background(), BaseRequest{File: w.file, Merge: true, Settings: Settings{Pi: w.pi, Counter: tokenize.CounterEstimate}}, w.stored)
			if err != nil || m == nil {
				t.Fatalf("merge: %v %+v", err, res)
			}
			req := w.model.last()
			if w.model.count() != calls+1 || req.Task != summarize.TaskMerge || len(req.Messages) != 0 || strings.Count(req.PreviousSummary, "Model summary") != 3 {
				t.Fatalf("the merge asked %s with %d messages on:\n%s", req.Task, len(req.Messages), req.PreviousSummary)
			}
			if why := w.land(m); why != "" || len(w.stored.Segments) != 0 || w.stored.Summary != m.Summary || w.stored.FromEntryID != anchors[2].FirstKeptEntryID || !strings.Contains(m.Summary, "Model summary 4 of steps []") {
				t.Fatalf("the merge did not land as one text through the third compaction (%s): %d segments, from %s:\n%s", why, len(w.stored.Segments), w.stored.FromEntryID, w.stored.Summary)
			}
			// Nothing left to merge.
			if b, res, _ := w.eng.MakeBase(context.Background(), BaseRequest{File: w.file, Merge: true, Settings: Settings{Pi: w.pi, Counter: tokenize.CounterEstimate}}, w.stored); b != nil || !strings.Contains(res.Reason, "one summary") {
				t.Fatalf("a second merge: %v %+v", b, res)
			}
		})
	}
}

// A segment is used only where it continues the text: a segment whose compaction is not on
// the branch, or that starts elsewhere, is left out; a segment never lands on another
// session's base.
func TestSegmentsOnlyWhereTheyContinue(t *testing.T) {
	t.Parallel()
	w := newBaseWorld(t, "1.6.0", "019a0000-0000-7000-8000-00000005e6b0")
	anchors, _ := w.extractedCompactions(2)
	seg := w.makeSpanJob(anchors[1])
	if !seg.spanOnly {
		t.Fatal("the second span's job did not run alone while the first is not a model's")
	}
	other := *w.stored
	other.SessionID = "019a0000-0000-7000-8000-00000000other"
	if got, why := seg.Land(&other); got != nil || why != "moved-on" {
		t.Fatalf("a segment landed on another session's base: %q", why)
	}
	if why := w.land(seg); why != "" {
		t.Fatal(why)
	}
	// The first span has no model summary: the segment does not continue the text.
	x := w.extract()
	if x.BuiltOn.Segments != 0 {
		t.Fatalf("a segment after a gap was used: %+v", x.BuiltOn)
	}
	// A segment whose compaction is not on the branch.
	stray := w.stored.Segments[0]
	stray.Anchor.SummarySHA256 = SHA256("another text")
	stray.FromEntryID = w.stored.FromEntryID
	w.stored.Segments = []Segment{stray}
	if x := w.extract(); x.BuiltOn.Segments != 0 {
		t.Fatalf("a segment of a compaction not on the branch was used: %+v", x.BuiltOn)
	}
}

// A span-only job reads its span alone only when the span before it has a base job pending:
// with none (a compaction whose span no job will read, such as one answered by a bridged
// preparation, or one whose job ended), it builds on the text before it and reads what lies
// between, as a base job always did.
func TestSpanOnlyWhenTheSpanBeforeIsPending(t *testing.T) {
	t.Parallel()
	w := newBaseWorld(t, "1.6.0", "019a0000-0000-7000-8000-00000005e6c0")
	anchors, spans := w.extractedCompactions(2)
	// The first compaction's job ended without storing anything (it skipped, or its worker
	// gave up): nothing will read its span but the second's job.
	w.stored = w.stored.WithoutPending(anchors[0].FirstKeptEntryID)
	b := w.makeSpanJob(anchors[1])
	req := w.model.last()
	if b.spanOnly || !slices.Equal(steps(req.Messages), append(slices.Clone(spans[0]), spans[1]...)) {
		t.Fatalf("with no job pending before it, the job read steps %v alone=%v; want both spans %v %v", steps(req.Messages), b.spanOnly, spans[0], spans[1])
	}
	// Pending again (and stale after pendingFor): alone, then not.
	w.stored = w.stored.WithPending(anchors[0].FirstKeptEntryID, time.Now())
	if b := w.makeSpanJob(anchors[1]); !b.spanOnly {
		t.Fatal("the span before has a job pending: the job did not read its span alone")
	}
	w.stored = w.stored.WithPending(anchors[0].FirstKeptEntryID, time.Now().Add(-pendingFor))
	if b := w.makeSpanJob(anchors[1]); b.spanOnly {
		t.Fatal("a pending job older than pendingFor still held the span after it to its own text")
	}
}
