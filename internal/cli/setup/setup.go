package setup

import (
	"context"
	"flag"
	"fmt"
	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/fleetops/move"
	"github.com/compactor-dev/compactor/wire"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/internal/cli/command"
	"github.com/compactor-dev/compactor/pipeline"
)

// Command is compactor setup.
var Command = &command.Command{Name: "setup", Summary: "set up (or upgrade, --migrate) a fleet's streams, buckets and consumers: the admin's step", Run: run}

const setupHelp = `
Set up what a fleet of compactor workers and clients uses on a NATS account, with the
account's admin's credentials: the streams (COMPACTOR_JOBS, _EVENTS, _DLQ) and the buckets
(COMPACTOR_WORKERS, _LEASES, _SWEEP, _ATTEMPTS, _PREPARED, _SPEND, _SETTINGS), each with
the settings it needs and no other (no rollups; deletes and purges only where used) and a
byte and message limit; each store's consumers (compactor-<store>, compactor-dlq-<store>);
and the fleet's settings record, which workers follow (the lease TTL above all). The
limits must fit the account's JetStream storage: setup checks it before it creates
anything, and says which to lower when they do not. It creates what is missing and
updates what differs from these flags, one log line per setting changed; replicas are
never lowered. Run it again with more --store to add stores; a store once set up stays in
the settings record.

Each host of a fleet has a NATS account of its own (compactor auth): with --credentials
DIR (the directory compactor auth wrote) setup acts in every account, or in the accounts
of the --store given, each with its admin's seed; otherwise in the account of the
credentials given (--nkey, --creds, ...).

Workers ('compactor run --nats-url ...') and clients never create or change any of it:
they say what is missing and that this command sets it up. On a single host,
'compactor run' without --nats-url (its embedded server) or 'compactor run --setup' does
this step itself.

A deployment of an older compactor is refused until it is upgraded, once
(docs/upgrading.md): 'compactor setup --migrate' sets an account of layout 2 up anew in
place (every key and queued job stays), and moves a layout 1 deployment's keys under their
store's name first (stop its workers before). A fleet whose hosts shared one account moves
into accounts of their own in two steps around the server's new configuration:
'--export FILE' on the old account writes every queued job, attempt count, dead letter,
sweep record, prepared summary, owner record and spend count into FILE (read-only; stop
the workers first), and '--import FILE' sets each new account up and writes its stores'
share into it, the jobs in their order. FILE holds session paths and summaries: it is
written readable by its owner only.

A store retired (its host gone for good) keeps its consumers, its keys in every bucket and
its queued jobs until --prune removes them: with --prune, the stores given are the whole
fleet, and what the NATS holds of any other store is removed (its dead letters stay: they
are the operator's; its events age out). Never automatic; refused, naming them, while a
worker of such a store reports; --dry-run says what would go.

Examples:
  compactor setup --nats-url nats://nats:4222 --credentials /etc/nats/compactor
  compactor setup --nats-url nats://nats:4222 --nkey admin-hostA.nk --store hostA --replicas 3
  compactor setup --nats-url nats://nats:4222 --nkey admin.nk --migrate
  compactor setup --nats-url nats://nats:4222 --nkey old-admin.nk --export move.jsonl
  compactor setup --nats-url nats://nats:4222 --credentials /etc/nats/compactor --import move.jsonl
  compactor setup --nats-url nats://nats:4222 --nkey admin-hostA.nk --store hostA --prune --dry-run`

// setupFlags are the flags of compactor setup.
type setupFlags struct {
	ncfg                                  access.NATSConfig
	stores                                command.StringList
	sc                                    fleetops.SetupConfig
	limits                                command.StreamLimits
	migrate, force, prune, dryRun, asJSON *bool
	dataDir, credDir, exportTo, importing *string
	configFile                            *string
	timeout                               *time.Duration
}

