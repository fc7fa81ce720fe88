package agents

import (
	"encoding/json"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/wire"
)

// Kinds of records this package refuses when they name another store or session (the kind
// label of compactor_foreign_records_total).
const (
	ForeignHook     = "hook"
	ForeignBridge   = "bridge"
	ForeignPrepared = "prepared"
)

// recordHead is what every such record says of itself: its store and session.
type recordHead struct {
	Store     string `json:"store"`
	SessionID string `json:"sessionId"`
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
		return &fleetops.ForeignError{Kind: ForeignPrepared, Where: where, Store: store, Session: sessionID, NamesStore: orSame(h.Store, store), NamesSession: h.SessionID}
	}
	return nil
}

func orSame(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
