package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// Spend limits: input tokens per hour and per day, for all stores and per store, shared by
// the whole fleet. Each window of each limit is a count in COMPACTOR_SPEND (a key per scope
// and window, e.g. all.h2026120314, store.team.d20261203), written with optimistic
// concurrency by every worker that has the limit: a fleet limit, not a per-process one.
//
// A job asks before its first paid call (ReserveLLM, with the tokens its first request
// will send): when every window it counts against has room (its count is below its limit),
// the estimate is added to each and the job pays; when one is full, the job is held: handed
// back without an attempt, delivered again when that window ends; never failed, never
// dead-lettered. A job that pays is never stopped: its later calls are added without a
// check, and at its end its estimate is replaced by the input tokens the endpoint billed.
// Windows start at whole UTC hours and days.
//
// What this bounds: a window's count only grows past its limit by the job that was
// admitted while it was below, so the fleet's input tokens in a window stay at most the
// limit plus one job's (plus what the estimates missed of the jobs that were paying when
// the window filled: the estimate is the first request's prompt, at four characters a
// token; a span sent in chunks costs more).

// SpendLimit is a limit on the LLM input tokens of a window.
type SpendLimit struct {
	// Store is the store whose jobs it counts; "" counts every store's.
	Store string
	// Window is time.Hour or 24 * time.Hour.
	Window time.Duration
	// Tokens is the most input tokens the window's jobs may start paying for (a job
	// starts while the count is below it).
	Tokens int
}

