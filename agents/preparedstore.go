package agents

import "context"

// PreparedStore reads and writes prepared summaries and the sessions' bases (JSON values;
// the schema belongs to whoever makes them: package engine's Prepared and Base).
type PreparedStore interface {
	// Get returns the session's prepared summary, or nil when there is none.
	Get(ctx context.Context, store, sessionID string) ([]byte, error)
	Put(ctx context.Context, store, sessionID string, value []byte) error
	// GetBase returns the session's base (what its next summary builds on in place of an
	// extract's text), or nil when there is none.
	GetBase(ctx context.Context, store, sessionID string) ([]byte, error)
	// UpdateBase replaces the session's base by what f makes of the one there (nil: none):
	// f returns the new value, or nil to leave the base as it is. When another worker writes
	// the base meanwhile, f runs again on what it wrote.
	UpdateBase(ctx context.Context, store, sessionID string, f func(current []byte) ([]byte, error)) error
}
