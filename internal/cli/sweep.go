package cli

import (
	"context"
	"encoding/json"

	"github.com/compactor-dev/compactor/pipeline"
)

func init() {
	register(&Command{Name: "sweep", Summary: "scan stores and enqueue the sessions over budget", Run: runSweep})
}

func runSweep(ctx context.Context, env *Env) error {
	fs := newFlagSet(env, "sweep", "compactor sweep [--store name=DIR]... [flags]", `
Scan the stores for session files (Pi's sessions/--<cwd>--/<ts>_<id>.jsonl and any nested
.jsonl), skip files unchanged since the last sweep and files modified within --idle, and
enqueue a compact job for every session over budget. Jobs go to the NATS of a running
'compactor run' (default nats://127.0.0.1:4222). Progress is drawn on a terminal; otherwise
one summary line is printed (--json: the stats as JSON).

Examples:
  compactor sweep --store default=$HOME/.pi/agent/sessions
  compactor sweep --store team=/srv/sessions --idle 30m --nats-url nats://nats:4222 --creds nats.creds`)
	var f serviceFlags
	f.bind(fs, env, false)
	asJSON := fs.Bool("json", false, "print the stats as JSON")
	ops := bindOpsFlags(fs, env, opsSweeper)
	cfg, err := ops.config(f.parse(fs, env))
	if err != nil {
		return err
	}
	if cfg.NATS.URL == "" {
		cfg.NATS.URL = pipeline.DefaultClientURL
	}
	if err := cfg.Validate(); err != nil {
		return &UsageError{Err: err}
	}
	cfg, err = withImplementation(cfg, &f, env)
	if err != nil {
		return err
	}
	svc, err := pipeline.New(cfg)
	if err != nil {
		return &UsageError{Err: err}
	}
	defer svc.Close()
	progress := env.Stdout
	if *asJSON {
		progress = nil
	}
	st, err := svc.Sweep(ctx, progress)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	return nil
}
