package engine

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/tokenize"
)

// A preparation asked while the base job of the previous compaction is in flight reads its
// own span alone (not the spans that job reads), and becomes the preparation Pi's hook takes
// only once the base's text reaches its span: the two texts joined, the file lists of both.
// After another compaction it is never joined.
func TestPreparationWhileTheBaseJobRuns(t *testing.T) {
	t.Parallel()
	w := newBaseWorld(t, "1.6.0", "019a0000-0000-7000-8000-00000000c0de")
	x1 := w.extract()
	a1 := w.stored.Anchor
	w.leaf = piWrites(t, w.file, "c0000001", w.leaf, x1)
	w.grow(10)
	span1 := w.spanSteps(x1.FirstKeptEntryID)
	req := Request{File: w.file, Settings: Settings{Policy: cutpoint.PolicyPi, Counter: tokenize.CounterEstimate, KeepRecentTokens: baseKeep}, Base: w.stored}
	calls := w.model.count()
	prep, _, err := w.eng.Prepare(context.Background(), req, nil)
	if err != nil || prep == nil {
		t.Fatalf("prepare: %v", err)
	}
	if !prep.SpanAlone() || AwaitingOf(prep) == nil {
		t.Fatalf("a preparation beside a pending base job is not of its span alone: %+v", prep.BuiltOn)
	}
	asked := w.model.last()
	read := steps(asked.Messages)
	if w.model.count() != calls+1 || asked.PreviousSummary != "" || len(read) == 0 || slices.ContainsFunc(read, func(n int) bool { return slices.Contains(span1, n) }) {
		t.Fatalf("the preparation read %v on %q; the base job reads %v", read, asked.PreviousSummary, span1)
	}
	a := AwaitingOf(prep)
	if got, why, err := w.eng.Compose(w.file, "", a, w.stored); err != nil || got != nil || why == "" {
		t.Fatalf("joined before the base landed: %v %q", err, why)
	}
	if _, _, why := w.makeBase(a1); why != "" || !w.stored.Complete() {
		t.Fatalf("base 1: %s", why)
	}
	got, why, err := w.eng.Compose(w.file, "", a, w.stored)
	if err != nil || got == nil {
		t.Fatalf("not joined after the base landed: %v %q", err, why)
	}
	if !strings.HasPrefix(got.Summary, w.stored.Summary+SegmentSeparator) || got.SpanAlone() || got.BuiltOn == nil || got.BuiltOn.Source != SourceModel {
		t.Fatalf("joined preparation: %q built on %+v", got.Summary, got.BuiltOn)
	}
	for _, f := range append(slices.Clone(w.stored.Details.ReadFiles), prep.Details.ReadFiles...) {
		if !slices.Contains(got.Details.ReadFiles, f) {
			t.Fatalf("read file %s missing from %v", f, got.Details.ReadFiles)
		}
	}
	if got.SummaryTokensEstimate <= prep.SummaryTokensEstimate || !slices.Equal(got.SummarizedEntryIDs, prep.SummarizedEntryIDs) || got.FirstKeptEntryID != prep.FirstKeptEntryID {
		t.Fatalf("joined preparation's cut or estimate: %+v", got)
	}
	// the hook takes it as any preparation: bridged to Pi's cut
	pi, err := Plan(w.file, w.piSettings(), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := w.eng.Bridge(context.Background(), BridgeRequest{File: w.file, LeafID: w.leaf, FirstKeptEntryID: pi.Plan.FirstKeptEntryID, Base: w.stored}, got)
	if err != nil || !strings.HasPrefix(out.Summary, w.stored.Summary) {
		t.Fatalf("bridge: %v", err)
	}
	// another compaction: never joined
	w.leaf = piWrites(t, w.file, "c0000002", w.leaf, out)
	if got, why, err := w.eng.Compose(w.file, "", a, w.stored); err != nil || got != nil || why == "" {
		t.Fatalf("joined after the branch compacted again: %v %q", err, why)
	}
}
