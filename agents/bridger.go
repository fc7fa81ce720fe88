package agents

import (
	"context"

	"github.com/compactor-dev/compactor/wire"
)

// Bridger extends a session's prepared summary (the raw COMPACTOR_PREPARED value, nil when
// there is none) to the request's cut, reading file (the resolved session file), or makes
// the extract a request with Extract asks for. It returns the new value, or an error;
// errors that implement interface{ Stale() bool } are reported as stale.
type Bridger interface {
	Bridge(ctx context.Context, req wire.BridgeRequest, file string, prepared []byte) ([]byte, error)
}

// BridgerFunc adapts a function to Bridger.
type BridgerFunc func(ctx context.Context, req wire.BridgeRequest, file string, prepared []byte) ([]byte, error)

// Bridge calls f.
func (f BridgerFunc) Bridge(ctx context.Context, req wire.BridgeRequest, file string, prepared []byte) ([]byte, error) {
	return f(ctx, req, file, prepared)
}
