package command

import (
	"context"
	"errors"
	"fmt"
	"github.com/compactor-dev/compactor/fleetops"
	"io"

	"github.com/nats-io/nats.go"
)

// AllowUnservedFlag registers --allow-unserved (enqueue, sweep, dlq retry).
func AllowUnservedFlag(fs *FlagSet) *bool {
	return fs.Bool("allow-unserved", false, "queue even for a store that no worker serves now (the jobs wait until one does); without it, such a store is refused (exit 1)")
}

// CheckServed refuses (exit 1) when a store has no worker, naming the stores that are
// served; with allow it only warns on w and lets the caller queue.
func CheckServed(ctx context.Context, w io.Writer, nc *nats.Conn, stores []string, allow bool) error {
	grace := fleetops.ServedGrace
	if allow {
		grace = 0 // only to warn: no need to wait for a starting service
	}
	err := fleetops.CheckServed(ctx, nc, stores, grace)
	var ue *fleetops.UnservedError
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &ue):
		return err
	case allow:
		fmt.Fprintf(w, "warning: %v; queued anyway (--allow-unserved): the jobs wait until a worker serves the store\n", ue)
		return nil
	}
	return &ExitError{Code: ExitFailed, Err: fmt.Errorf("not queued: %w (start `compactor run` for it, or give --allow-unserved to queue anyway)", ue)}
}
