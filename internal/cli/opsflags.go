package cli

import (
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/pipeline"
)

// opsRole says which operations flags a command takes.
type opsRole int

const (
	// opsWorker (run): replicas, JetStream timings, the embedded server's address.
	opsWorker opsRole = iota
	// opsSweeper (sweep): the data directory where a local service leaves its address, how
	// long to wait for JetStream, and the sweeps' retry backoff. Not the settings of the
	// streams and consumers: only a service sets those up (a client never creates or
	// changes them, so one typed without --replicas cannot lower a fleet's).
	opsSweeper
	// opsClient (dlq): only the data directory, to find a local service.
	opsClient
)

// opsFlags are the settings an operator of a fleet needs. They live apart from serviceFlags
// so each command opts in with one line; every flag is also a --config key.
type opsFlags struct {
	fs             *flag.FlagSet
	role           opsRole
	replicas       int
	ackWait        time.Duration
	maxDeliver     int
	leaseTTL       time.Duration
	dupWindow      time.Duration
	startupTimeout time.Duration
	retryBase      time.Duration
	retryMax       time.Duration
	listen         string
	monitor        string
	sync           natsSync
	dataDir        string // clients: where a local service writes its NATS URL
	limits         streamLimits
}

// natsSync is --nats-sync: "always", or how often the embedded server syncs to disk.
type natsSync struct {
	every  time.Duration
	always bool
	set    bool
}

func (n *natsSync) String() string {
	switch {
	case n == nil || !n.set:
		return "2m0s"
	case n.always:
		return "always"
	}
	return n.every.String()
}

// Placeholder is its word in --help.
func (n *natsSync) Placeholder() string { return "always|DURATION" }

func (n *natsSync) Set(s string) error {
	if s == "always" {
		*n = natsSync{always: true, set: true}
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return fmt.Errorf("%q: want always or a duration (2m, 1s)", s)
	}
	*n = natsSync{every: d, set: true}
	return nil
}

// streamLimits are the flags of the streams' and buckets' limits (setup's settings).
type streamLimits struct {
	jobsMaxAge, eventsMaxAge                                   time.Duration
	jobsMaxBytes, eventsMaxBytes, dlqMaxBytes, recordsMaxBytes byteSize
}

// bindStreamLimits declares the limits' flags; note ends their usage.
func bindStreamLimits(fs *flag.FlagSet, l *streamLimits, note string) {
	l.jobsMaxBytes, l.eventsMaxBytes = fleetops.DefaultJobsMaxBytes, fleetops.DefaultEventsMaxBytes
	l.dlqMaxBytes, l.recordsMaxBytes = fleetops.DefaultDLQMaxBytes, fleetops.DefaultRecordsMaxBytes
	fs.DurationVar(&l.jobsMaxAge, "jobs-max-age", fleetops.DefaultJobsMaxAge, "a job still queued this long after it was published is removed, unanswered (a sweep enqueues its session again)"+note)
	fs.Var(&l.jobsMaxBytes, "jobs-max-bytes", "the most queued jobs COMPACTOR_JOBS holds, in `BYTES` (512MiB, 1GiB, ...); past it an enqueue is refused, saying so"+note)
	fs.DurationVar(&l.eventsMaxAge, "events-max-age", fleetops.DefaultEventsMaxAge, "how long job results stay in COMPACTOR_EVENTS"+note)
	fs.Var(&l.eventsMaxBytes, "events-max-bytes", "the most COMPACTOR_EVENTS holds, in `BYTES` (512MiB, 1GiB, ...); past it the oldest results go"+note)
	fs.Var(&l.dlqMaxBytes, "dlq-max-bytes", "the most COMPACTOR_DLQ holds, in `BYTES`; past it the oldest dead letters go"+note)
	fs.Var(&l.recordsMaxBytes, "records-max-bytes", "the most each bucket (leases, sweep records, attempt counts, prepared summaries, workers, spend counts) holds, in `BYTES`; past it a new key is refused"+note)
}

// apply copies the limits into a setup configuration.
func (l streamLimits) apply(sc *fleetops.SetupConfig) {
	sc.JobsMaxAge, sc.JobsMaxBytes, sc.EventsMaxAge, sc.EventsMaxBytes = l.jobsMaxAge, int64(l.jobsMaxBytes), l.eventsMaxAge, int64(l.eventsMaxBytes)
	sc.DLQMaxBytes, sc.RecordsMaxBytes = int64(l.dlqMaxBytes), int64(l.recordsMaxBytes)
}

