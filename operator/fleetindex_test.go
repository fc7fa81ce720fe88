package operator

import (
	"testing"
	"time"

	"github.com/compactor-dev/compactor/outcome"
	"github.com/compactor-dev/compactor/wire"
)

// The event index holds at most its bound: the oldest events go first, a session whose
// events all went is forgotten, and the per-minute counts stay.
func TestEventIndexBounded(t *testing.T) {
	x := NewEventIndex(100)
	at := time.Now().UTC()
	for i := range 250 {
		x.Add(wire.Event{JobRef: wire.JobRef{Store: "s", SessionID: "sess-" + string(rune('a'+i%10))}, JobSeq: uint64(i), Tally: wire.Tally{Outcome: outcome.Done, EntryID: "e", TokensBefore: 10}, At: at})
	}
	if x.Len() != 100 || x.Added() != 250 {
		t.Fatalf("len %d, added %d", x.Len(), x.Added())
	}
	total := 0
	for i := range 10 {
		evs := x.Session("s", "sess-"+string(rune('a'+i)))
		total += len(evs)
		for _, ev := range evs {
			if ev.JobSeq < 150 {
				t.Fatalf("event %d kept after 250 added into 100", ev.JobSeq)
			}
		}
	}
	if total != 100 {
		t.Errorf("%d events in the sessions, want 100", total)
	}
	if w := x.Window("s", at.Add(-time.Minute), at); w.Compactions != 250 || w.TokensBefore != 2500 {
		t.Errorf("window counts %+v", w)
	}
	if r := x.Recent("s", 5); len(r) != 5 || r[0].JobSeq != 249 {
		t.Errorf("recent: %+v", r)
	}
	y := NewEventIndex(3)
	y.Add(wire.Event{JobRef: wire.JobRef{Store: "s", SessionID: "gone"}, Tally: wire.Tally{Outcome: outcome.Done}, At: at})
	for range 3 {
		y.Add(wire.Event{JobRef: wire.JobRef{Store: "s", SessionID: "kept"}, Tally: wire.Tally{Outcome: outcome.Done}, At: at})
	}
	if y.Sessions() != 1 || len(y.Session("s", "gone")) != 0 {
		t.Errorf("a session whose events all went is still held: %d sessions", y.Sessions())
	}
}
