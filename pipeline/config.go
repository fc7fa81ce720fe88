package pipeline

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/agents"
	"github.com/compactor-dev/compactor/spend"
	"github.com/compactor-dev/compactor/storepath"
	"github.com/compactor-dev/compactor/sweep"
	"github.com/compactor-dev/compactor/wire"
)

// Defaults. Every zero field of Config takes the value here (see Config.withDefaults).
const (
	DefaultStoreName       = "default"
	DefaultConcurrency     = 8
	DefaultIdle            = 10 * time.Minute
	DefaultLeaseBusyDelay  = 5 * time.Second
	DefaultBackoffBase     = 5 * time.Second
	DefaultBackoffMax      = 10 * time.Minute
	DefaultShutdownTimeout = 30 * time.Second
	DefaultStartupTimeout  = time.Minute
	DefaultSweepRetryBase  = time.Hour
	DefaultSweepRetryMax   = 24 * time.Hour
)

// Store is a named session directory. Jobs name the store and a path relative to Dir.
type Store struct {
	Name string
	Dir  string
}

// Config is the whole configuration of a Service, in one place. Zero values take the
// Default* constants; Validate names the first bad field.
type Config struct {
	Stores []Store
	NATS   access.NATSConfig

	// Embedded server (used when NATS.URL is empty).
	DataDir      string // JetStream file store; required for the embedded server
	EmbeddedHost string // default 127.0.0.1
	EmbeddedPort int    // default 4222; -1 picks a random port (see ParseListen)
	// EmbeddedMonitorHost and EmbeddedMonitorPort, when the port is set (-1: a random
	// one), serve the embedded server's monitoring endpoints (/varz, /jsz, ...).
	EmbeddedMonitorHost string
	EmbeddedMonitorPort int
	// EmbeddedSync is how often the embedded server's JetStream syncs its files to disk
	// (nats-server's sync_interval; 0: its default, 2 minutes); with EmbeddedSyncAlways it
	// syncs every write before acknowledging it. Between two syncs, what the server
	// acknowledged lives in the operating system's cache: a power loss (not a crash of the
	// process) can lose it. Settings of the embedded server only.
	EmbeddedSync       time.Duration
	EmbeddedSyncAlways bool

	Concurrency int           // jobs running at once on this worker
	Idle        time.Duration // sessions modified more recently are active: skipped unless forced. <0 disables
	SweepEvery  time.Duration // periodic sweep in Run; 0 = none
	// SweepRetryBase and SweepRetryMax: a session whose job failed (dead-lettered) or was
	// skipped as busy (a turn in progress, say) is enqueued again by a later sweep, even
	// unchanged, SweepRetryBase after that outcome, doubled for every further such outcome
	// up to SweepRetryMax. Defaults 1h and 24h.
	SweepRetryBase time.Duration
	SweepRetryMax  time.Duration
	// sweepClock is the time the sweeps' backoff is measured in; nil means time.Now. Tests
	// set it to move through a backoff without waiting for it.
	sweepClock func() time.Time
	// spendClock is the time the spend windows are measured in (nil: time.Now), and
	// spendHoldMax, when set, shortens a held job's wait (the rest of its window on that
	// clock). Tests set both to move through windows without waiting for them.
	spendClock   func() time.Time
	spendHoldMax time.Duration
	// sweepMarkerTTL is how long the marker of a removed sweep record is kept (0: the
	// constant sweepMarkerTTL). Tests shorten it.
	sweepMarkerTTL time.Duration
	// versionWaitAlone is how long a job of a version no worker of its store understands
	// waits before its next delivery (0: the constant versionWaitAlone). Tests shorten it.
	versionWaitAlone time.Duration

	AckWait         time.Duration // redelivery if neither acked nor heartbeated for this long
	MaxDeliver      int           // deliveries before a job is dead-lettered
	LeaseTTL        time.Duration // per-session lease lifetime, renewed at LeaseTTL/3
	LeaseBusyDelay  time.Duration // NakWithDelay when the session's lease is held elsewhere
	BackoffBase     time.Duration // retry delay after the first failed delivery, doubled each time
	BackoffMax      time.Duration
	DuplicateWindow time.Duration // JetStream de-duplication window for Nats-Msg-Id
	ShutdownTimeout time.Duration // how long running jobs may finish after Run's ctx ends
	PreparedTTL     time.Duration // how long a prepared summary is kept (COMPACTOR_PREPARED)
	// The limits of the streams and buckets (setup's, docs/security.md "Limits"): a job
	// older than JobsMaxAge is removed unanswered, an enqueue into JobsMaxBytes of queued
	// jobs is refused; the oldest events go past EventsMaxAge or EventsMaxBytes, the
	// oldest dead letters past DLQMaxBytes; each bucket holds RecordsMaxBytes at most (a
	// write beyond it is refused). Every stream's message count is bounded in proportion
	// (fleetops/limits.go). Defaults 7 days and 256 MiB, 24 hours and 256 MiB, 256 MiB, 128 MiB.
	JobsMaxAge      time.Duration
	JobsMaxBytes    int64
	EventsMaxAge    time.Duration
	EventsMaxBytes  int64
	DLQMaxBytes     int64
	RecordsMaxBytes int64
	// Replicas of every stream and bucket on a clustered NATS; default 1. A stream that
	// already has more (set by an operator) keeps them.
	Replicas int
	// StartupTimeout bounds how long Start retries while JetStream is not ready (a cluster
	// electing leaders after a restart).
	StartupTimeout time.Duration
	// JoinRunning: when DataDir is locked by a running service, connect to that service's
	// embedded server as a client (run --once next to a running service) instead of
	// failing. The service writes its client URL into DataDir.
	JoinRunning bool
	// Client: this process only uses what was set up (`compactor sweep`). Start binds the
	// jobs stream and the sweeps' bucket, creates and changes nothing, and fails naming
	// what is missing; the workers cannot run.
	Client bool
	// Setup: this process sets up the streams, buckets and consumers and the fleet's
	// settings (the admin's right: `compactor run --setup`), from Replicas, AckWait,
	// MaxDeliver, LeaseTTL, DuplicateWindow and PreparedTTL. Without it Start binds what
	// `compactor setup` set up and changes nothing; the fleet's lease TTL and max deliver
	// then apply, whatever this process's own. Always on for the embedded server (the
	// service is its admin); off for a `run --once` that joins another's (JoinRunning).
	Setup bool
	// InsecureLocal: the embedded server takes any connection from this machine. Without
	// it (and without NATS.Token or NATS.User), it requires a token generated into
	// DataDir (nats.token, readable by its owner only), which clients on this machine find
	// there.
	InsecureLocal bool
	// InsecureCleartextAuth lets the embedded server listen beyond loopback (EmbeddedHost)
	// without TLS: its token or password then crosses the network in clear text, which
	// anyone on the path reads. Without it such a listener is refused.
	InsecureCleartextAuth bool
	// ServeTLSCert and ServeTLSKey make the embedded server speak TLS only.
	ServeTLSCert, ServeTLSKey string
	// SharedStores are the stores declared shared: one directory served by workers on
	// several hosts (a shared file system). Any other store has one owner: a worker serving
	// its name from another directory refuses to start (owner.go).
	SharedStores []string

	MetricsAddr string // "" = no HTTP server; serves /metrics, /healthz and /readyz
	// HTTPHandler, when set, serves every other path of the MetricsAddr listener (the
	// console, mounted by compactor run).
	HTTPHandler http.Handler
	// MetricsToken, when set, is the bearer token /metrics requires (a central scraper's
	// credentials_file); /healthz and /readyz stay open to probes.
	MetricsToken string
	// ReadyProbes are checked by /readyz besides what the service knows (NATS, the fetch
	// loops, the stores): an LLM endpoint answering, say. Each result is kept a few seconds.
	ReadyProbes []ReadyProbe

	// SpendLimits bound the LLM input tokens per hour and per day, of every store or of
	// one, for the whole fleet (spend.go): over a limit, jobs wait for the window to end.
	// Give every worker the same limits.
	SpendLimits []spend.Limit

	// JobVersions are the job schema versions this worker works (default: JobVersion and
	// BaseJobVersion, the versions this package writes). A
	// job of another version is handed back for a worker that understands it, never
	// dead-lettered (versions.go). Beats in COMPACTOR_WORKERS list them.
	JobVersions []int
	// Version is the version of the program this worker runs, reported in its beats
	// (compactor status shows a fleet's versions). Empty: not reported.
	Version string

	Handler  Handler        // required for Run and RunOnce
	Assessor sweep.Assessor // required for sweeps and the after-job re-check; nil disables both
	// Bridger answers the extension's bridge requests (bridge.go); nil: not answered, and
	// the extension uses its preparations as they are.
	Bridger agents.Bridger
	Logger  *slog.Logger
	// Progress follows RunOnce's sweep (nil: not followed).
	Progress sweep.Progress
}