func run(ctx context.Context, env *command.Env) error {
	fs := command.NewFlagSet(env, "setup", "--store NAME... [flags]", setupHelp)
	f := bindFlags(fs, env)
	pos, err := fs.ParseArgs(env.Args)
	if err != nil {
		return err
	}
	if err := command.ApplyConfigFile(fs.FlagSet, *f.configFile, command.ServiceSetting); err != nil {
		return err
	}
	if len(pos) > 0 {
		return command.Usagef("unexpected argument %q (stores are given with --store NAME)", pos[0])
	}
	if err := f.check(fs); err != nil {
		return err
	}
	log, err := command.NewLogger(env.Stderr, "", "info", new(slog.LevelVar))
	if err != nil {
		return err
	}
	ncfg := access.LocalNATS(*f.dataDir, f.ncfg)
	ncfg.Name, ncfg.Role = "compactor setup", access.RoleAdmin
	if *f.exportTo != "" {
		return exportDeployment(ctx, env, ncfg, *f.exportTo, *f.force, *f.asJSON, log)
	}
	results, err := f.setUp(ctx, ncfg, log)
	if err != nil {
		return err
	}
	if *f.asJSON {
		if len(results) == 1 && *f.credDir == "" {
			return command.WriteJSON(env.Stdout, results[0].SetupResult)
		}
		return command.WriteJSON(env.Stdout, results)
	}
	for _, out := range results {
		writeSetup(env.Stdout, out, *f.dryRun)
	}
	return nil
}

// bindFlags declares setup's flags.
func bindFlags(fs *command.FlagSet, env *command.Env) *setupFlags {
	f := &setupFlags{}
	sc := &f.sc
	f.migrate = fs.Bool("migrate", false, "upgrade a deployment of an older compactor first (stop its workers before; no queued job is lost)")
	f.force = fs.Bool("force", false, "with --migrate or --export: even though workers reported within the last 30 s")
	f.prune = fs.Bool("prune", false, "remove what the NATS holds of stores not given with --store (retired stores): their consumers, their keys in every bucket, their queued jobs; refused while a worker of one reports")
	f.dryRun = fs.Bool("dry-run", false, "with --prune: say what would be removed, remove and set up nothing")
	f.asJSON = fs.Bool("json", false, "print what was set up as JSON")
	f.dataDir = fs.String("data-dir", access.DefaultDataDir(env.Getenv), "without --nats-url: the data directory of a compactor run on this machine, whose NATS it sets up (env COMPACTOR_DATA_DIR)")
	f.timeout = fs.Duration("startup-timeout", pipeline.DefaultStartupTimeout, "how long to wait for JetStream (a cluster electing leaders)")
	f.credDir = fs.String("credentials", "", "the fleet's credentials directory (compactor auth --credentials): set up every account in it (or those of --store), each with its admin's seed")
	f.exportTo = fs.String("export", "", "write what this NATS account holds of compactor's into `FILE`, for --import into accounts of their own (stop the workers first); sets nothing up")
	f.importing = fs.String("import", "", "set the account(s) up and write the share of their stores of `FILE` (an --export) into them")
	command.BindNATSFlags(fs.FlagSet, &f.ncfg, env.Getenv)
	f.configFile = command.ConfigFlag(fs.FlagSet, env)
	fs.Var(&f.stores, "store", "a store to set up: `NAME` (NAME=DIR is taken too, the directory ignored; repeatable)")
	fs.IntVar(&sc.Replicas, "replicas", 1, "replicas of every stream and bucket on a clustered NATS (1-5); never lowers what the server already has")
	fs.DurationVar(&sc.AckWait, "ack-wait", fleetops.DefaultAckWait, "a job neither answered nor heartbeated for this long is redelivered")
	fs.IntVar(&sc.MaxDeliver, "max-deliver", fleetops.DefaultMaxDeliver, "handler attempts of a job (crashes included) before it is dead-lettered")
	fs.DurationVar(&sc.LeaseTTL, "lease-ttl", fleetops.DefaultLeaseTTL, "lifetime of a session's lease, which every worker renews at a third of it; also how long a NATS outage a running job survives")
	fs.DurationVar(&sc.DuplicateWindow, "duplicate-window", fleetops.DefaultDuplicateWindow, "the same enqueue request within this window is stored once")
	fs.DurationVar(&sc.PreparedTTL, "prepared-ttl", fleetops.DefaultPreparedTTL, "the longest a prepared summary is kept (it is deleted once used or compacted past)")
	command.BindStreamLimits(fs.FlagSet, &f.limits, "")
	return f
}

