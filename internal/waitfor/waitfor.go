package waitfor

import (
	"testing"
	"time"
)

// HangGuard is the least time Until waits for a condition before it fails the test; tests
// also use it to bound a single blocking call (a request that should be answered).
const HangGuard = 2 * time.Minute

// poll is how often Until checks its condition.
const poll = 20 * time.Millisecond

// Until polls cond until it holds; after HangGuard it fails the test, naming what it
// waited for.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	UntilGuard(t, HangGuard, what, cond)
}

// UntilGuard is Until with a longer guard, for a condition that takes minutes by design
// (every job of a fleet ending after its nodes were killed, say); a guard shorter than
// HangGuard is HangGuard.
func UntilGuard(t testing.TB, guard time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := until(max(guard, HangGuard), what, cond); err != nil {
		t.Fatal(err)
	}
}

// until is Until returning its failure, so that the guard itself can be tested.
func until(d time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return &timeout{d: d, what: what}
		}
		time.Sleep(poll)
	}
	return nil
}

type timeout struct {
	d    time.Duration
	what string
}

func (e *timeout) Error() string { return "timed out after " + e.d.String() + " waiting for " + e.what }
