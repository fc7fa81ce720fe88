package events

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/operator"
	"github.com/compactor-dev/compactor/wire"
	"io"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/internal/cli/command"
	"github.com/compactor-dev/compactor/internal/visible"
)

// Command is compactor events.
var Command = &command.Command{Name: "events", Summary: "a store's or a session's job history from COMPACTOR_EVENTS (--follow: and what comes)", Run: run}

const eventsHelp = `
Every event kept of a store's jobs (--session: of one session's), oldest first: each
attempt and each job's end, with its outcome, reason, tokens, LLM usage, duration, worker
and error. Events are kept 24 h by default (--events-max-age of setup). --follow prints
new events as they come until interrupted. --json prints one JSON event per line
(docs/json-output.md).

Reading the events is the operator's right (and the agent's, for its own store). Events
are a NATS account's: the operator's key of the store's account (--nkey), or --credentials
DIR (compactor auth's) to pick it from fleet.json. An event that names another store,
session or job than its subject is left out, and counted. Fields a store's worker wrote
are printed with their control and invisible formatting characters escaped (\x1b, \r,
\u202e); --json prints them as they are, JSON-escaped. Without --nats-url, the NATS of
the compactor run on --data-dir is used.

Examples:
  compactor events --store default --session 0195f1c3-...
  compactor events --store team --follow --json | jq .`

func run(ctx context.Context, env *command.Env) error {
	fs := command.NewFlagSet(env, "events", "--store STORE [--session ID] [--follow] [flags]", eventsHelp)
	var n access.NATSConfig
	command.BindNATSFlags(fs.FlagSet, &n, env.Getenv)
	ops := command.BindOpsFlags(fs.FlagSet, env, command.OpsClient)
	configFile := command.ConfigFlag(fs.FlagSet, env)
	store := fs.String("store", "", "the store (required)")
	session := fs.String("session", "", "only this session id's events")
	follow := fs.Bool("follow", false, "then print new events as they come, until interrupted")
	asJSON := fs.Bool("json", false, "print one JSON event per line")
	credentials := fs.String("credentials", "", "the fleet's credentials directory (compactor auth --credentials): act in --store's account with its operator's seed")
	if _, err := fs.ParseConfigured(env.Args, configFile, false); err != nil {
		return err
	}
	if *store == "" {
		return command.Usagef("--store is required")
	}
	if err := wire.ValidateStoreName(*store); err != nil {
		return command.Usagef("--store: %v", err)
	}
	ncfg, err := ops.OperatorAccount(n, *credentials, "events", *store, "events")
	if err != nil {
		return err
	}
	nc, err := ncfg.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	enc := json.NewEncoder(command.JSONOut(env.Stdout))
	count := 0
	leftOut, err := operator.SessionEvents(ctx, nc, *store, *session, *follow, func(ev wire.Event) {
		count++
		if *asJSON {
			_ = enc.Encode(ev)
			return
		}
		writeEvent(env.Stdout, ev)
	})
	if err != nil {
		return err
	}
	if leftOut > 0 {
		fmt.Fprintf(env.Stderr, "%s left out: they name another store, session or job than their subject (docs/security.md, \"Records are trusted only within their store\")\n", command.Plural(leftOut, "event", "events"))
	}
	if count == 0 && !*asJSON {
		what := "store " + *store
		if *session != "" {
			what = "session " + *session + " of store " + *store
		}
		fmt.Fprintf(env.Stderr, "no event of %s is kept\n", what)
	}
	return nil
}

// writeEvent prints an event on one line, every text a store's worker wrote escaped
// (visible.Line).
func writeEvent(w io.Writer, ev wire.Event) {
	v := visible.Line
	var b strings.Builder
	fmt.Fprintf(&b, "%s  job %d  %s  %s  attempt %d  %s", ev.At.Local().Format(time.DateTime), ev.JobSeq, v(ev.Kind), v(ev.SessionID), ev.Attempt, v(string(ev.Outcome)))
	if ev.Reason != "" {
		fmt.Fprintf(&b, ": %s", v(ev.Reason))
	}
	if ev.PiUnknown != "" {
		fmt.Fprintf(&b, "  unknown Pi %s", v(ev.PiUnknown))
	}
	if ev.EntryID != "" {
		fmt.Fprintf(&b, "  tokens %d -> %d  entry %s", ev.TokensBefore, ev.TokensAfter, v(ev.EntryID))
	}
	if ev.LLMTokens > 0 {
		fmt.Fprintf(&b, "  llm %d in (%d cached) %d out", ev.LLMInputTokens, ev.LLMCachedInputTokens, ev.LLMOutputTokens)
		if ev.LLMModel != "" {
			fmt.Fprintf(&b, " by %s", v(ev.LLMModel))
		}
	}
	if ev.RetryInMs > 0 {
		fmt.Fprintf(&b, "  retry in %s", time.Duration(ev.RetryInMs)*time.Millisecond)
	}
	fmt.Fprintf(&b, "  %s  %s", (time.Duration(ev.DurationMs) * time.Millisecond).String(), v(ev.Worker))
	if ev.Error != "" {
		fmt.Fprintf(&b, "  error: %s", v(ev.Error))
	}
	fmt.Fprintln(w, b.String())
}
