package agents

import (
	"log/slog"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// Env is what a worker serves agents with: its connection and stores, the bucket of
// prepared values, its Bridger, and its metrics, log and background tasks.
type Env struct {
	NC     *nats.Conn
	Stores []string
	// Resolve maps a request's path, relative to its store's root, to the session file, as a
	// job's path is resolved.
	Resolve  func(store, rel string) (string, error)
	Prepared *fleetops.Bucket // COMPACTOR_PREPARED (nil: no bridges are served)
	Bridger  Bridger
	Reg      prometheus.Registerer
	// CountPiUnknown counts a request for a Pi release compactor does not know.
	CountPiUnknown func(store, version string)
	// Foreign counts and logs a record refused because it names another store or session.
	Foreign func(store, kind string, err error)
	Log     *slog.Logger
	// Go runs f in the worker's background (its shutdown waits for it).
	Go func(f func())
}

// RegisterMetrics registers the metrics of the hook reports and the bridges on reg (for
// the list of a worker's metric names; the listeners register theirs as they start).
func RegisterMetrics(reg prometheus.Registerer) {
	newHookMetrics(reg)
	newBridgeMetrics(reg)
}
