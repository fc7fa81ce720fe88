package spend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/prometheus/client_golang/prometheus"
)

// Counter keeps a worker's spend limits and counts its jobs against them.
type Counter struct {
	limits atomic.Pointer[[]Limit]
	// Used and Limit are the metrics of the limits' current windows (Gauges).
	Used, Limit *prometheus.GaugeVec
	Log         *slog.Logger
	// SayEvery reports whether a warning of this kind was not said within every.
	SayEvery func(what string, every time.Duration) bool
	// Now is the time the windows are measured in (nil: time.Now); HoldMax, when set,
	// shortens a held job's wait (tests).
	Now     func() time.Time
	HoldMax time.Duration
}

// Full says that a window of a limit is full: the job waits Delay (the rest of the window,
// plus a jitter), for Reason.
type Full struct {
	Reason string
	Delay  time.Duration
}

// Set replaces the limits (a reload of the settings); they must be valid for the stores
// (Validate).
func (c *Counter) Set(limits []Limit, stores []string) error {
	if err := Validate(limits, stores); err != nil {
		return err
	}
	c.limits.Store(&limits)
	c.Limit.Reset()
	for _, l := range limits {
		c.Limit.WithLabelValues(orStar(l.Store), windowName(l.Window)).Set(float64(l.Tokens))
	}
	return nil
}

func orStar(store string) string {
	if store == "" {
		return "*"
	}
	return store
}

// limitsFor are the limits a job of store counts against.
func (c *Counter) limitsFor(store string) []Limit {
	p := c.limits.Load()
	if p == nil {
		return nil
	}
	var out []Limit
	for _, l := range *p {
		if l.Store == "" || l.Store == store {
			out = append(out, l)
		}
	}
	return out
}

func (c *Counter) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Reserve adds a job's estimate to the counts of the windows it counts against. The
// first call of a job (begun false) is admitted only when every count is below its
// limit; else the charges made are taken back and the job is held until the full window
// ends. A count that cannot be written (NATS trouble) does not stop the job: it is logged.
func (c *Counter) Reserve(ctx context.Context, kv *fleetops.Bucket, store string, begun bool, h *Hold, estimate func() int) *Full {
	limits := c.limitsFor(store)
	if len(limits) == 0 {
		return nil
	}
	n := estimate()
	now := c.now()
	var made []charge
	for _, l := range limits {
		key, end := Key(l, now)
		limit := l.Tokens
		if begun {
			limit = 0 // a job that pays is counted, never stopped
		}
		used, over, err := fleetops.AddCount(ctx, kv, "spend", key, n, limit)
		var newer *fleetops.NewerRecordError
		if errors.As(err, &newer) {
			// A newer compactor counts this window in a shape this one cannot read: it is
			// taken as full rather than overwritten or ignored (the limit is a promise).
			if c.SayEvery("spend-newer:"+key, l.Window) {
				c.Log.Warn("spend count of a newer schema version: this worker takes its window as full", "limit", l.String(), "err", err)
			}
			used, over, err = l.Tokens, true, nil
		}
		if err != nil {
			c.Log.Warn("spend count not updated; the job is not held by this limit", "limit", l.String(), "key", key, "err", err)
			continue
		}
		if over {
			for _, ch := range made {
				_, _, uerr := fleetops.AddCount(ctx, kv, "spend", ch.key, -ch.tokens, 0)
				if uerr != nil {
					c.Log.Warn("spend count of a held job not taken back", "err", uerr)
				}
			}
			c.Used.WithLabelValues(orStar(l.Store), windowName(l.Window)).Set(float64(used))
			return c.full(l, key, used, end, now)
		}
		c.Used.WithLabelValues(orStar(l.Store), windowName(l.Window)).Set(float64(used))
		made = append(made, charge{key: key, tokens: n})
	}
	h.charges = append(h.charges, made...)
	h.reserved += n
	return nil
}

// full is the hold of a job whose window key is full: until the window ends, plus a
// jitter (up to a minute) that spreads the held jobs' return. The first hold of a window
// on this worker is logged as a warning.
func (c *Counter) full(l Limit, key string, used int, end, now time.Time) *Full {
	delay := end.Sub(now) + time.Duration(rand.Int64N(int64(time.Minute)))
	if c.HoldMax > 0 {
		delay = min(delay, c.HoldMax)
	}
	if c.SayEvery("spend:"+key, l.Window) {
		c.Log.Warn("spend limit reached: jobs wait for the window to end (handed back without an attempt, not failed)",
			"limit", l.String(), "window_key", key, "used_tokens", used, "limit_tokens", l.Tokens, "window_ends", end.UTC().Format(time.RFC3339))
	}
	return &Full{Reason: fmt.Sprintf("spend limit of %s reached: %d used in the window that ends %s", l.String(), used, end.UTC().Format(time.RFC3339)),
		Delay: delay}
}

// Settle replaces a delivery's estimates by the input tokens the endpoint billed
// (actual), once its handler has ended with a result; a failed handler's estimates stay, and
// so do those of an endpoint that reports no usage (actual 0).
func (c *Counter) Settle(ctx context.Context, kv *fleetops.Bucket, h Hold, actual int, ok bool) {
	if !ok || actual <= 0 || len(h.charges) == 0 || actual == h.reserved {
		return
	}
	delta := actual - h.reserved
	seen := map[string]bool{}
	for _, ch := range h.charges {
		if seen[ch.key] {
			continue
		}
		seen[ch.key] = true
		_, _, err := fleetops.AddCount(ctx, kv, "spend", ch.key, delta, 0)
		if err != nil {
			c.Log.Warn("spend count not settled to the billed tokens", "err", err)
		}
	}
}

// Gauges are the spend metrics: the count this worker last saw of each limit's
// current window, and the limits.
func Gauges() (used, limit *prometheus.GaugeVec) {
	used = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "compactor_spend_window_tokens",
		Help: "LLM input tokens counted in the current window of a spend limit, as this worker last saw it (store \"*\": every store's).",
	}, []string{"store", "window"})
	limit = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "compactor_spend_limit_tokens", Help: "The spend limits: input tokens per window (store \"*\": every store's).",
	}, []string{"store", "window"})
	return used, limit
}
