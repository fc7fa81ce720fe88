package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/pipeline"
)

func init() {
	register(&Command{Name: "setup", Summary: "set up (or upgrade, --migrate) a fleet's streams, buckets and consumers: the admin's step", Run: runSetup})
}

const setupHelp = `
Set up what a fleet of compactor workers and clients uses on a NATS deployment, with the
admin's credentials: the streams (COMPACTOR_JOBS, _EVENTS, _DLQ) with their limits, the
buckets (COMPACTOR_WORKERS, _LEASES, _SWEEP, _ATTEMPTS, _PREPARED, _SPEND, _SETTINGS), each
store's consumers (compactor-<store>, compactor-dlq-<store>) and the fleet's settings
record, which workers follow (the lease TTL above all). It creates what is missing and updates what differs from
these flags, one log line per setting changed; replicas are never lowered. Run it again
with more --store to add stores; a store once set up stays in the settings record.

Workers ('compactor run --nats-url ...') and clients never create or change any of it:
they say what is missing and that this command sets it up. On a single host,
'compactor run' without --nats-url (its embedded server) or 'compactor run --setup' does
this step itself.

A deployment of an older compactor (before this layout: keys not under their store's
name, no settings record) is refused until it is upgraded, once: stop its workers, then
'compactor setup --migrate' moves the sweep records and attempt counts under their store's
name, drops the stale leases, updates the consumers and writes the settings; every queued
job stays queued (docs/security.md, "Upgrading").

A store retired (its host gone for good) keeps its consumers, its keys in every bucket and
its queued jobs until --prune removes them: with --prune, the stores given are the whole
fleet, and what the NATS holds of any other store is removed (its dead letters stay: they
are the operator's; its events age out). Never automatic; refused, naming them, while a
worker of such a store reports; --dry-run says what would go.

Examples:
  compactor setup --nats-url nats://nats:4222 --nkey admin.nk --store hostA --store hostB --replicas 3
  compactor setup --nats-url nats://nats:4222 --nkey admin.nk --migrate
  compactor setup --nats-url nats://nats:4222 --nkey admin.nk --store hostA --prune --dry-run`

