package cli

import (
	"context"

	"github.com/compactor-dev/compactor/internal/cli/command"
	"github.com/compactor-dev/compactor/pipeline"
)

func init() {
	command.Register(&command.Command{Name: "sweep", Summary: "scan stores and enqueue the sessions over budget", Run: runSweep})
}

func runSweep(ctx context.Context, env *Env) error {
	fs := command.NewFlagSet(env, "sweep", "[--store NAME=DIR]... [flags]", `
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
	ops := command.BindOpsFlags(fs.FlagSet, env, command.OpsSweeper)
	allowUnserved := command.AllowUnservedFlag(fs)
	cfg, err := ops.Config(f.parse(fs, env))
	if err != nil {
		return err
	}
	cfg, err = f.compose(cfg, env, &serviceRef{})
	if err != nil {
		return err
	}
	svc, err := pipeline.New(cfg)
	if err != nil {
		return &command.UsageError{Err: command.FlagError(err)}
	}
	defer svc.Close()
	if err := svc.Start(ctx); err != nil {
		return err
	}
	var stores []string
	for _, st := range cfg.Stores {
		stores = append(stores, st.Name)
	}
	if err := command.CheckServed(ctx, env.Stderr, svc.Conn(), stores, *allowUnserved); err != nil {
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
		return command.WriteJSON(env.Stdout, sweepDoc(st))
	}
	return nil
}
