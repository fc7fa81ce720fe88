package engine

import (
	"fmt"
	"os"
	"time"

	"github.com/compactor-dev/compactor/configs"
	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/tokenize"
)

// Source is one read of a session file with everything planning needs: the path to the
// leaf, the session's model resolved in the catalog (configs.Resolve) and the counter for
// its encoding. Load makes it; Compact, BranchSummary, CheckBudget, Plan (and through it
// `compactor plan` and `inspect`) and the experiments all start from one, so every caller
// sees the same window, encoding and counts for a session.
type Source struct {
	File    string
	Session *sessionio.Session
	// ModTime is the file's modification time, taken before the read: if the file changes
	// in between, the content read is at least as new as the time, which errs on the side
	// of "active".
	ModTime time.Time
	// Path is the current path, root first: to the file's leaf, or to LoadOptions.Leaf.
	Path []*sessionio.Entry
	// ModelRef is the model the path names (nil when it names none).
	ModelRef *sessionio.ModelRef
	Model    configs.Resolved
	// Counter counts with the session's encoding, through LoadOptions.Cache when one is
	// given.
	Counter tokenize.Counter
}

// LoadOptions say how to read a session for planning. Zero values are the defaults.
type LoadOptions struct {
	// Leaf plans for this entry instead of the file's leaf (the last entry line).
	Leaf string
	// Counter is tiktoken (default) or estimate.
	Counter string
	// ContextWindow overrides the catalog's window of the session's model (0: the catalog's).
	ContextWindow int
	// Cache, if set, remembers counts per entry across loads.
	Cache *tokenize.Cache
}

// Load reads file, takes its path, resolves its model and picks the counter.
func Load(file string, o LoadOptions) (*Source, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return nil, &sessionio.FileError{File: file, Err: err}
	}
	s, err := sessionio.ReadFile(file)
	if err != nil {
		return nil, err
	}
	path, err := s.Path(o.Leaf)
	if err != nil {
		if o.Leaf != "" {
			return nil, &InputError{Err: err} // the file has no entry Leaf
		}
		return nil, err
	}
	src := &Source{File: file, Session: s, ModTime: fi.ModTime(), Path: path}
	if c := sessionio.BuildContext(path); c.Model != nil {
		src.ModelRef = c.Model
		src.Model = configs.Resolve(c.Model.Provider, c.Model.ModelID, o.ContextWindow)
	} else {
		src.Model = configs.Resolve("", "", o.ContextWindow)
	}
	counter := o.Counter
	if counter == "" {
		counter = tokenize.CounterTiktoken
	}
	tc, err := tokenize.New(counter, src.Model.Encoding())
	if err != nil {
		return nil, err
	}
	src.Counter = tc
	if o.Cache != nil {
		src.Counter = cached{c: tc, cache: o.Cache}
	}
	return src, nil
}

// Settings are the cut-point settings for this session: keepRecentTokens and
// reserveTokens as given, the window of its model.
func (src *Source) Settings(keepRecentTokens, reserveTokens int) cutpoint.Settings {
	return cutpoint.Settings{KeepRecentTokens: keepRecentTokens, ReserveTokens: reserveTokens, ContextWindow: src.Model.ContextWindow}
}

// planPath plans path with the named policy. Every plan compactor makes goes through here.
func planPath(path []*sessionio.Entry, policy string, cs cutpoint.Settings, c cutpoint.Counter) (*cutpoint.Plan, error) {
	pol, err := cutpoint.ByName(policy)
	if err != nil {
		return nil, err
	}
	p, err := pol.Plan(path, cs, c)
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	return p, nil
}

// PlanRequest says what to plan. Policy and Counter default to nearest and tiktoken; the
// token settings are taken as given (cutpoint.DefaultSettings are Pi's).
type PlanRequest struct {
	Leaf             string
	Policy           string
	Counter          string
	KeepRecentTokens int
	ReserveTokens    int
	// ContextWindow overrides the catalog's window (0: the catalog's).
	ContextWindow int
	Cache         *tokenize.Cache
}

// Planned is a session and its plan.
type Planned struct {
	*Source
	Settings cutpoint.Settings
	Plan     *cutpoint.Plan
}

// OverBudget reports whether the planned context is over its model's budget.
func (p *Planned) OverBudget() bool { return cutpoint.OverBudget(p.Plan.TokensBefore, p.Settings) }

// Plan reads file and plans it as Compact would, without summarizing or writing: the
// entry point of `compactor plan` and `inspect`. It needs no summarizer.
func Plan(file string, req PlanRequest) (*Planned, error) {
	src, err := Load(file, LoadOptions{Leaf: req.Leaf, Counter: req.Counter, ContextWindow: req.ContextWindow, Cache: req.Cache})
	if err != nil {
		return nil, err
	}
	policy := req.Policy
	if policy == "" {
		policy = cutpoint.PolicyNearest
	}
	pd := &Planned{Source: src, Settings: src.Settings(req.KeepRecentTokens, req.ReserveTokens)}
	pd.Plan, err = planPath(src.Path, policy, pd.Settings, src.Counter)
	if err != nil {
		return nil, err
	}
	return pd, nil
}
