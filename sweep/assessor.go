package sweep

import "context"

// Assessment is what an Assessor reports about one session file: enough for a sweep to
// decide whether to enqueue it and to remember it cheaply.
type Assessment struct {
	SessionID     string
	LeafID        string
	Tokens        int  // current context tokens
	ContextWindow int  // the model's window
	OverBudget    bool // Tokens > ContextWindow - reserve
	Version       int  // format version on disk; compactor only appends to v3
	HasAssistant  bool
	// Compacted is true when the path already ends in a compaction (nothing to do).
	Compacted bool
}

// Eligible reports whether a job for this session could do anything.
func (a Assessment) Eligible() bool {
	return a.OverBudget && a.Version >= 3 && a.HasAssistant && !a.Compacted && a.SessionID != ""
}

// Assessor reads a session file and says whether it is over budget.
type Assessor interface {
	Assess(ctx context.Context, file string) (Assessment, error)
}

// AssessorFunc adapts a function to Assessor.
type AssessorFunc func(ctx context.Context, file string) (Assessment, error)

// Assess calls f.
func (f AssessorFunc) Assess(ctx context.Context, file string) (Assessment, error) {
	return f(ctx, file)
}
