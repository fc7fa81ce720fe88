package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BucketPrepared holds one prepared summary per session (job kind "prepare"), keyed by
// PreparedKey. Pi's extension reads it in its session_before_compact hook.
const BucketPrepared = "COMPACTOR_PREPARED"

// DefaultPreparedTTL is how long a prepared summary is kept: a preparation is only useful
// while its session grows toward its next compaction.
const DefaultPreparedTTL = 24 * time.Hour

// PreparedKey is the key of a session's prepared summary: <store>.<session token>.
func PreparedKey(store, sessionID string) string { return store + "." + SessionToken(sessionID) }

// PreparedStore reads and writes prepared summaries (JSON values; the schema belongs to
// whoever makes them: internal/engine's Prepared).
type PreparedStore interface {
	// Get returns the session's prepared summary, or nil when there is none.
	Get(ctx context.Context, store, sessionID string) ([]byte, error)
	Put(ctx context.Context, store, sessionID string, value []byte) error
}

type kvPrepared struct{ kv jetstream.KeyValue }

func (p kvPrepared) Get(ctx context.Context, store, sessionID string) ([]byte, error) {
	e, err := p.kv.Get(ctx, PreparedKey(store, sessionID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("prepared %s: %w", PreparedKey(store, sessionID), err)
	}
	return e.Value(), nil
}

func (p kvPrepared) Put(ctx context.Context, store, sessionID string, value []byte) error {
	if _, err := p.kv.Put(ctx, PreparedKey(store, sessionID), value); err != nil {
		return fmt.Errorf("prepared %s: %w", PreparedKey(store, sessionID), err)
	}
	return nil
}

// ensurePrepared creates or updates the prepared-summaries bucket.
func ensurePrepared(ctx context.Context, js jetstream.JetStream, cfg Config) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      BucketPrepared,
		Description: "compaction summaries prepared ahead of time for live agents (one per session)",
		TTL:         cfg.PreparedTTL,
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure bucket %s: %w", BucketPrepared, err)
	}
	return kv, nil
}

// Prepared is the store of prepared summaries (nil before Start).
func (s *Service) Prepared() PreparedStore {
	if s.res == nil || s.res.prepared == nil {
		return nil
	}
	return kvPrepared{kv: s.res.prepared}
}
