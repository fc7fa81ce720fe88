package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/pipeline"
)

func init() {
	register(&Command{Name: "sweep", Summary: "scan stores and enqueue the sessions over budget", Run: runSweep})
}

func runSweep(ctx context.Context, env *Env) error {
	fs := newFlagSet(env, "sweep", "[--store NAME=DIR]... [flags]", `
Scan the stores for session files (Pi's sessions/--<cwd>--/<ts>_<id>.jsonl and any nested
.jsonl), skip files unchanged since the last sweep and files modified within --idle, and
enqueue a compact job for every session over budget. Jobs go to the NATS of a running
'compactor run' (default nats://127.0.0.1:4222). A progress bar is drawn on a terminal
(stderr), then one summary line is printed (--json: the stats as JSON).

A sweep is a client: it uses the streams and buckets a 'compactor run' set up and never
creates or changes them; when one is missing it says which (exit 1). It also refuses to
queue for a store that no worker serves (exit 1, naming the stores that are served),
unless --allow-unserved: the jobs then wait until a worker serves the store.

Examples:
  compactor sweep --store default=$HOME/.pi/agent/sessions
  compactor sweep --store team=/srv/sessions --idle 30m --nats-url nats://nats:4222 --creds nats.creds`)
	var f serviceFlags
	f.bind(fs, env, false)
	ops := bindOpsFlags(fs.FlagSet, env, opsSweeper)
	allowUnserved := allowUnservedFlag(fs)
	cfg, err := ops.config(f.parse(fs, env))
	if err != nil {
		return err
	}
	cfg, err = f.compose(cfg, env, &serviceRef{})
	if err != nil {
		return err
	}
	svc, err := pipeline.New(cfg)
	if err != nil {
		return &UsageError{Err: flagError(err)}
	}
	defer svc.Close()
	if err := svc.Start(ctx); err != nil {
		return err
	}
	var stores []string
	for _, st := range cfg.Stores {
		stores = append(stores, st.Name)
	}
	if err := checkServed(ctx, env.Stderr, svc.Conn(), stores, *allowUnserved); err != nil {
		return err
	}
	progress := newSweepProgress(env.Stderr, env.Stdout)
	if f.asJSON {
		progress.out = nil
	}
	st, err := svc.Sweep(ctx, progress)
	if err != nil {
		return err
	}
	if f.asJSON {
		return writeJSON(env.Stdout, sweepDoc(st))
	}
	return nil
}

// allowUnservedFlag registers --allow-unserved (enqueue, sweep, dlq retry).
func allowUnservedFlag(fs *flagSet) *bool {
	return fs.Bool("allow-unserved", false, "queue even for a store that no worker serves now (the jobs wait until one does); without it, such a store is refused (exit 1)")
}

// checkServed refuses (exit 1) when a store has no worker, naming the stores that are
// served; with allow it only warns on w and lets the caller queue.
func checkServed(ctx context.Context, w io.Writer, nc *nats.Conn, stores []string, allow bool) error {
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
