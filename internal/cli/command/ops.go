package command

import (
	"flag"
	"fmt"
	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/fleetops"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/pipeline"
)

// OpsRole says which operations flags a command takes.
type OpsRole int

const (
	// OpsWorker (run): replicas, JetStream timings, the embedded server's address.
	OpsWorker OpsRole = iota
	// OpsSweeper (sweep): the data directory where a local service leaves its address, how
	// long to wait for JetStream, and the sweeps' retry backoff. Not the settings of the
	// streams and consumers: only a service sets those up (a client never creates or
	// changes them, so one typed without --replicas cannot lower a fleet's).
	OpsSweeper
	// OpsClient (dlq): only the data directory, to find a local service.
	OpsClient
)

// OpsFlags are the settings an operator of a fleet needs. They live apart from run's serviceFlags
// so each command opts in with one line; every flag is also a --config key.
type OpsFlags struct {
	fs             *flag.FlagSet
	role           OpsRole
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
	limits         StreamLimits
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

// StreamLimits are the flags of the streams' and buckets' limits (setup's settings).
type StreamLimits struct {
	JobsMaxAge, EventsMaxAge                                   time.Duration
	JobsMaxBytes, EventsMaxBytes, DLQMaxBytes, RecordsMaxBytes ByteSize
}

// BindStreamLimits declares the limits' flags; note ends their usage.
func BindStreamLimits(fs *flag.FlagSet, l *StreamLimits, note string) {
	l.JobsMaxBytes, l.EventsMaxBytes = fleetops.DefaultJobsMaxBytes, fleetops.DefaultEventsMaxBytes
	l.DLQMaxBytes, l.RecordsMaxBytes = fleetops.DefaultDLQMaxBytes, fleetops.DefaultRecordsMaxBytes
	fs.DurationVar(&l.JobsMaxAge, "jobs-max-age", fleetops.DefaultJobsMaxAge, "a job still queued this long after it was published is removed, unanswered (a sweep enqueues its session again)"+note)
	fs.Var(&l.JobsMaxBytes, "jobs-max-bytes", "the most queued jobs COMPACTOR_JOBS holds, in `BYTES` (512MiB, 1GiB, ...); past it an enqueue is refused, saying so"+note)
	fs.DurationVar(&l.EventsMaxAge, "events-max-age", fleetops.DefaultEventsMaxAge, "how long job results stay in COMPACTOR_EVENTS"+note)
	fs.Var(&l.EventsMaxBytes, "events-max-bytes", "the most COMPACTOR_EVENTS holds, in `BYTES` (512MiB, 1GiB, ...); past it the oldest results go"+note)
	fs.Var(&l.DLQMaxBytes, "dlq-max-bytes", "the most COMPACTOR_DLQ holds, in `BYTES`; past it the oldest dead letters go"+note)
	fs.Var(&l.RecordsMaxBytes, "records-max-bytes", "the most each bucket (leases, sweep records, attempt counts, prepared summaries, workers, spend counts) holds, in `BYTES`; past it a new key is refused"+note)
}

// Apply copies the limits into a setup configuration.
func (l StreamLimits) Apply(sc *fleetops.SetupConfig) {
	sc.JobsMaxAge, sc.JobsMaxBytes, sc.EventsMaxAge, sc.EventsMaxBytes = l.JobsMaxAge, int64(l.JobsMaxBytes), l.EventsMaxAge, int64(l.EventsMaxBytes)
	sc.DLQMaxBytes, sc.RecordsMaxBytes = int64(l.DLQMaxBytes), int64(l.RecordsMaxBytes)
}

// ByteSize is a flag of a size in bytes: a number, or one with a unit (KiB, MiB, GiB, TiB,
// or kB, MB, GB, TB).
type ByteSize int64

func (b *ByteSize) String() string {
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

func (b *ByteSize) Set(s string) error {
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
	*b = ByteSize(n * unit)
	return nil
}

func BindOpsFlags(fs *flag.FlagSet, env *Env, role OpsRole) *OpsFlags {
	o := &OpsFlags{fs: fs, role: role}
	if role == OpsClient || role == OpsSweeper {
		fs.StringVar(&o.dataDir, "data-dir", access.DefaultDataDir(env.Getenv),
			"without --nats-url: the data directory of a compactor run on this machine, whose NATS address it records (env COMPACTOR_DATA_DIR)")
	}
	if role == OpsClient {
		return o
	}
	if role == OpsWorker {
		const setupOnly = " (a setting of the fleet: applied by the embedded server's service and --setup, as by compactor setup; a worker without them follows the fleet's)"
		fs.IntVar(&o.replicas, "replicas", 1, "replicas of every stream and bucket on a clustered NATS (1-5); never lowers what the server already has"+setupOnly)
		fs.DurationVar(&o.ackWait, "ack-wait", fleetops.DefaultAckWait, "a job neither answered nor heartbeated for this long is redelivered"+setupOnly)
		fs.IntVar(&o.maxDeliver, "max-deliver", fleetops.DefaultMaxDeliver, "handler attempts of a job (crashes included) before it is dead-lettered"+setupOnly)
		fs.DurationVar(&o.leaseTTL, "lease-ttl", fleetops.DefaultLeaseTTL, "lifetime of a session's lease, renewed at a third of it; also how long a NATS outage a running job survives"+setupOnly)
		fs.DurationVar(&o.dupWindow, "duplicate-window", fleetops.DefaultDuplicateWindow, "the same enqueue request within this window is stored once"+setupOnly)
		BindStreamLimits(fs, &o.limits, setupOnly)
	}
	fs.DurationVar(&o.startupTimeout, "startup-timeout", pipeline.DefaultStartupTimeout, "how long to retry at start while JetStream is not ready (a cluster electing leaders)")
	fs.DurationVar(&o.retryBase, "sweep-retry-base", pipeline.DefaultSweepRetryBase, "a session whose job failed or met a busy session (a turn in progress) is enqueued again by a sweep this long after, even unchanged; doubled per further miss")
	fs.DurationVar(&o.retryMax, "sweep-retry-max", pipeline.DefaultSweepRetryMax, "the longest wait of --sweep-retry-base's doubling")
	if role == OpsWorker {
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

// Config completes the configuration that run's serviceFlags.parse returned (it is called
// with parse's results, so a command opts in with one line).
func (o *OpsFlags) Config(cfg pipeline.Config, err error) (pipeline.Config, error) {
	if err != nil {
		return cfg, err
	}
	switch o.role {
	case OpsWorker:
		cfg.Replicas, cfg.AckWait, cfg.MaxDeliver, cfg.LeaseTTL = o.replicas, o.ackWait, o.maxDeliver, o.leaseTTL
		cfg.DuplicateWindow = o.dupWindow
		cfg.JobsMaxAge, cfg.JobsMaxBytes, cfg.EventsMaxAge, cfg.EventsMaxBytes = o.limits.JobsMaxAge, int64(o.limits.JobsMaxBytes), o.limits.EventsMaxAge, int64(o.limits.EventsMaxBytes)
		cfg.DLQMaxBytes, cfg.RecordsMaxBytes = int64(o.limits.DLQMaxBytes), int64(o.limits.RecordsMaxBytes)
		fallthrough
	case OpsSweeper:
		cfg.StartupTimeout, cfg.SweepRetryBase, cfg.SweepRetryMax = o.startupTimeout, o.retryBase, o.retryMax
		cfg.Client = o.role == OpsSweeper
	}
	if o.monitor != "" && cfg.NATS.URL != "" {
		return cfg, Usagef("--nats-monitor: a setting of the embedded server, not with --nats-url (an external server's is its own: http in its configuration)")
	}
	if o.sync.set {
		if cfg.NATS.URL != "" {
			return cfg, Usagef("--nats-sync: a setting of the embedded server, not with --nats-url (an external server's is its own: sync_interval in its jetstream block)")
		}
		cfg.EmbeddedSync, cfg.EmbeddedSyncAlways = o.sync.every, o.sync.always
	}
	switch {
	case o.role == OpsWorker && cfg.NATS.URL == "":
		host, port, err := access.ParseListen(o.listen)
		if err != nil {
			return cfg, Usagef("--listen: %v", err)
		}
		cfg.EmbeddedHost, cfg.EmbeddedPort = host, port
		if o.monitor != "" {
			mh, mp, err := access.ParseListen(o.monitor)
			if err != nil {
				return cfg, Usagef("--nats-monitor: %v", err)
			}
			if !IsLoopback(mh) {
				return cfg, Usagef("--nats-monitor %s: want a loopback address (the monitoring port has no authentication: an exporter beside it serves other hosts)", o.monitor)
			}
			cfg.EmbeddedMonitorHost, cfg.EmbeddedMonitorPort = mh, mp
		}
		// run --once next to a running service on the same data directory works through it.
		if f := o.fs.Lookup("once"); f != nil && f.Value.String() == "true" {
			cfg.JoinRunning = true
		}
	case o.role != OpsWorker && cfg.NATS.URL == "":
		cfg.NATS = access.LocalNATS(o.dataDir, cfg.NATS)
	}
	return cfg, nil
}

// ClientNATS returns the NATS settings of a client command: the flags, and without
// --nats-url the local service's address and generated token.
func (o *OpsFlags) ClientNATS(n access.NATSConfig) access.NATSConfig {
	return access.LocalNATS(o.dataDir, n)
}

// OperatorAccount is the NATS settings of the operator of store's account: with
// credentials (compactor auth --credentials DIR), the operator's seed of the account of
// fleet.json that holds store (store may be "" when it lists one account only); without,
// the NATS flags as given. what names what the command acts on, for the error that asks
// for --store. Each account's records are its own (its dead letters' sequences, its
// pause records, its events): a command acts in one account at a time.
func (o *OpsFlags) OperatorAccount(n access.NATSConfig, credentials, command, store, what string) (access.NATSConfig, error) {
	ncfg := o.ClientNATS(n)
	ncfg.Name, ncfg.Role = "compactor "+command, access.RoleOperator
	if credentials == "" {
		return ncfg, nil
	}
	var only []string
	if store != "" {
		only = []string{store}
	}
	accounts, err := FleetAccounts(credentials, access.RoleOperator, only, ncfg)
	if err != nil {
		return ncfg, err
	}
	if len(accounts) != 1 {
		return ncfg, Usagef("--credentials holds %d accounts: give --store, the store whose account's %s to act on", len(accounts), what)
	}
	a := accounts[0].NATS
	a.Name = ncfg.Name
	return a, nil
}

// OperatorAccounts are the accounts an operator's command reads across: with credentials,
// every account of fleet.json (those holding one of stores, when given), each with its
// operator's seed; without, the one account the NATS flags reach (Account "").
func (o *OpsFlags) OperatorAccounts(n access.NATSConfig, credentials, command string, stores []string) ([]FleetAccount, error) {
	ncfg := o.ClientNATS(n)
	ncfg.Name, ncfg.Role = "compactor "+command, access.RoleOperator
	if credentials == "" {
		return []FleetAccount{{Stores: stores, NATS: ncfg}}, nil
	}
	accounts, err := FleetAccounts(credentials, access.RoleOperator, stores, ncfg)
	if err != nil {
		return nil, err
	}
	for i := range accounts {
		accounts[i].NATS.Name = ncfg.Name
	}
	return accounts, nil
}

// IsLoopback reports whether host is localhost or a loopback address.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// DataDir is --data-dir: where a local service writes its NATS address and tokens.
func (o *OpsFlags) DataDir() string { return o.dataDir }