func (l SpendLimit) String() string {
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

// validSpendLimits checks limits against the stores served.
func validSpendLimits(limits []SpendLimit, stores []Store) error {
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

func servesStore(stores []Store, name string) bool {
	for _, st := range stores {
		if st.Name == name {
			return true
		}
	}
	return false
}

func orAll(store string) string {
	if store == "" {
		return "all stores"
	}
	return "store " + store
}

// spendWindow is the window of w that holds now: its start and its key's suffix.
func spendWindow(w time.Duration, now time.Time) (start time.Time, suffix string) {
	now = now.UTC()
	if w == time.Hour {
		start = now.Truncate(time.Hour)
		return start, "h" + start.Format("2006010215")
	}
	start = time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	return start, "d" + start.Format("20060102")
}

// spendKey is the key of l's count in the window that holds now: <store>.spend.<window>
// for a store's limit (a key a store's worker may write, as every key of a store), and
// =fleet.<window> for the fleet's.
func spendKey(l SpendLimit, now time.Time) (key string, end time.Time) {
	start, suffix := spendWindow(l.Window, now)
	scope := wire.SpendFleetScope
	if l.Store != "" {
		scope = l.Store + ".spend"
	}
	return scope + "." + suffix, start.Add(l.Window)
}

// spendCharge is what a job added to one count.
type spendCharge struct {
	key    string
	tokens int
}

// spendHold is a delivery's charges, to be settled at its end.
type spendHold struct {
	charges  []spendCharge
	reserved int // the estimates added (to each count)
}

// SetSpendLimits replaces the spend limits (a reload of the settings); they must be valid
// for the stores (Validate's rules).
func (s *Service) SetSpendLimits(limits []SpendLimit) error {
	if err := validSpendLimits(limits, s.cfg.Stores); err != nil {
		return err
	}
	s.limits.Store(&limits)
	s.m.spendLimit.Reset()
	for _, l := range limits {
		s.m.spendLimit.WithLabelValues(orStar(l.Store), windowName(l.Window)).Set(float64(l.Tokens))
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
func (s *Service) limitsFor(store string) []SpendLimit {
	p := s.limits.Load()
	if p == nil {
		return nil
	}
	var out []SpendLimit
	for _, l := range *p {
		if l.Store == "" || l.Store == store {
			out = append(out, l)
		}
	}
	return out
}

func (s *Service) spendNow() time.Time {
	if s.cfg.spendClock != nil {
		return s.cfg.spendClock()
	}
	return time.Now()
}

// reserveSpend adds a job's estimate to the counts of the windows it counts against. The
// first call of a job (t.begun false) is admitted only when every count is below its
// limit; else the charges made are taken back and the job is held until the full window
// ends. A count that cannot be written (NATS trouble) does not stop the job: it is logged.
func (s *Service) reserveSpend(ctx context.Context, t *paidAccount, estimate func() int) *HoldError {
	limits := s.limitsFor(t.store)
	if len(limits) == 0 {
		return nil
	}
	n := estimate()
	now := s.spendNow()
	var made []spendCharge
	for _, l := range limits {
		key, end := spendKey(l, now)
		limit := l.Tokens
		if t.begun {
			limit = 0 // a job that pays is counted, never stopped
		}
		used, over, err := addCount(ctx, s.res.spend, "spend", key, n, limit)
		var newer *fleetops.NewerRecordError
		if errors.As(err, &newer) {
			// A newer compactor counts this window in a shape this one cannot read: it is
			// taken as full rather than overwritten or ignored (the limit is a promise).
			if s.sayEvery("spend-newer:"+key, l.Window) {
				s.log.Warn("spend count of a newer schema version: this worker takes its window as full", "limit", l.String(), "err", err)
			}
			used, over, err = l.Tokens, true, nil
		}
		if err != nil {
			s.log.Warn("spend count not updated; the job is not held by this limit", "limit", l.String(), "key", key, "err", err)
			continue
		}
		if over {
			for _, c := range made {
				_, _, uerr := addCount(ctx, s.res.spend, "spend", c.key, -c.tokens, 0)
				answered(s.log, slog.LevelWarn, "spend count of a held job not taken back", uerr)
			}
			s.m.spendUsed.WithLabelValues(orStar(l.Store), windowName(l.Window)).Set(float64(used))
			return s.spendFull(l, key, used, end, now)
		}
		s.m.spendUsed.WithLabelValues(orStar(l.Store), windowName(l.Window)).Set(float64(used))
		made = append(made, spendCharge{key: key, tokens: n})
	}
	t.spend.charges = append(t.spend.charges, made...)
	t.spend.reserved += n
	return nil
}

// spendFull is the hold of a job whose window key is full: until the window ends, plus a
// jitter (up to a minute) that spreads the held jobs' return. The first hold of a window
// on this worker is logged as a warning.
func (s *Service) spendFull(l SpendLimit, key string, used int, end, now time.Time) *HoldError {
	delay := end.Sub(now) + time.Duration(rand.Int64N(int64(time.Minute)))
	if s.cfg.spendHoldMax > 0 {
		delay = min(delay, s.cfg.spendHoldMax)
	}
	if s.sayEvery("spend:"+key, l.Window) {
		s.log.Warn("spend limit reached: jobs wait for the window to end (handed back without an attempt, not failed)",
			"limit", l.String(), "window_key", key, "used_tokens", used, "limit_tokens", l.Tokens, "window_ends", end.UTC().Format(time.RFC3339))
	}
	return &HoldError{Reason: fmt.Sprintf("spend limit of %s reached: %d used in the window that ends %s", l.String(), used, end.UTC().Format(time.RFC3339)),
		Delay: delay, why: handBackSpend}
}

// settleSpend replaces a delivery's estimates by the input tokens the endpoint billed
// (actual), once its handler has ended with a result; a failed handler's estimates stay, and
// so do those of an endpoint that reports no usage (actual 0).
func (s *Service) settleSpend(ctx context.Context, t *paidAccount, actual int, ok bool) {
	t.mu.Lock()
	h := t.spend
	t.mu.Unlock()
	if !ok || actual <= 0 || len(h.charges) == 0 || actual == h.reserved {
		return
	}
	delta := actual - h.reserved
	seen := map[string]bool{}
	for _, c := range h.charges {
		if seen[c.key] {
			continue
		}
		seen[c.key] = true
		_, _, err := addCount(ctx, s.res.spend, "spend", c.key, delta, 0)
		answered(s.log, slog.LevelWarn, "spend count not settled to the billed tokens", err)
	}
}

// spendGauges are the spend metrics: the count this worker last saw of each limit's
// current window, and the limits.
func spendGauges() (used, limit *prometheus.GaugeVec) {
	used = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "compactor_spend_window_tokens",
		Help: "LLM input tokens counted in the current window of a spend limit, as this worker last saw it (store \"*\": every store's).",
	}, []string{"store", "window"})
	limit = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "compactor_spend_limit_tokens", Help: "The spend limits: input tokens per window (store \"*\": every store's).",
	}, []string{"store", "window"})
	return used, limit
}
