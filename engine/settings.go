package engine

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/tokenize"
)

// Settings choose how sessions are planned, counted and treated while an agent is live.
// They come in layers, and one rule gives every field its value: a field that is set (a
// non-empty string, a positive number) wins over the layer below it; one left at zero
// takes that layer's. The layers, from the bottom: the defaults (below), the engine's
// (New), a request's (Request.Settings). Load and Plan read with Settings too. Plan alone
// takes KeepRecentTokens and ReserveTokens as given, 0 included (Plan says why).
type Settings struct {
	// Pi is the Pi release whose rules the session follows ("1.6.0", "0.80.3"; "" or
	// "latest": the newest known, pi.Latest): how its context is built, planned,
	// counted with Pi's estimate, summarized and written (pi.Release). A release
	// compactor does not know is worked with the behaviours its number falls in; saying so
	// (or refusing it) is the caller's policy (docs/compatibility.md).
	Pi               string
	Policy           string // nearest (default), pi, turn
	Counter          string // tiktoken (default) or estimate
	KeepRecentTokens int    // default 20000 (Pi)
	ReserveTokens    int    // default 16384 (Pi)
	// ContextWindow overrides the model catalog's window for the session's model (0: the
	// catalog's).
	ContextWindow int
	// BranchReserveTokens is Pi's branchSummary.reserveTokens (default 16384).
	BranchReserveTokens int
	// AbandonedAfter: a session whose file ends mid-turn (or with an incomplete line) and
	// was modified within this long belongs to a running agent, and nothing is appended to
	// it; left like that for longer, it is taken as abandoned and compactable. Default 1h.
	AbandonedAfter time.Duration
	// PrepareUpdate is how a preparation builds on the session's previous one:
	// PrepareFull (default) or PrepareIncremental (see Prepare).
	PrepareUpdate string
	// BridgeMaxTokens bounds what a bridge adds to a prepared summary (default
	// summarize.DefaultBridgeMaxTokens; see Bridge).
	BridgeMaxTokens int
	// ModelOverrides are Pi's compaction.modelOverrides: per "provider/modelId" (exact),
	// reserveTokens and keepRecentTokens for sessions whose model it is, each field on its
	// own, over KeepRecentTokens and ReserveTokens. Pi 1.x has them; Pi 0.73 ignores them.
	ModelOverrides map[string]ModelOverride
}

// ModelOverride is one model's compaction settings (nil fields: not overridden).
type ModelOverride struct {
	ReserveTokens    *int `json:"reserveTokens,omitempty"`
	KeepRecentTokens *int `json:"keepRecentTokens,omitempty"`
}

// Settings.PrepareUpdate values.
const (
	PrepareFull        = "full"
	PrepareIncremental = "incremental"
)

// DefaultAbandonedAfter is Settings.AbandonedAfter's default.
const DefaultAbandonedAfter = time.Hour

// defaults is the bottom layer: what a field nobody set means.
var defaults = Settings{
	Policy:              cutpoint.PolicyNearest, // the service default: see docs/policies.md
	Counter:             tokenize.CounterTiktoken,
	KeepRecentTokens:    cutpoint.DefaultKeepRecentTokens,
	ReserveTokens:       cutpoint.DefaultReserveTokens,
	BranchReserveTokens: cutpoint.DefaultReserveTokens,
	AbandonedAfter:      DefaultAbandonedAfter,
	PrepareUpdate:       PrepareFull,
	BridgeMaxTokens:     summarize.DefaultBridgeMaxTokens,
}

