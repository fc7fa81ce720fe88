package engine

import (
	"context"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/sessionio"
)

// Budget is a session's current context against its model's budget: what a sweep needs to
// decide whether to enqueue it.
type Budget struct {
	SessionID        string
	LeafID           string
	Version          int
	HasAssistant     bool
	LeafIsCompaction bool
	Tokens           int
	ContextWindow    int
	Threshold        int
	OverBudget       bool
	Model            string
	ModelKnown       bool
}

// CheckBudget counts a session's current context and checks it against its model's budget.
//
// It reads the file from its end only as far as the context and the model go (a tail read,
// ReadBudget): a long-lived session costs what its live context costs, not its
// history.
func (e *Engine) CheckBudget(ctx context.Context, file string) (*Budget, error) {
	return e.CheckBudgetAs(ctx, file, "")
}

// CheckBudgetAs is CheckBudget for a session that follows Pi release pi ("": the engine's
// setting).
func (e *Engine) CheckBudgetAs(ctx context.Context, file, pi string) (*Budget, error) {
	s := e.Settings
	s.Pi = set(pi, s.Pi)
	f, err := e.file(file)
	if err != nil {
		return nil, err
	}
	src, err := Load(file, s, LoadOptions{Cache: e.Cache, Read: ReadBudget, File: f})
	if err != nil {
		return nil, err
	}
	t := src.Tail
	a := &Budget{SessionID: t.Header.ID, LeafID: t.LeafID, Version: t.Version(),
		HasAssistant: t.HasAssistant, ContextWindow: src.Model.ContextWindow, Model: src.Model.ModelID, ModelKnown: src.Model.Known}
	if n := len(src.Path); n > 0 && src.Path[n-1].Type == sessionio.TypeCompaction {
		a.LeafIsCompaction = true
	}
	a.Tokens = cutpoint.ContextTokens(src.Path, src.Release, src.Counter)
	cs := src.Settings(0, e.Settings.ReserveTokens)
	a.Threshold = src.Model.ContextWindow - cs.ReserveTokens
	a.OverBudget = !a.LeafIsCompaction && cutpoint.OverBudget(a.Tokens, cs)
	return a, nil
}