// check validates the stores, which modes go together, and the settings (with those of
// an --import's old account for every flag not given).
func (f *setupFlags) check(fs *command.FlagSet) error {
	sc := &f.sc
	for _, s := range f.stores {
		name, _, _ := strings.Cut(s, "=")
		if err := wire.ValidateStoreName(name); err != nil {
			return command.Usagef("--store %q: %v", s, err)
		}
		sc.Stores = append(sc.Stores, name)
	}
	if err := f.checkModes(); err != nil {
		return err
	}
	if *f.importing != "" {
		// The old account's settings, unless given here.
		if err := settingsFromExport(fs, *f.importing, sc, &f.limits); err != nil {
			return err
		}
	}
	switch {
	case sc.Replicas < 1 || sc.Replicas > 5:
		return command.Usagef("--replicas: %d, need 1..5", sc.Replicas)
	case sc.AckWait < 100*time.Millisecond:
		return command.Usagef("--ack-wait: %s is too short (min 100ms)", sc.AckWait)
	case sc.MaxDeliver < 1:
		return command.Usagef("--max-deliver: %d, need at least 1", sc.MaxDeliver)
	case sc.LeaseTTL < time.Second:
		return command.Usagef("--lease-ttl: %s is too short (min 1s, the KV bucket's TTL resolution)", sc.LeaseTTL)
	case sc.DuplicateWindow < time.Second:
		return command.Usagef("--duplicate-window: %s is too short", sc.DuplicateWindow)
	case sc.PreparedTTL < time.Second:
		return command.Usagef("--prepared-ttl: %s is too short", sc.PreparedTTL)
	}
	f.limits.Apply(sc)
	if err := sc.Validate(); err != nil {
		return command.Usagef("%v", command.FlagError(err))
	}
	return nil
}

// checkModes refuses the modes that do not go together (--export, --import, --prune,
// --migrate, --dry-run) and what each needs.
func (f *setupFlags) checkModes() error {
	stores := f.sc.Stores
	switch {
	case *f.exportTo != "" && (*f.importing != "" || *f.prune || *f.credDir != "" || len(stores) > 0):
		return command.Usagef("--export reads the old account with its admin's credentials alone: not with --import, --prune, --credentials or --store")
	case *f.importing != "" && (*f.prune || *f.migrate):
		return command.Usagef("--import sets up new accounts: not with --prune or --migrate")
	case *f.importing != "" && len(stores) == 0 && *f.credDir == "":
		return command.Usagef("--import needs the stores of this account (--store NAME...), or --credentials DIR for every account")
	case *f.exportTo != "":
	case len(stores) == 0 && *f.prune:
		return command.Usagef("--prune needs the fleet's stores, every one to keep (--store NAME...): the others are removed")
	case len(stores) == 0 && !*f.migrate && *f.credDir == "":
		return command.Usagef("--store NAME is needed: the stores whose consumers to set up (or --credentials DIR: every account's)")
	case *f.prune && *f.migrate:
		return command.Usagef("--prune and --migrate: migrate first, then prune")
	case *f.dryRun && !*f.prune:
		return command.Usagef("--dry-run goes with --prune")
	}
	return nil
}

// setUp sets up each account: the one ncfg reaches, or every one of --credentials (those
// of --store), each with its admin's seed.
func (f *setupFlags) setUp(ctx context.Context, ncfg access.NATSConfig, log *slog.Logger) ([]setupOutput, error) {
	accounts := []command.FleetAccount{{Stores: f.sc.Stores, NATS: ncfg}}
	if *f.credDir != "" {
		var err error
		if accounts, err = command.FleetAccounts(*f.credDir, access.RoleAdmin, f.sc.Stores, ncfg); err != nil {
			return nil, err
		}
	}
	step := setupStep{migrate: *f.migrate, force: *f.force, prune: *f.prune, dryRun: *f.dryRun, importFrom: *f.importing}
	var results []setupOutput
	for _, a := range accounts {
		one := f.sc
		one.Stores = a.Stores
		out, err := setupAccount(ctx, a.NATS, one, step, *f.timeout, log)
		if err != nil {
			if a.Account != "" {
				return nil, fmt.Errorf("account %s: %w", a.Account, err)
			}
			return nil, err
		}
		out.Account = a.Account
		results = append(results, out)
	}
	return results, nil
}