// byteSize is a flag of a size in bytes: a number, or one with a unit (KiB, MiB, GiB, TiB,
// or kB, MB, GB, TB).
type byteSize int64

func (b *byteSize) String() string {
	n := int64(*b)
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

func (b *byteSize) Set(s string) error {
	units := map[string]int64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
		"kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		i = len(t)
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	unit, ok := units[strings.TrimSpace(t[i:])]
	if err != nil || !ok || n > math.MaxInt64/unit {
		return fmt.Errorf("%q: want a size in bytes, as 1073741824, 512MiB or 1GiB", s)
	}
	*b = byteSize(n * unit)
	return nil
}

func bindOpsFlags(fs *flag.FlagSet, env *Env, role opsRole) *opsFlags {
	o := &opsFlags{fs: fs, role: role}
	if role == opsClient || role == opsSweeper {
		fs.StringVar(&o.dataDir, "data-dir", access.DefaultDataDir(env.Getenv),
			"without --nats-url: the data directory of a compactor run on this machine, whose NATS address it records (env COMPACTOR_DATA_DIR)")
	}
	if role == opsClient {
		return o
	}
	if role == opsWorker {
		const setupOnly = " (a setting of the fleet: applied by the embedded server's service and --setup, as by compactor setup; a worker without them follows the fleet's)"
		fs.IntVar(&o.replicas, "replicas", 1, "replicas of every stream and bucket on a clustered NATS (1-5); never lowers what the server already has"+setupOnly)
		fs.DurationVar(&o.ackWait, "ack-wait", fleetops.DefaultAckWait, "a job neither answered nor heartbeated for this long is redelivered"+setupOnly)
		fs.IntVar(&o.maxDeliver, "max-deliver", fleetops.DefaultMaxDeliver, "handler attempts of a job (crashes included) before it is dead-lettered"+setupOnly)
		fs.DurationVar(&o.leaseTTL, "lease-ttl", fleetops.DefaultLeaseTTL, "lifetime of a session's lease, renewed at a third of it; also how long a NATS outage a running job survives"+setupOnly)
		fs.DurationVar(&o.dupWindow, "duplicate-window", fleetops.DefaultDuplicateWindow, "the same enqueue request within this window is stored once"+setupOnly)
		bindStreamLimits(fs, &o.limits, setupOnly)
	}
	fs.DurationVar(&o.startupTimeout, "startup-timeout", pipeline.DefaultStartupTimeout, "how long to retry at start while JetStream is not ready (a cluster electing leaders)")
	fs.DurationVar(&o.retryBase, "sweep-retry-base", pipeline.DefaultSweepRetryBase, "a session whose job failed or met a busy session (a turn in progress) is enqueued again by a sweep this long after, even unchanged; doubled per further miss")
	fs.DurationVar(&o.retryMax, "sweep-retry-max", pipeline.DefaultSweepRetryMax, "the longest wait of --sweep-retry-base's doubling")
	if role == opsWorker {
		listen := env.Getenv("COMPACTOR_LISTEN")
		if listen == "" {
			listen = access.DefaultEmbeddedHost + ":4222"
		}
		fs.Var(&o.sync, "nats-sync", "without --nats-url: how often the embedded server syncs JetStream to disk, `always` (every write, before it is acknowledged) or an interval (default nats-server's, 2m); between syncs a power loss (not a crash) can lose what was acknowledged (docs/operations.md)")
		fs.StringVar(&o.listen, "listen", listen, "without --nats-url: HOST:PORT of the embedded NATS server (port 0: a free port, logged and recorded in --data-dir); it requires a token generated into --data-dir, or the --nats-token-file or --nats-user/--nats-password-file given (env COMPACTOR_LISTEN)")
		fs.StringVar(&o.monitor, "nats-monitor", "", "without --nats-url: serve the embedded NATS server's monitoring (/varz, /jsz, /connz..., for nats-top or an exporter) on this loopback `HOST:PORT` (port 0: a free one, logged)")
	}
	return o
}

// config completes the configuration that serviceFlags.parse returned (it is called
// with parse's results, so a command opts in with one line).
func (o *opsFlags) config(cfg pipeline.Config, err error) (pipeline.Config, error) {
	if err != nil {
		return cfg, err
	}
	switch o.role {
	case opsWorker:
		cfg.Replicas, cfg.AckWait, cfg.MaxDeliver, cfg.LeaseTTL = o.replicas, o.ackWait, o.maxDeliver, o.leaseTTL
		cfg.DuplicateWindow = o.dupWindow
		cfg.JobsMaxAge, cfg.JobsMaxBytes, cfg.EventsMaxAge, cfg.EventsMaxBytes = o.limits.jobsMaxAge, int64(o.limits.jobsMaxBytes), o.limits.eventsMaxAge, int64(o.limits.eventsMaxBytes)
		cfg.DLQMaxBytes, cfg.RecordsMaxBytes = int64(o.limits.dlqMaxBytes), int64(o.limits.recordsMaxBytes)
		fallthrough
	case opsSweeper:
		cfg.StartupTimeout, cfg.SweepRetryBase, cfg.SweepRetryMax = o.startupTimeout, o.retryBase, o.retryMax
		cfg.Client = o.role == opsSweeper
	}
	if o.monitor != "" && cfg.NATS.URL != "" {
		return cfg, usageErrorf("--nats-monitor: a setting of the embedded server, not with --nats-url (an external server's is its own: http in its configuration)")
	}
	if o.sync.set {
		if cfg.NATS.URL != "" {
			return cfg, usageErrorf("--nats-sync: a setting of the embedded server, not with --nats-url (an external server's is its own: sync_interval in its jetstream block)")
		}
		cfg.EmbeddedSync, cfg.EmbeddedSyncAlways = o.sync.every, o.sync.always
	}
	switch {
	case o.role == opsWorker && cfg.NATS.URL == "":
		host, port, err := access.ParseListen(o.listen)
		if err != nil {
			return cfg, usageErrorf("--listen: %v", err)
		}
		cfg.EmbeddedHost, cfg.EmbeddedPort = host, port
		if o.monitor != "" {
			mh, mp, err := access.ParseListen(o.monitor)
			if err != nil {
				return cfg, usageErrorf("--nats-monitor: %v", err)
			}
			if !isLoopback(mh) {
				return cfg, usageErrorf("--nats-monitor %s: want a loopback address (the monitoring port has no authentication: an exporter beside it serves other hosts)", o.monitor)
			}
			cfg.EmbeddedMonitorHost, cfg.EmbeddedMonitorPort = mh, mp
		}
		// run --once next to a running service on the same data directory works through it.
		if f := o.fs.Lookup("once"); f != nil && f.Value.String() == "true" {
			cfg.JoinRunning = true
		}
	case o.role != opsWorker && cfg.NATS.URL == "":
		cfg.NATS = access.LocalNATS(o.dataDir, cfg.NATS)
	}
	return cfg, nil
}

// clientNATS returns the NATS settings of a client command: the flags, and without
// --nats-url the local service's address and generated token.
func (o *opsFlags) clientNATS(n access.NATSConfig) access.NATSConfig {
	return access.LocalNATS(o.dataDir, n)
}

// operatorAccount is the NATS settings of the operator of store's account: with
// credentials (compactor auth --credentials DIR), the operator's seed of the account of
// fleet.json that holds store (store may be "" when it lists one account only); without,
// the NATS flags as given. what names what the command acts on, for the error that asks
// for --store. Each account's records are its own (its dead letters' sequences, its
// pause records, its events): a command acts in one account at a time.
func (o *opsFlags) operatorAccount(n access.NATSConfig, credentials, command, store, what string) (access.NATSConfig, error) {
	ncfg := o.clientNATS(n)
	ncfg.Name, ncfg.Role = "compactor "+command, access.RoleOperator
	if credentials == "" {
		return ncfg, nil
	}
	var only []string
	if store != "" {
		only = []string{store}
	}
	accounts, err := fleetAccounts(credentials, access.RoleOperator, only, ncfg)
	if err != nil {
		return ncfg, err
	}
	if len(accounts) != 1 {
		return ncfg, usageErrorf("--credentials holds %d accounts: give --store, the store whose account's %s to act on", len(accounts), what)
	}
	a := accounts[0].NATS
	a.Name = ncfg.Name
	return a, nil
}

// operatorAccounts are the accounts an operator's command reads across: with credentials,
// every account of fleet.json (those holding one of stores, when given), each with its
// operator's seed; without, the one account the NATS flags reach (Account "").
func (o *opsFlags) operatorAccounts(n access.NATSConfig, credentials, command string, stores []string) ([]fleetAccount, error) {
	ncfg := o.clientNATS(n)
	ncfg.Name, ncfg.Role = "compactor "+command, access.RoleOperator
	if credentials == "" {
		return []fleetAccount{{Stores: stores, NATS: ncfg}}, nil
	}
	accounts, err := fleetAccounts(credentials, access.RoleOperator, stores, ncfg)
	if err != nil {
		return nil, err
	}
	for i := range accounts {
		accounts[i].NATS.Name = ncfg.Name
	}
	return accounts, nil
}
