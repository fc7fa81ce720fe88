package spend

import (
	"fmt"
	"slices"
	"time"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/wire"
)

// Limit is a limit on the LLM input tokens of a window.
type Limit struct {
	// Store is the store whose jobs it counts; "" counts every store's.
	Store string
	// Window is time.Hour or 24 * time.Hour.
	Window time.Duration
	// Tokens is the most input tokens the window's jobs may start paying for (a job
	// starts while the count is below it).
	Tokens int
}

func (l Limit) String() string {
	scope := "all stores"
	if l.Store != "" {
		scope = "store " + l.Store
	}
	return fmt.Sprintf("%d input tokens per %s (%s)", l.Tokens, windowName(l.Window), scope)
}

func windowName(w time.Duration) string {
	if w == time.Hour {
		return "hour"
	}
	return "day"
}

// Validate checks limits against the stores served.
func Validate(limits []Limit, stores []string) error {
	seen := map[string]bool{}
	for i, l := range limits {
		field := fmt.Sprintf("SpendLimits[%d]", i)
		if l.Window != time.Hour && l.Window != 24*time.Hour {
			return access.ConfigErrorf(field, "window %s: want an hour or a day", l.Window)
		}
		if l.Tokens < 1 {
			return access.ConfigErrorf(field, "%d tokens: want at least 1", l.Tokens)
		}
		if l.Store != "" && !servesStore(stores, l.Store) {
			return access.ConfigErrorf(field, "store %q is not one of this worker's stores", l.Store)
		}
		k := l.Store + "/" + windowName(l.Window)
		if seen[k] {
			return access.ConfigErrorf(field, "a second limit per %s for %s", windowName(l.Window), orAll(l.Store))
		}
		seen[k] = true
	}
	return nil
}

func servesStore(stores []string, name string) bool {
	return slices.Contains(stores, name)
}

func orAll(store string) string {
	if store == "" {
		return "all stores"
	}
	return "store " + store
}

// window is the window of w that holds now: its start and its key's suffix.
func window(w time.Duration, now time.Time) (start time.Time, suffix string) {
	now = now.UTC()
	if w == time.Hour {
		start = now.Truncate(time.Hour)
		return start, "h" + start.Format("2006010215")
	}
	start = time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	return start, "d" + start.Format("20060102")
}

// Key is the key of l's count in the window that holds now: <store>.spend.<window>
// for a store's limit (a key a store's worker may write, as every key of a store), and
// =fleet.<window> for the fleet's.
func Key(l Limit, now time.Time) (key string, end time.Time) {
	start, suffix := window(l.Window, now)
	scope := wire.SpendFleetScope
	if l.Store != "" {
		scope = l.Store + ".spend"
	}
	return scope + "." + suffix, start.Add(l.Window)
}

// charge is what a job added to one count.
type charge struct {
	key    string
	tokens int
}

// Hold is a delivery's charges, to be settled at its end.
type Hold struct {
	charges  []charge
	reserved int // the estimates added (to each count)
}
