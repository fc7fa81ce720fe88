package pipeline

import (
	"context"
	"time"

	"github.com/compactor-dev/compactor/spend"
)

// The spend limits of package spend, as a delivery meets them: a job's first paid call
// reserves its estimate (held when a window is full), its end settles the count.

// SetSpendLimits replaces the spend limits (a reload of the settings); they must be valid
// for the stores (Validate's rules).
func (s *Service) SetSpendLimits(limits []spend.Limit) error {
	return s.spending.Set(limits, storeNames(s.cfg.Stores))
}

// reserveSpend adds a job's estimate to the counts of the windows it counts against
// (spend.Counter.Reserve); a full window holds the job until it ends.
func (s *Service) reserveSpend(ctx context.Context, t *paidAccount, estimate func() int) *HoldError {
	if full := s.spending.Reserve(ctx, s.res.spend, t.store, t.begun, &t.spend, estimate); full != nil {
		return &HoldError{Reason: full.Reason, Delay: full.Delay, why: handBackSpend}
	}
	return nil
}

// settleSpend replaces a delivery's estimates by the input tokens the endpoint billed
// (spend.Counter.Settle).
func (s *Service) settleSpend(ctx context.Context, t *paidAccount, actual int, ok bool) {
	t.mu.Lock()
	h := t.spend
	t.mu.Unlock()
	s.spending.Settle(ctx, s.res.spend, h, actual, ok)
}

// spendNow is the time the spend windows are measured in.
func (s *Service) spendNow() time.Time {
	if s.cfg.spendClock != nil {
		return s.cfg.spendClock()
	}
	return time.Now()
}