func (c Config) withDefaults() Config {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.EmbeddedHost == "" {
		c.EmbeddedHost = access.DefaultEmbeddedHost
	}
	if c.EmbeddedPort == 0 {
		c.EmbeddedPort = access.DefaultEmbeddedPort
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	set(&c.Idle, DefaultIdle)
	// What setup sets up takes setup's defaults (fleetops.SetupConfig).
	sc := c.setupConfig().WithDefaults()
	c.Replicas, c.AckWait, c.MaxDeliver, c.LeaseTTL, c.DuplicateWindow, c.PreparedTTL = sc.Replicas, sc.AckWait, sc.MaxDeliver, sc.LeaseTTL, sc.DuplicateWindow, sc.PreparedTTL
	c.JobsMaxAge, c.JobsMaxBytes, c.EventsMaxAge, c.EventsMaxBytes, c.DLQMaxBytes, c.RecordsMaxBytes = sc.JobsMaxAge, sc.JobsMaxBytes, sc.EventsMaxAge, sc.EventsMaxBytes, sc.DLQMaxBytes, sc.RecordsMaxBytes
	set(&c.LeaseBusyDelay, DefaultLeaseBusyDelay)
	set(&c.BackoffBase, DefaultBackoffBase)
	set(&c.BackoffMax, DefaultBackoffMax)
	set(&c.ShutdownTimeout, DefaultShutdownTimeout)
	set(&c.StartupTimeout, DefaultStartupTimeout)
	set(&c.SweepRetryBase, DefaultSweepRetryBase)
	set(&c.SweepRetryMax, DefaultSweepRetryMax)
	if len(c.JobVersions) == 0 {
		c.JobVersions = wire.WrittenVersions()
	}
	if c.NATS.URL == "" && !c.Client {
		c.Setup = true // the embedded server is this service's own
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports the first invalid field, by name. It checks the config as given, after
// defaults are applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	for _, valid := range []func() error{c.validStores, c.validNATS, c.validWork} {
		if err := valid(); err != nil {
			return err
		}
	}
	return nil
}

// validStores checks the stores: named, each once, each a directory.
func (c Config) validStores() error {
	if len(c.Stores) == 0 {
		return access.ConfigErrorf("Stores", "at least one store is needed")
	}
	seen := map[string]bool{}
	for i, s := range c.Stores {
		if err := wire.ValidateStoreName(s.Name); err != nil {
			return access.ConfigErrorf(fmt.Sprintf("Stores[%d].Name", i), "%w", err)
		}
		if seen[s.Name] {
			return access.ConfigErrorf(fmt.Sprintf("Stores[%d].Name", i), "store %q given twice", s.Name)
		}
		seen[s.Name] = true
		if s.Dir == "" {
			return access.ConfigErrorf(fmt.Sprintf("Stores[%d].Dir", i), "empty")
		}
		fi, err := os.Stat(s.Dir)
		if err != nil {
			return access.ConfigErrorf(fmt.Sprintf("Stores[%d].Dir", i), "%w", err)
		}
		if !fi.IsDir() {
			return access.ConfigErrorf(fmt.Sprintf("Stores[%d].Dir", i), "%s is not a directory", s.Dir)
		}
	}
	return nil
}

// validNATS checks how the service reaches NATS: the connection's own settings, then the
// embedded server's (validEmbedded), which an external server does not take.
func (c Config) validNATS() error {
	if err := c.NATS.ValidateAs("NATS"); err != nil {
		return err
	}
	if c.NATS.URL == "" {
		return c.validEmbedded()
	}
	if c.ServeTLSCert != "" || c.InsecureLocal || c.InsecureCleartextAuth {
		return access.ConfigErrorf("ServeTLSCert/InsecureLocal", "settings of the embedded server: not with NATS.URL")
	}
	if c.EmbeddedSync != 0 || c.EmbeddedSyncAlways {
		return access.ConfigErrorf("EmbeddedSync", "a setting of the embedded server: not with NATS.URL (an external server's is its own: sync_interval in its jetstream block)")
	}
	return nil
}

// validEmbedded checks the embedded server's settings: its auth, its TLS, and that it is
// not reachable beyond this machine without both.
func (c Config) validEmbedded() error {
	if c.DataDir == "" {
		return access.ConfigErrorf("DataDir", "needed for the embedded NATS server (or set NATS.URL)")
	}
	n := c.NATS
	if n.NKeySeedFile != "" || n.CredsFile != "" || n.TLSCert != "" {
		return access.ConfigErrorf("NATS", "the embedded server supports token or user/password auth only; nkey and creds need an external NATS (set NATS.URL)")
	}
	if n.User != "" && n.Password == "" && n.PasswordFile == "" {
		return access.ConfigErrorf("NATS.Password", "the embedded server's user needs a password")
	}
	if (c.ServeTLSCert == "") != (c.ServeTLSKey == "") {
		return access.ConfigErrorf("ServeTLSCert/ServeTLSKey", "give both or neither")
	}
	for field, f := range map[string]string{"ServeTLSCert": c.ServeTLSCert, "ServeTLSKey": c.ServeTLSKey} {
		if _, err := os.Stat(f); f != "" && err != nil {
			return access.ConfigErrorf(field, "%w", err)
		}
	}
	if n.TLSCA != "" && c.ServeTLSCert == "" {
		return access.ConfigErrorf("NATS.TLSCA", "the embedded server speaks TLS only with its own certificate (ServeTLSCert)")
	}
	if c.InsecureLocal && (n.Token != "" || n.TokenFile != "" || n.User != "") {
		return access.ConfigErrorf("InsecureLocal", "an embedded server with a token or a user is not insecure: give one or the other")
	}
	if !loopback(c.EmbeddedHost) {
		if c.InsecureLocal {
			return access.ConfigErrorf("InsecureLocal", "the embedded server would take any connection, and it listens on %s, beyond this machine: anyone who reaches it could read and steer this service's sessions; listen on 127.0.0.1, or require a token", c.EmbeddedHost)
		}
		if c.ServeTLSCert == "" && !c.InsecureCleartextAuth {
			return access.ConfigErrorf("EmbeddedHost", "the embedded server listens on %s, beyond this machine, without TLS: its token or password would cross the network in clear text; give it a certificate (ServeTLSCert), listen on 127.0.0.1, or allow it explicitly (InsecureCleartextAuth)", c.EmbeddedHost)
		}
	}
	return nil
}

// validWork checks the settings of the work itself: concurrency, deliveries, leases,
// backoffs, windows, limits, spend limits and job versions.
func (c Config) validWork() error {
	if c.EmbeddedSync < 0 {
		return access.ConfigErrorf("EmbeddedSync", "%s is negative", c.EmbeddedSync)
	}
	for i, st := range c.SharedStores {
		if err := wire.ValidateStoreName(st); err != nil {
			return access.ConfigErrorf(fmt.Sprintf("SharedStores[%d]", i), "%w", err)
		}
	}
	if c.EmbeddedPort < -1 || c.EmbeddedPort > 65535 {
		return access.ConfigErrorf("EmbeddedPort", "%d out of range", c.EmbeddedPort)
	}
	if c.Concurrency < 1 {
		return access.ConfigErrorf("Concurrency", "%d, need at least 1", c.Concurrency)
	}
	if c.SweepEvery < 0 {
		return access.ConfigErrorf("SweepEvery", "%s is negative", c.SweepEvery)
	}
	if c.AckWait < 100*time.Millisecond {
		return access.ConfigErrorf("AckWait", "%s is too short (min 100ms)", c.AckWait)
	}
	if c.MaxDeliver < 1 {
		return access.ConfigErrorf("MaxDeliver", "%d, need at least 1", c.MaxDeliver)
	}
	if c.LeaseTTL < time.Second {
		return access.ConfigErrorf("LeaseTTL", "%s is too short (min 1s, the KV bucket's TTL resolution)", c.LeaseTTL)
	}
	if c.LeaseBusyDelay < 0 || c.BackoffBase < 0 || c.BackoffMax < c.BackoffBase {
		return access.ConfigErrorf("BackoffBase/BackoffMax/LeaseBusyDelay", "need 0 ≤ base ≤ max (got %s, %s, %s)", c.BackoffBase, c.BackoffMax, c.LeaseBusyDelay)
	}
	if c.SweepRetryBase < 0 || c.SweepRetryMax < c.SweepRetryBase {
		return access.ConfigErrorf("SweepRetryBase/SweepRetryMax", "need 0 ≤ base ≤ max (got %s, %s)", c.SweepRetryBase, c.SweepRetryMax)
	}
	if c.DuplicateWindow < time.Second {
		return access.ConfigErrorf("DuplicateWindow", "%s is too short", c.DuplicateWindow)
	}
	if err := c.setupConfig().ValidLimits(); err != nil {
		return err
	}
	if c.StartupTimeout < 0 {
		return access.ConfigErrorf("StartupTimeout", "%s is negative", c.StartupTimeout)
	}
	if c.ShutdownTimeout < 0 {
		return access.ConfigErrorf("ShutdownTimeout", "%s is negative", c.ShutdownTimeout)
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		return access.ConfigErrorf("Replicas", "%d, need 1..5", c.Replicas)
	}
	if err := spend.Validate(c.SpendLimits, storeNames(c.Stores)); err != nil {
		return err
	}
	for _, v := range c.JobVersions {
		if v < 1 {
			return access.ConfigErrorf("JobVersions", "version %d: versions start at 1", v)
		}
	}
	return nil
}

// loopback reports whether host (an embedded server's listening address) is this machine's
// alone: a loopback IP or "localhost". Anything else, "0.0.0.0" and "" included, is
// reachable from elsewhere.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// rootOf resolves a store's directory once (symlinks included), so the check in resolve
// compares real paths with real paths.
func rootOf(s Store) (string, error) { return storepath.Root(s.Name, s.Dir) }

// sweepNow is the sweeps' clock (Config.sweepClock, else the wall clock).
func (c *Config) sweepNow() time.Time {
	if c.sweepClock != nil {
		return c.sweepClock()
	}
	return time.Now()
}
