package pipeline

import (
	"context"
	"log/slog"
	"time"
)

// Records are trusted only within their store. What a store's key may write (a hook report,
// a bridge request, a prepared value, a worker's beat, a store's owner record, a sweep
// record, an event, a dead letter) says which store and session it is about, and it came
// on a subject or key that names a store and a session too. A record whose fields name
// another store or session than its subject or key is never acted on: it is refused and
// counted (compactor_foreign_records_total, by the store of the subject or key and the
// kind of record), and a dead letter is refused by `dlq retry` naming both stores
// (operator/dlq.go). A store's keys cannot write another store's subjects, so such a record is
// a forgery by the store whose subject it came on, or a bug: either way nothing of the
// store it names is touched on its word.

// Kinds of records (the kind label of compactor_foreign_records_total); the hook's, the
// bridge's and the prepared value's are package agents'.
const (
	foreignBeat  = "beat"
	foreignOwner = "owner"
	foreignSweep = "sweep"
)

// foreign counts and logs a refused record (its store: the store of its subject or key).
func (s *Service) foreign(store, kind string, err error) {
	s.m.foreign.WithLabelValues(store, kind).Inc()
	level := slog.LevelDebug
	if s.sayEvery("foreign:"+store+":"+kind, time.Minute) {
		level = slog.LevelWarn
	}
	s.log.Log(context.Background(), level, "record refused: it names another store or session than its subject or key", "store", store, "kind", kind, "err", err)
}
