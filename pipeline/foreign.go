package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/compactor-dev/compactor/wire"
)

// Records are trusted only within their store. What a store's key may write (a hook report,
// a bridge request, a prepared value, a worker's beat, a store's owner record, a sweep
// record, an event, a dead letter) says which store and session it is about, and it came
// on a subject or key that names a store and a session too. A record whose fields name
// another store or session than its subject or key is never acted on: it is refused and
// counted (compactor_foreign_records_total, by the store of the subject or key and the
// kind of record), and a dead letter is refused by `dlq retry` naming both stores
// (dlq.go). A store's keys cannot write another store's subjects, so such a record is
// a forgery by the store whose subject it came on, or a bug: either way nothing of the
// store it names is touched on its word.

// Kinds of records (the kind label of compactor_foreign_records_total).
const (
	foreignHook     = "hook"
	foreignBridge   = "bridge"
	foreignPrepared = "prepared"
	foreignBeat     = "beat"
	foreignOwner    = "owner"
	foreignSweep    = "sweep"
)

// recordHead is what every such record says of itself: its store and session.
type recordHead struct {
	Store     string `json:"store"`
	SessionID string `json:"sessionId"`
}

// ForeignError is a record that names another store or session than where it came from.
type ForeignError struct {
	Kind  string // hook, bridge, prepared, beat, owner, sweep, event, dead letter
	Where string // the subject or key it came on
	// Store and Session are those of Where; Names* what the record says.
	Store, Session           string
	NamesStore, NamesSession string
}

func (e *ForeignError) Error() string {
	if e.NamesStore != e.Store {
		return fmt.Sprintf("%s on %s (store %s) names store %q: a record is trusted only within its store; refused", e.Kind, e.Where, e.Store, e.NamesStore)
	}
	return fmt.Sprintf("%s on %s (store %s, session %s) names session %q: refused", e.Kind, e.Where, e.Store, e.Session, e.NamesSession)
}

// checkPrepared checks a prepared value read under store's key for sessionID: a value whose
// "store" or "sessionId" (engine.Prepared's) names another is a *ForeignError. A value
// without them (not one compactor writes) is left to its reader's own checks.
func checkPrepared(value []byte, store, sessionID, where string) error {
	var h recordHead
	if json.Unmarshal(value, &h) != nil {
		return nil
	}
	if (h.Store != "" && h.Store != store) || (h.SessionID != "" && wire.SessionToken(h.SessionID) != wire.SessionToken(sessionID)) {
		return &ForeignError{Kind: foreignPrepared, Where: where, Store: store, Session: sessionID, NamesStore: orSame(h.Store, store), NamesSession: h.SessionID}
	}
	return nil
}

func orSame(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// foreign counts and logs a refused record (its store: the store of its subject or key).
func (s *Service) foreign(store, kind string, err error) {
	s.m.foreign.WithLabelValues(store, kind).Inc()
	level := slog.LevelDebug
	if s.sayEvery("foreign:"+store+":"+kind, time.Minute) {
		level = slog.LevelWarn
	}
	s.log.Log(context.Background(), level, "record refused: it names another store or session than its subject or key", "store", store, "kind", kind, "err", err)
}
