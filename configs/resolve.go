package configs

// Resolved is a session's model as the catalog knows it, and the context window that
// decides the session's budget. Resolve is the one place that turns "the model a session
// names" into a window and an encoding: planning, compaction, sweeps and experiments all
// go through it, so they cannot drift apart.
type Resolved struct {
	// Provider and ModelID are as the session names them (the latest model_change or
	// assistant message on its path); both are empty when it names none.
	Provider string
	ModelID  string
	// Model is the catalog entry: DefaultModel (with ID set to ModelID) for a model the
	// catalog does not know. Known reports which.
	Model Model
	Known bool
	// ContextWindow is Model.ContextWindow, or the override given to Resolve.
	ContextWindow int
	// WindowOverridden is true when ContextWindow comes from the override.
	WindowOverridden bool
}

// Resolve looks up the model a session names: Pi's figure for that exact provider and id
// first (one id can have different windows at different providers), then the id alone
// (exact, case-insensitive, pattern), else DefaultModel. A contextWindow > 0 replaces the
// catalog's window (a --context-window setting); the encoding always comes from the
// catalog.
func Resolve(provider, modelID string, contextWindow int) Resolved {
	r := Resolved{Provider: provider, ModelID: modelID, Model: DefaultModel}
	r.Model.ID = modelID
	if modelID != "" {
		if m, ok := LookupProvider(provider, modelID); ok {
			r.Model, r.Known = m, true
		}
	}
	r.ContextWindow = r.Model.ContextWindow
	if contextWindow > 0 {
		r.ContextWindow, r.WindowOverridden = contextWindow, true
	}
	return r
}

// Encoding is the tiktoken encoding to count the session with.
func (r Resolved) Encoding() string { return r.Model.Encoding }

// Name is "provider/model" (or "model" without a provider, "" without a model).
func (r Resolved) Name() string {
	if r.Provider != "" && r.ModelID != "" {
		return r.Provider + "/" + r.ModelID
	}
	return r.ModelID
}
