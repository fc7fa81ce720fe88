package waitfor

import (
	"sync/atomic"
	"testing"
)

// Until returns once the condition holds, checking it again after each poll.
func TestUntilReturnsWhenTheConditionHolds(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	Until(t, "the third check", func() bool { return calls.Add(1) == 3 })
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d checks, want 3", n)
	}
}

// A condition that never holds fails after the guard, naming what was awaited and how long.
func TestUntilNamesWhatItWaitedFor(t *testing.T) {
	t.Parallel()
	err := until(3*poll, "a condition that never holds", func() bool { return false })
	if err == nil || err.Error() != "timed out after 60ms waiting for a condition that never holds" {
		t.Fatalf("until: %v", err)
	}
}

// A guard shorter than HangGuard does not make a test give up sooner.
func TestUntilGuardIsAtLeastHangGuard(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	UntilGuard(t, poll, "the tenth check", func() bool { return calls.Add(1) == 10 })
}