// over is s laid over base: the fields s sets, and base's for the others.
func (s Settings) over(base Settings) Settings {
	return Settings{
		Pi:                  set(s.Pi, base.Pi),
		Policy:              set(s.Policy, base.Policy),
		Counter:             set(s.Counter, base.Counter),
		KeepRecentTokens:    set(s.KeepRecentTokens, base.KeepRecentTokens),
		ReserveTokens:       set(s.ReserveTokens, base.ReserveTokens),
		ContextWindow:       set(s.ContextWindow, base.ContextWindow),
		BranchReserveTokens: set(s.BranchReserveTokens, base.BranchReserveTokens),
		AbandonedAfter:      set(s.AbandonedAfter, base.AbandonedAfter),
		PrepareUpdate:       set(s.PrepareUpdate, base.PrepareUpdate),
		BridgeMaxTokens:     set(s.BridgeMaxTokens, base.BridgeMaxTokens),
		ModelOverrides:      orMap(s.ModelOverrides, base.ModelOverrides),
	}
}

// orMap is m when it names any model, else base.
func orMap[V any](m, base map[string]V) map[string]V {
	if len(m) > 0 {
		return m
	}
	return base
}

// set is the rule: v when it is set (greater than its type's zero: a non-empty string, a
// positive number), else base.
func set[T cmp.Ordered](v, base T) T {
	var zero T
	if v > zero {
		return v
	}
	return base
}

// Release is the Pi release the settings follow (the newest when Pi is unset or invalid:
// Validate refuses an invalid one).
func (s Settings) Release() pi.Release {
	r, err := pi.ParseRelease(s.Pi)
	if err != nil {
		return pi.Latest
	}
	return r
}

// override is Pi's modelOverrides entry for the model ("provider/modelId", exactly), nil
// for none or before 0.86 (ModelOverrides).
func (s Settings) override(m *sessionio.ModelRef, r pi.Release) *ModelOverride {
	if m == nil || !r.Has(pi.ModelOverrides) {
		return nil
	}
	if o, ok := s.ModelOverrides[m.Provider+"/"+m.ModelID]; ok {
		return &o
	}
	return nil
}

// withDefaults is s over the defaults.
func (s Settings) withDefaults() Settings { return s.over(defaults) }

// Validate names the first bad field.
func (s Settings) Validate() error {
	d := s.withDefaults()
	if _, err := pi.ParseRelease(d.Pi); err != nil {
		return fmt.Errorf("settings: pi-version: %w", err)
	}
	if _, err := cutpoint.ByName(d.Policy); err != nil {
		return fmt.Errorf("settings: policy: %w", err)
	}
	switch d.Counter {
	case tokenize.CounterTiktoken, tokenize.CounterEstimate:
	default:
		return fmt.Errorf("settings: counter: unknown counter %q (want tiktoken or estimate)", s.Counter)
	}
	if s.KeepRecentTokens < 0 || s.ReserveTokens < 0 || s.ContextWindow < 0 {
		return errors.New("settings: token settings must not be negative")
	}
	if d.ContextWindow > 0 {
		// A given window must leave room: otherwise every session is over budget, and a
		// compaction can never bring it under.
		if d.ReserveTokens >= d.ContextWindow {
			return fmt.Errorf("settings: context window %d is not larger than reserveTokens %d", d.ContextWindow, d.ReserveTokens)
		}
		if d.KeepRecentTokens >= d.ContextWindow-d.ReserveTokens {
			return fmt.Errorf("settings: keepRecentTokens %d does not fit under the budget (window %d - reserve %d)", d.KeepRecentTokens, d.ContextWindow, d.ReserveTokens)
		}
	}
	if s.AbandonedAfter < 0 {
		return errors.New("settings: abandoned-after must not be negative")
	}
	switch d.PrepareUpdate {
	case PrepareFull, PrepareIncremental:
	default:
		return fmt.Errorf("settings: prepare-update: %q is not %s or %s", s.PrepareUpdate, PrepareFull, PrepareIncremental)
	}
	if s.BridgeMaxTokens < 0 {
		return errors.New("settings: bridge-max-tokens must not be negative")
	}
	for model, o := range s.ModelOverrides {
		if o.ReserveTokens != nil && *o.ReserveTokens < 0 || o.KeepRecentTokens != nil && *o.KeepRecentTokens < 0 {
			return fmt.Errorf("settings: model override %q: token settings must not be negative", model)
		}
	}
	return nil
}