func runSetup(ctx context.Context, env *Env) error {
	fs := newFlagSet(env, "setup", "--store NAME... [flags]", setupHelp)
	var (
		ncfg    pipeline.NATSConfig
		stores  stringList
		sc      pipeline.SetupConfig
		migrate = fs.Bool("migrate", false, "upgrade a deployment of an older compactor first (stop its workers before; no queued job is lost)")
		force   = fs.Bool("force", false, "with --migrate: even though workers reported within the last 30 s")
		prune   = fs.Bool("prune", false, "remove what the NATS holds of stores not given with --store (retired stores): their consumers, their keys in every bucket, their queued jobs; refused while a worker of one reports")
		dryRun  = fs.Bool("dry-run", false, "with --prune: say what would be removed, remove and set up nothing")
		asJSON  = fs.Bool("json", false, "print what was set up as JSON")
		dataDir = fs.String("data-dir", pipeline.DefaultDataDir(env.Getenv), "without --nats-url: the data directory of a compactor run on this machine, whose NATS it sets up (env COMPACTOR_DATA_DIR)")
		timeout = fs.Duration("startup-timeout", pipeline.DefaultStartupTimeout, "how long to wait for JetStream (a cluster electing leaders)")
	)
	bindNATSFlags(fs.FlagSet, &ncfg, env.Getenv)
	configFile := configFlag(fs.FlagSet, env)
	fs.Var(&stores, "store", "a store to set up: `NAME` (NAME=DIR is taken too, the directory ignored; repeatable)")
	fs.IntVar(&sc.Replicas, "replicas", 1, "replicas of every stream and bucket on a clustered NATS (1-5); never lowers what the server already has")
	fs.DurationVar(&sc.AckWait, "ack-wait", pipeline.DefaultAckWait, "a job neither answered nor heartbeated for this long is redelivered")
	fs.IntVar(&sc.MaxDeliver, "max-deliver", pipeline.DefaultMaxDeliver, "handler attempts of a job (crashes included) before it is dead-lettered")
	fs.DurationVar(&sc.LeaseTTL, "lease-ttl", pipeline.DefaultLeaseTTL, "lifetime of a session's lease, which every worker renews at a third of it; also how long a NATS outage a running job survives")
	fs.DurationVar(&sc.DuplicateWindow, "duplicate-window", pipeline.DefaultDuplicateWindow, "the same enqueue request within this window is stored once")
	fs.DurationVar(&sc.PreparedTTL, "prepared-ttl", pipeline.DefaultPreparedTTL, "the longest a prepared summary is kept (it is deleted once used or compacted past)")
	var limits streamLimits
	bindStreamLimits(fs.FlagSet, &limits, "")
	pos, err := fs.parse(env.Args)
	if err != nil {
		return err
	}
	if err := applyConfigFile(fs.FlagSet, *configFile, serviceSetting); err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("unexpected argument %q (stores are given with --store NAME)", pos[0])
	}
	for _, s := range stores {
		name, _, _ := strings.Cut(s, "=")
		if err := pipeline.ValidateStoreName(name); err != nil {
			return usageErrorf("--store %q: %v", s, err)
		}
		sc.Stores = append(sc.Stores, name)
	}
	switch {
	case len(sc.Stores) == 0 && *prune:
		return usageErrorf("--prune needs the fleet's stores, every one to keep (--store NAME...): the others are removed")
	case len(sc.Stores) == 0 && !*migrate:
		return usageErrorf("--store NAME is needed: the stores whose consumers to set up")
	case *prune && *migrate:
		return usageErrorf("--prune and --migrate: migrate first, then prune")
	case *dryRun && !*prune:
		return usageErrorf("--dry-run goes with --prune")
	}
	switch {
	case sc.Replicas < 1 || sc.Replicas > 5:
		return usageErrorf("--replicas: %d, need 1..5", sc.Replicas)
	case sc.AckWait < 100*time.Millisecond:
		return usageErrorf("--ack-wait: %s is too short (min 100ms)", sc.AckWait)
	case sc.MaxDeliver < 1:
		return usageErrorf("--max-deliver: %d, need at least 1", sc.MaxDeliver)
	case sc.LeaseTTL < time.Second:
		return usageErrorf("--lease-ttl: %s is too short (min 1s, the KV bucket's TTL resolution)", sc.LeaseTTL)
	case sc.DuplicateWindow < time.Second:
		return usageErrorf("--duplicate-window: %s is too short", sc.DuplicateWindow)
	case sc.PreparedTTL < time.Second:
		return usageErrorf("--prepared-ttl: %s is too short", sc.PreparedTTL)
	}
	limits.apply(&sc)
	if err := sc.Validate(); err != nil {
		return usageErrorf("%v", flagError(err))
	}
	log, err := newLogger(env.Stderr, "", "info", new(slog.LevelVar))
	if err != nil {
		return err
	}
	ncfg = pipeline.LocalNATS(*dataDir, ncfg)
	ncfg.Name, ncfg.Role = "compactor setup", pipeline.RoleAdmin
	nc, err := ncfg.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	var (
		res    *pipeline.SetupResult
		pruned []pipeline.PrunedStore
	)
	step := func() (*pipeline.SetupResult, error) {
		if *prune && pruned == nil {
			p, err := pipeline.Prune(ctx, nc, sc.Stores, *dryRun, log)
			if err != nil || *dryRun {
				return &pipeline.SetupResult{Stores: sc.Stores, Pruned: p}, err
			}
			pruned = p
		}
		res, err := pipeline.Setup(ctx, nc, sc, *migrate, *force, log)
		if res != nil {
			res.Pruned = pruned
		}
		return res, err
	}
	deadline := time.Now().Add(*timeout)
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		res, err = step()
		if err == nil || !pipeline.Transient(err) || time.Now().Add(wait).After(deadline) {
			break
		}
		log.Warn("JetStream not ready; retrying", "retry_in", wait.String(), "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(env.Stdout, res)
	}
	writePruned(env.Stdout, res.Pruned, *dryRun)
	if *dryRun {
		return nil
	}
	f := res.Fleet
	if m := res.Migrated; m != nil {
		fmt.Fprintf(env.Stdout, "migrated from layout %d: %d sweep records and %d attempt counts moved under their store's name, %d counts of jobs no longer queued and %d stale leases dropped, %d stores found by their consumers\n",
			m.From, m.SweepRecords, m.AttemptCounts, m.AttemptsGone, m.LeasesDropped, m.ConsumersFound)
	}
	jobsBytes, eventsBytes := byteSize(f.JobsMaxBytes), byteSize(f.EventsMaxBytes)
	fmt.Fprintf(env.Stdout, "set up (layout %d): stores %s; lease TTL %s, ack wait %s, max deliver %d, duplicate window %s, prepared TTL %s, replicas %d; jobs kept %s and %s at most, events %s and %s\n",
		f.Layout, strings.Join(f.Stores, ", "), time.Duration(f.LeaseTTL), time.Duration(f.AckWait), f.MaxDeliver, time.Duration(f.DuplicateWindow),
		time.Duration(f.PreparedTTL), f.Replicas, time.Duration(f.JobsMaxAge), jobsBytes.String(), time.Duration(f.EventsMaxAge), eventsBytes.String())
	return nil
}

// writePruned says what a prune removed (or would, dryRun).
func writePruned(w io.Writer, pruned []pipeline.PrunedStore, dryRun bool) {
	verb := "removed"
	if dryRun {
		verb = "would remove"
		if len(pruned) == 0 {
			fmt.Fprintln(w, "nothing to prune: every store found is in the list")
		}
	}
	for _, p := range pruned {
		var keys []string
		for _, b := range slices.Sorted(maps.Keys(p.Keys)) {
			keys = append(keys, fmt.Sprintf("%s %d", b, p.Keys[b]))
		}
		fmt.Fprintf(w, "%s store %s (found: %s): consumers %s; keys: %s; %s\n", verb, p.Store, p.Reason,
			orNone(strings.Join(p.Consumers, ", ")), orNone(strings.Join(keys, ", ")), plural(p.Jobs, "queued job", "queued jobs"))
		if p.Dead > 0 {
			fmt.Fprintf(w, "  kept: its dead letters (%d): compactor dlq list --store %s, compactor dlq purge --store %s\n", p.Dead, p.Store, p.Store)
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
