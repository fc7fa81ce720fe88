package cutpoint

import (
	"fmt"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
)

// Span is what a compaction with its first kept entry at a given cut summarizes, on a path
// that ends where the compaction is appended (its parent last), under the rules of the
// path's Pi release: the range from the previous compaction's kept boundary to the cut, each entry
// as the summary reads it (Pi 1.x: its projection, without system messages), the history
// and a split turn's prefix together.
type Span struct {
	// EntryIDs are the summarized entries, once per message, in order (as a plan lists
	// MessagesToSummarize followed by TurnPrefix).
	EntryIDs []string
	Messages []*sessionio.Message
	// StartIndex is the path index where the range starts (the previous compaction's
	// kept boundary); CutIndex the cut's.
	StartIndex, CutIndex int
	// Previous is the compaction the range follows (nil: none).
	Previous *sessionio.Entry
}

// SpanAt returns the span of a compaction cut at cutID on path under the rules of release r. It fails
// when the cut is not in the range (not on the path, or before the previous compaction's
// kept boundary).
func SpanAt(path []*sessionio.Entry, r pi.Release, cutID string) (*Span, error) {
	sg := newSegment(path, r)
	k := -1
	for i, it := range sg.items {
		if it.e.ID == cutID {
			k = i
			break
		}
	}
	if k < 0 {
		return nil, fmt.Errorf("cut %s is not in the range a compaction of this path summarizes", cutID)
	}
	sp := &Span{StartIndex: sg.start, CutIndex: sg.items[k].at, Previous: sg.prev, EntryIDs: []string{}}
	for i := 0; i < k; i++ {
		for _, m := range sg.summarized(i) {
			sp.EntryIDs = append(sp.EntryIDs, sg.items[i].e.ID)
			sp.Messages = append(sp.Messages, m)
		}
	}
	return sp, nil
}

// RangeStart is the path index where the range of the path's next compaction starts: the
// latest compaction's kept boundary (Pi 1.x: the first entry of its projection after that
// compaction), 0 without one; len(path) when the range is empty.
func RangeStart(path []*sessionio.Entry, r pi.Release) int {
	return newSegment(path, r).start
}