// setupStep is what setup does in an account.
type setupStep struct {
	migrate, force, prune, dryRun bool
	importFrom                    string
}

// setupOutput is what setup did in one account.
type setupOutput struct {
	Account string `json:"account,omitempty"`
	*fleetops.SetupResult
	Imported *move.Counts `json:"imported,omitempty"`
}

// setupAccount sets up one account (and migrates, prunes or imports first), retrying while
// JetStream is not ready.
func setupAccount(ctx context.Context, ncfg access.NATSConfig, sc fleetops.SetupConfig, st setupStep, timeout time.Duration, log *slog.Logger) (setupOutput, error) {
	nc, err := ncfg.Connect()
	if err != nil {
		return setupOutput{}, err
	}
	defer nc.Close()
	var (
		out    setupOutput
		pruned []fleetops.PrunedStore
	)
	step := func() (setupOutput, error) {
		if st.importFrom != "" {
			f, err := os.Open(st.importFrom)
			if err != nil {
				return setupOutput{}, fmt.Errorf("--import: %w", err)
			}
			defer f.Close()
			res, c, err := move.Import(ctx, nc, f, sc, log)
			return setupOutput{SetupResult: res, Imported: c}, err
		}
		if st.prune && pruned == nil {
			p, err := fleetops.Prune(ctx, nc, sc.Stores, st.dryRun, log)
			if err != nil || st.dryRun {
				return setupOutput{SetupResult: &fleetops.SetupResult{Stores: sc.Stores, Pruned: p}}, err
			}
			pruned = p
		}
		res, err := fleetops.Setup(ctx, nc, sc, st.migrate, st.force, log)
		if res != nil {
			res.Pruned = pruned
		}
		return setupOutput{SetupResult: res}, err
	}
	deadline := time.Now().Add(timeout)
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		out, err = step()
		if err == nil || !fleetops.Transient(err) || time.Now().Add(wait).After(deadline) {
			break
		}
		log.Warn("JetStream not ready; retrying", "retry_in", wait.String(), "err", err)
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-time.After(wait):
		}
	}
	return out, err
}

// writeSetup says what setup did in an account.
func writeSetup(w io.Writer, out setupOutput, dryRun bool) {
	if out.Account != "" {
		fmt.Fprintf(w, "account %s:\n", out.Account)
	}
	writePruned(w, out.Pruned, dryRun)
	if dryRun {
		return
	}
	f := out.Fleet
	if m := out.Migrated; m != nil && m.From == 1 {
		fmt.Fprintf(w, "migrated from layout %d: %d sweep records and %d attempt counts moved under their store's name, %d counts of jobs no longer queued and %d stale leases dropped, %d stores found by their consumers\n",
			m.From, m.SweepRecords, m.AttemptCounts, m.AttemptsGone, m.LeasesDropped, m.ConsumersFound)
	} else if m != nil {
		fmt.Fprintf(w, "migrated from layout %d in place: every stream and bucket set up anew (the changes are logged), every key and queued job kept\n", m.From)
	}
	if c := out.Imported; c != nil {
		fmt.Fprintf(w, "imported for stores %s: %s, %s, %s, keys %s", strings.Join(c.Stores, ", "), command.Plural(c.Jobs, "queued job", "queued jobs"),
			command.Plural(c.Attempts, "attempt count", "attempt counts"), command.Plural(c.DeadLetters, "dead letter", "dead letters"), countsText(c.Keys))
		if c.Already > 0 {
			fmt.Fprintf(w, "; %d jobs imported before", c.Already)
		}
		if len(c.Left) > 0 {
			fmt.Fprintf(w, "; left for the accounts of the other stores: %s", countsText(c.Left))
		}
		fmt.Fprintln(w)
	}
	jobsBytes, eventsBytes, dlqBytes, recBytes := command.ByteSize(f.JobsMaxBytes), command.ByteSize(f.EventsMaxBytes), command.ByteSize(f.DLQMaxBytes), command.ByteSize(f.RecordsMaxBytes)
	fmt.Fprintf(w, "set up (layout %d): stores %s; lease TTL %s, ack wait %s, max deliver %d, duplicate window %s, prepared TTL %s, replicas %d; jobs kept %s and %s at most, events %s and %s, dead letters %s, each bucket %s\n",
		f.Layout, strings.Join(f.Stores, ", "), time.Duration(f.LeaseTTL), time.Duration(f.AckWait), f.MaxDeliver, time.Duration(f.DuplicateWindow),
		time.Duration(f.PreparedTTL), f.Replicas, time.Duration(f.JobsMaxAge), jobsBytes.String(), time.Duration(f.EventsMaxAge), eventsBytes.String(),
		dlqBytes.String(), recBytes.String())
}

