package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/wire"
)

// An event's line says when a job was served for a Pi release compactor does not know (the
// piUnknown of --pi-unknown), as text escaped like every other field a worker wrote.
func TestEventLineNamesAnUnknownPi(t *testing.T) {
	ev := wire.Event{V: 1, JobSeq: 7, JobRef: wire.JobRef{Store: "default", SessionID: "s1", Kind: wire.KindCompact}, Attempt: 1, Tally: wire.Tally{Outcome: pipeline.OutcomeDone}, PiUnknown: "9.9.9", At: time.Unix(0, 0), Worker: "w1"}
	var b strings.Builder
	writeEvent(&b, ev)
	if !strings.Contains(b.String(), "unknown Pi 9.9.9") {
		t.Errorf("the line does not name the unknown release: %q", b.String())
	}
	ev.PiUnknown = "9.9.9\x1b[2J"
	b.Reset()
	writeEvent(&b, ev)
	if strings.Contains(b.String(), "\x1b") {
		t.Errorf("the release reached the terminal raw: %q", b.String())
	}
	ev.PiUnknown = ""
	b.Reset()
	writeEvent(&b, ev)
	if strings.Contains(b.String(), "unknown Pi") {
		t.Errorf("a known release is said unknown: %q", b.String())
	}
}
