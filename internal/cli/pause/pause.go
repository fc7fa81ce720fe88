package pause

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/wire"
	"time"

	"github.com/compactor-dev/compactor/internal/cli/command"
)

// Pause is compactor pause; Resume is compactor resume.
var (
	Pause  = &command.Command{Name: "pause", Summary: "pause a store: its workers take no more jobs, finish those they hold, and keep its queue", Run: runPause}
	Resume = &command.Command{Name: "resume", Summary: "resume a paused store: its workers take its jobs again", Run: runResume}
)

const pauseHelp = `
Pause STORE during an incident: within 5 s its workers take no more of its jobs; the jobs
they hold run to their end; the queue keeps every job (sweeps and agents still enqueue).
compactor status, the console, /metrics (compactor_store_paused) and /readyz say so.
compactor resume STORE undoes it: the workers drain the queue.

The pause is a record in COMPACTOR_SETTINGS (paused.STORE) of the store's NATS account
that only the account's operator and admin may write (docs/security.md): give that
operator's key (--nkey), or --credentials DIR (compactor auth's) to pick it from
fleet.json. Without --nats-url, the NATS of the compactor run on --data-dir is used.

Examples:
  compactor pause team --reason "LLM endpoint degraded"
  compactor resume team
  compactor pause hostA --nats-url tls://nats.internal:4222 --credentials /etc/nats/compactor`

func runPause(ctx context.Context, env *command.Env) error  { return pauseOrResume(ctx, env, true) }
func runResume(ctx context.Context, env *command.Env) error { return pauseOrResume(ctx, env, false) }

func pauseOrResume(ctx context.Context, env *command.Env, pause bool) error {
	name, verb := "resume", "resumed"
	if pause {
		name, verb = "pause", "paused"
	}
	fs := command.NewFlagSet(env, name, "STORE [flags]", pauseHelp)
	var n access.NATSConfig
	command.BindNATSFlags(fs.FlagSet, &n, env.Getenv)
	ops := command.BindOpsFlags(fs.FlagSet, env, command.OpsClient)
	configFile := command.ConfigFlag(fs.FlagSet, env)
	reason := ""
	if pause {
		fs.StringVar(&reason, "reason", "", "why the store is paused (shown by status and the console)")
	}
	asJSON := fs.Bool("json", false, "print the record written as JSON")
	credentials := fs.String("credentials", "", "the fleet's credentials directory (compactor auth --credentials): act in STORE's account with its operator's seed")
	pos, err := fs.ParseConfigured(env.Args, configFile, true)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return command.Usagef("expected one STORE, got %d arguments", len(pos))
	}
	if err := wire.ValidateStoreName(pos[0]); err != nil {
		return command.Usagef("%v", err)
	}
	ncfg, err := ops.OperatorAccount(n, *credentials, name, pos[0], "pause record")
	if err != nil {
		return err
	}
	nc, err := ncfg.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rec, err := fleetops.SetPaused(rctx, nc, pos[0], pause, reason, "")
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(command.JSONOut(env.Stdout))
		enc.SetIndent("", "  ")
		return enc.Encode(rec)
	}
	fmt.Fprintf(env.Stdout, "store %s %s\n", rec.Store, verb)
	return nil
}