// countsText is "a 1, b 2", sorted.
func countsText(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// exportDeployment writes the account's deployment into file (replaced whole: written
// beside it, then renamed), readable by its owner only.
func exportDeployment(ctx context.Context, env *command.Env, ncfg access.NATSConfig, file string, force, asJSON bool, log *slog.Logger) error {
	nc, err := ncfg.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	tmp, err := os.CreateTemp(filepath.Dir(file), filepath.Base(file)+".*")
	if err != nil {
		return fmt.Errorf("--export: %w", err)
	}
	defer os.Remove(tmp.Name())
	c, err := move.Export(ctx, nc, tmp, force, log)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return fmt.Errorf("--export: %w", err)
	}
	if asJSON {
		return command.WriteJSON(env.Stdout, c)
	}
	fmt.Fprintf(env.Stdout, "exported into %s: stores %s; %s, %s, %s, keys %s; not exported: %s\n", file, strings.Join(c.Stores, ", "),
		command.Plural(c.Jobs, "queued job", "queued jobs"), command.Plural(c.Attempts, "attempt count", "attempt counts"), command.Plural(c.DeadLetters, "dead letter", "dead letters"),
		countsText(c.Keys), countsText(c.Dropped))
	return nil
}

// settingsFromExport takes the old account's settings from an export for every setup flag
// not given.
func settingsFromExport(fs *command.FlagSet, file string, sc *fleetops.SetupConfig, limits *command.StreamLimits) error {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("--import: %w", err)
	}
	defer f.Close()
	old, err := move.ReadExportSettings(f)
	if err != nil || old == nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	take := func(name string, has bool, set func()) {
		if has && !given[name] {
			set()
		}
	}
	take("replicas", old.Replicas > 0, func() { sc.Replicas = old.Replicas })
	take("ack-wait", old.AckWait > 0, func() { sc.AckWait = time.Duration(old.AckWait) })
	take("max-deliver", old.MaxDeliver > 0, func() { sc.MaxDeliver = old.MaxDeliver })
	take("lease-ttl", old.LeaseTTL > 0, func() { sc.LeaseTTL = time.Duration(old.LeaseTTL) })
	take("duplicate-window", old.DuplicateWindow > 0, func() { sc.DuplicateWindow = time.Duration(old.DuplicateWindow) })
	take("prepared-ttl", old.PreparedTTL > 0, func() { sc.PreparedTTL = time.Duration(old.PreparedTTL) })
	take("jobs-max-age", old.JobsMaxAge > 0, func() { limits.JobsMaxAge = time.Duration(old.JobsMaxAge) })
	take("events-max-age", old.EventsMaxAge > 0, func() { limits.EventsMaxAge = time.Duration(old.EventsMaxAge) })
	return nil
}

// writePruned says what a prune removed (or would, dryRun).
func writePruned(w io.Writer, pruned []fleetops.PrunedStore, dryRun bool) {
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
			orNone(strings.Join(p.Consumers, ", ")), orNone(strings.Join(keys, ", ")), command.Plural(p.Jobs, "queued job", "queued jobs"))
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
