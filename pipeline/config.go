package pipeline

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go"
)

// Defaults. Every zero field of Config takes the value here (see Config.withDefaults).
const (
	DefaultStoreName       = "default"
	DefaultEmbeddedHost    = "127.0.0.1"
	DefaultEmbeddedPort    = 4222
	DefaultConcurrency     = 4
	DefaultIdle            = 10 * time.Minute
	DefaultAckWait         = 60 * time.Second
	DefaultMaxDeliver      = 5
	DefaultLeaseTTL        = 90 * time.Second
	DefaultLeaseBusyDelay  = 5 * time.Second
	DefaultBackoffBase     = 5 * time.Second
	DefaultBackoffMax      = 10 * time.Minute
	DefaultDuplicateWindow = 2 * time.Minute
	DefaultShutdownTimeout = 30 * time.Second
	DefaultStartupTimeout  = time.Minute
	DefaultEventsMaxAge    = 24 * time.Hour
	DefaultEventsMaxBytes  = 256 << 20
	DefaultJobsMaxAge      = 7 * 24 * time.Hour
	DefaultJobsMaxBytes    = 256 << 20
	DefaultDLQMaxAge       = 30 * 24 * time.Hour
	DefaultDLQMaxBytes     = 256 << 20
	// DefaultRecordsMaxBytes is each bucket's limit (the fleet's settings' excepted: 1 MiB).
	DefaultRecordsMaxBytes = 128 << 20
	DefaultSweepRetryBase  = time.Hour
	DefaultSweepRetryMax   = 24 * time.Hour
)

// Store is a named session directory. Jobs name the store and a path relative to Dir.
type Store struct {
	Name string
	Dir  string
}

// NATSConfig says how to reach NATS. An empty URL means: start an embedded server.
// Secrets here are never logged (see String).
type NATSConfig struct {
	URL      string
	User     string
	Password string
	Token    string
	// PasswordFile and TokenFile hold the password or the token (the file's content,
	// trimmed), so that no secret needs the command line, which every user sees.
	PasswordFile string
	TokenFile    string
	NKeySeedFile string
	CredsFile    string
	TLSCA        string
	TLSCert      string
	TLSKey       string
	// Name is the client connection name shown by the server.
	Name string
	// Role and Stores are what this process acts as (docs/security.md): they give the
	// default InboxPrefix and say, when the server refuses something, what was refused to
	// whom and who may do it.
	Role   Role
	Stores []string
	// InboxPrefix is where replies come (default: InboxPrefix(Role, Stores) when Role is
	// set, else the client library's _INBOX).
	InboxPrefix string
	// local is where LocalNATS looked for a running service ("" when it did not look):
	// a refusal then names that directory and how to point elsewhere.
	local *localLookup
}

// localLookup is what LocalNATS found in a data directory.
type localLookup struct {
	dir     string
	service bool // a running service's file was there
	token   bool // its token file was there (and readable)
}

// inbox is the inbox prefix the connection uses ("" for the library's default).
func (c NATSConfig) inbox() string {
	switch {
	case c.InboxPrefix != "":
		return c.InboxPrefix
	case c.Role != "":
		return InboxPrefix(c.Role, c.Stores)
	}
	return ""
}

// String describes the config without secrets.
func (c NATSConfig) String() string {
	var auth []string
	if c.User != "" {
		auth = append(auth, "user")
	}
	if c.Token != "" || c.TokenFile != "" {
		auth = append(auth, "token")
	}
	if c.NKeySeedFile != "" {
		auth = append(auth, "nkey")
	}
	if c.CredsFile != "" {
		auth = append(auth, "creds")
	}
	if c.TLSCA != "" || c.TLSCert != "" {
		auth = append(auth, "tls")
	}
	if len(auth) == 0 {
		auth = append(auth, "none")
	}
	url := c.URL
	if url == "" {
		url = "(embedded)"
	}
	if len(auth) == 0 {
		return url
	}
	return fmt.Sprintf("%s auth=%s", url, strings.Join(auth, ","))
}

// validate checks the connection settings; prefix is the field's name in errors.
func (c NATSConfig) validate(prefix string) error {
	n := 0
	for _, set := range []bool{c.User != "" || c.Password != "" || c.PasswordFile != "", c.Token != "" || c.TokenFile != "", c.NKeySeedFile != "", c.CredsFile != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		return configError(prefix, "choose one of user/password, token, nkey seed file, creds file")
	}
	if (c.Password != "" || c.PasswordFile != "") && c.User == "" {
		return configError(prefix+".User", "a password needs a user")
	}
	if c.Password != "" && c.PasswordFile != "" {
		return configError(prefix+".PasswordFile", "give the password or its file, not both")
	}
	if c.Token != "" && c.TokenFile != "" {
		return configError(prefix+".TokenFile", "give the token or its file, not both")
	}
	if c.InboxPrefix != "" {
		if err := validInboxPrefix(c.InboxPrefix); err != nil {
			return configError(prefix+".InboxPrefix", "%w", err)
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return configError(prefix+".TLSCert/TLSKey", "give both or neither")
	}
	for field, f := range map[string]string{"PasswordFile": c.PasswordFile, "TokenFile": c.TokenFile, "NKeySeedFile": c.NKeySeedFile, "CredsFile": c.CredsFile, "TLSCA": c.TLSCA, "TLSCert": c.TLSCert, "TLSKey": c.TLSKey} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return configError(prefix+"."+field, "%w", err)
		}
	}
	return nil
}

// Options turns the config into nats.Options.
func (c NATSConfig) Options() ([]nats.Option, error) {
	opts := []nats.Option{nats.MaxReconnects(-1), nats.RetryOnFailedConnect(false)}
	if c.Name != "" {
		opts = append(opts, nats.Name(c.Name))
	}
	if p := c.inbox(); p != "" {
		opts = append(opts, nats.CustomInboxPrefix(p))
	}
	switch {
	case c.User != "":
		pass, err := secret(c.Password, c.PasswordFile, "password")
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserInfo(c.User, pass))
	case c.Token != "" || c.TokenFile != "":
		token, err := secret(c.Token, c.TokenFile, "token")
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Token(token))
	case c.NKeySeedFile != "":
		o, err := nats.NkeyOptionFromSeed(c.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nats: nkey seed %s: %w", c.NKeySeedFile, err)
		}
		opts = append(opts, o)
	case c.CredsFile != "":
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	}
	if c.TLSCA != "" || c.TLSCert != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.TLSCA != "" {
			pem, err := os.ReadFile(c.TLSCA)
			if err != nil {
				return nil, fmt.Errorf("nats: TLS CA: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("nats: TLS CA %s: no certificate found", c.TLSCA)
			}
			tc.RootCAs = pool
		}
		if c.TLSCert != "" {
			cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
			if err != nil {
				return nil, fmt.Errorf("nats: TLS client certificate: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, nats.Secure(tc))
	}
	return opts, nil
}

// Connect dials NATS with the config (URL must be set) and the extra options.
func (c NATSConfig) Connect(extra ...nats.Option) (*nats.Conn, error) {
	if c.URL == "" {
		return nil, errors.New("nats: no URL configured")
	}
	opts, err := c.Options()
	if err != nil {
		return nil, err
	}
	ref := newRefusals(c.Role, c.Stores)
	opts = append(opts, nats.ErrorHandler(ref.handle), nats.ClosedHandler(func(nc *nats.Conn) { refusalsOf.Delete(nc) }))
	nc, err := nats.Connect(c.URL, append(opts, extra...)...)
	if err != nil {
		hint := ""
		switch {
		case errors.Is(err, nats.ErrNoServers):
			hint = " (no NATS server answers there: start `compactor run`, which embeds one, or give --nats-url)"
		case errors.Is(err, nats.ErrAuthorization) && c.local != nil:
			hint = c.local.authHint()
		case errors.Is(err, nats.ErrAuthorization):
			hint = " (give the server's credentials: --nats-token-file, --nats-user with --nats-password-file, --nkey or --creds, or COMPACTOR_NATS_TOKEN, COMPACTOR_NATS_USER, COMPACTOR_NATS_PASSWORD...; a local service's own token is read from its data directory)"
		}
		return nil, fmt.Errorf("nats: connect %s: %w%s", c.URL, err, hint)
	}
	refusalsOf.Store(nc, ref)
	return nc, nil
}

// authHint explains a refusal of a client that looked for a local service in a data
// directory: where it looked, what it found, and how to point it elsewhere.
func (l *localLookup) authHint() string {
	var found string
	switch {
	case !l.service && !l.token:
		found = "found no compactor service there (no " + serviceFileName + ", no " + tokenFileName + ")"
	case !l.token:
		found = "found a service's address there but no readable " + tokenFileName
	default:
		found = "used the token there, which this server does not take (the service there is not the one at this address)"
	}
	return fmt.Sprintf(" (this client looked for the local service's address and token in the data directory %s and %s: a service started with another --data-dir keeps them in that directory; give the same --data-dir, or set COMPACTOR_DATA_DIR, or give --nats-url with the server's credentials)", l.dir, found)
}

// authMode names the client authentication configured ("none", "token", "user", ...),
// never the secret.
func (c NATSConfig) authMode() string {
	switch {
	case c.User != "":
		return "user"
	case c.Token != "" || c.TokenFile != "":
		return "token"
	case c.NKeySeedFile != "":
		return "nkey"
	case c.CredsFile != "":
		return "creds"
	}
	return "none"
}

// secret is value, or the trimmed content of file.
func secret(value, file, what string) (string, error) {
	if file == "" {
		return value, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("nats: %s file: %w", what, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("nats: %s file %s is empty", what, file)
	}
	return s, nil
}

// validInboxPrefix checks a reply-inbox prefix as the client library does.
func validInboxPrefix(p string) error {
	if strings.ContainsAny(p, "*> \t\r\n") || strings.HasPrefix(p, ".") || strings.HasSuffix(p, ".") || strings.Contains(p, "..") {
		return fmt.Errorf("inbox prefix %q: a subject without wildcards, spaces or empty tokens", p)
	}
	return nil
}

// ParseListen parses --listen HOST:PORT for the embedded server. Port 0 picks a free port
// (it is logged, and written to the data directory for clients on this machine).
func ParseListen(s string) (host string, port int, err error) {
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("listen %q: want HOST:PORT: %w", s, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 0 || n > 65535 {
		return "", 0, fmt.Errorf("listen %q: port %q is not 0..65535", s, p)
	}
	if h == "" {
		h = "0.0.0.0"
	}
	if n == 0 {
		n = -1 // nats-server's "random port"
	}
	return h, n, nil
}

// Config is the whole configuration of a Service, in one place. Zero values take the
// Default* constants; Validate names the first bad field.
type Config struct {
	Stores []Store
	NATS   NATSConfig

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
	// (streams.go). Defaults 7 days and 256 MiB, 24 hours and 256 MiB, 256 MiB, 128 MiB.
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
	SpendLimits []SpendLimit

	// JobVersions are the job schema versions this worker works (default: JobVersion and
	// BaseJobVersion, the versions this package writes). A
	// job of another version is handed back for a worker that understands it, never
	// dead-lettered (versions.go). Beats in COMPACTOR_WORKERS list them.
	JobVersions []int
	// Version is the version of the program this worker runs, reported in its beats
	// (compactor status shows a fleet's versions). Empty: not reported.
	Version string

	Handler  Handler  // required for Run and RunOnce
	Assessor Assessor // required for sweeps and the after-job re-check; nil disables both
	// Bridger answers the extension's bridge requests (bridge.go); nil: not answered, and
	// the extension uses its preparations as they are.
	Bridger Bridger
	Logger  *slog.Logger
	// Progress follows RunOnce's sweep (nil: not followed).
	Progress SweepProgress
}

func (c Config) withDefaults() Config {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.EmbeddedHost == "" {
		c.EmbeddedHost = DefaultEmbeddedHost
	}
	if c.EmbeddedPort == 0 {
		c.EmbeddedPort = DefaultEmbeddedPort
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	set(&c.Idle, DefaultIdle)
	set(&c.AckWait, DefaultAckWait)
	if c.MaxDeliver == 0 {
		c.MaxDeliver = DefaultMaxDeliver
	}
	set(&c.LeaseTTL, DefaultLeaseTTL)
	set(&c.LeaseBusyDelay, DefaultLeaseBusyDelay)
	set(&c.BackoffBase, DefaultBackoffBase)
	set(&c.BackoffMax, DefaultBackoffMax)
	set(&c.DuplicateWindow, DefaultDuplicateWindow)
	set(&c.ShutdownTimeout, DefaultShutdownTimeout)
	set(&c.PreparedTTL, DefaultPreparedTTL)
	set(&c.JobsMaxAge, DefaultJobsMaxAge)
	set(&c.EventsMaxAge, DefaultEventsMaxAge)
	if c.JobsMaxBytes == 0 {
		c.JobsMaxBytes = DefaultJobsMaxBytes
	}
	if c.EventsMaxBytes == 0 {
		c.EventsMaxBytes = DefaultEventsMaxBytes
	}
	if c.DLQMaxBytes == 0 {
		c.DLQMaxBytes = DefaultDLQMaxBytes
	}
	if c.RecordsMaxBytes == 0 {
		c.RecordsMaxBytes = DefaultRecordsMaxBytes
	}
	set(&c.StartupTimeout, DefaultStartupTimeout)
	set(&c.SweepRetryBase, DefaultSweepRetryBase)
	set(&c.SweepRetryMax, DefaultSweepRetryMax)
	if c.Replicas == 0 {
		c.Replicas = 1
	}
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
	if len(c.Stores) == 0 {
		return configError("Stores", "at least one store is needed")
	}
	seen := map[string]bool{}
	for i, s := range c.Stores {
		if err := wire.ValidateStoreName(s.Name); err != nil {
			return configError(fmt.Sprintf("Stores[%d].Name", i), "%w", err)
		}
		if seen[s.Name] {
			return configError(fmt.Sprintf("Stores[%d].Name", i), "store %q given twice", s.Name)
		}
		seen[s.Name] = true
		if s.Dir == "" {
			return configError(fmt.Sprintf("Stores[%d].Dir", i), "empty")
		}
		fi, err := os.Stat(s.Dir)
		if err != nil {
			return configError(fmt.Sprintf("Stores[%d].Dir", i), "%w", err)
		}
		if !fi.IsDir() {
			return configError(fmt.Sprintf("Stores[%d].Dir", i), "%s is not a directory", s.Dir)
		}
	}
	if err := c.NATS.validate("NATS"); err != nil {
		return err
	}
	if c.NATS.URL == "" {
		if c.DataDir == "" {
			return configError("DataDir", "needed for the embedded NATS server (or set NATS.URL)")
		}
		n := c.NATS
		if n.NKeySeedFile != "" || n.CredsFile != "" || n.TLSCert != "" {
			return configError("NATS", "the embedded server supports token or user/password auth only; nkey and creds need an external NATS (set NATS.URL)")
		}
		if n.User != "" && n.Password == "" && n.PasswordFile == "" {
			return configError("NATS.Password", "the embedded server's user needs a password")
		}
		if (c.ServeTLSCert == "") != (c.ServeTLSKey == "") {
			return configError("ServeTLSCert/ServeTLSKey", "give both or neither")
		}
		for field, f := range map[string]string{"ServeTLSCert": c.ServeTLSCert, "ServeTLSKey": c.ServeTLSKey} {
			if _, err := os.Stat(f); f != "" && err != nil {
				return configError(field, "%w", err)
			}
		}
		if n.TLSCA != "" && c.ServeTLSCert == "" {
			return configError("NATS.TLSCA", "the embedded server speaks TLS only with its own certificate (ServeTLSCert)")
		}
		if c.InsecureLocal && (n.Token != "" || n.TokenFile != "" || n.User != "") {
			return configError("InsecureLocal", "an embedded server with a token or a user is not insecure: give one or the other")
		}
		if !loopback(c.EmbeddedHost) {
			if c.InsecureLocal {
				return configError("InsecureLocal", "the embedded server would take any connection, and it listens on %s, beyond this machine: anyone who reaches it could read and steer this service's sessions; listen on 127.0.0.1, or require a token", c.EmbeddedHost)
			}
			if c.ServeTLSCert == "" && !c.InsecureCleartextAuth {
				return configError("EmbeddedHost", "the embedded server listens on %s, beyond this machine, without TLS: its token or password would cross the network in clear text; give it a certificate (ServeTLSCert), listen on 127.0.0.1, or allow it explicitly (InsecureCleartextAuth)", c.EmbeddedHost)
			}
		}
	} else if c.ServeTLSCert != "" || c.InsecureLocal || c.InsecureCleartextAuth {
		return configError("ServeTLSCert/InsecureLocal", "settings of the embedded server: not with NATS.URL")
	} else if c.EmbeddedSync != 0 || c.EmbeddedSyncAlways {
		return configError("EmbeddedSync", "a setting of the embedded server: not with NATS.URL (an external server's is its own: sync_interval in its jetstream block)")
	}
	if c.EmbeddedSync < 0 {
		return configError("EmbeddedSync", "%s is negative", c.EmbeddedSync)
	}
	for i, st := range c.SharedStores {
		if err := wire.ValidateStoreName(st); err != nil {
			return configError(fmt.Sprintf("SharedStores[%d]", i), "%w", err)
		}
	}
	if c.EmbeddedPort < -1 || c.EmbeddedPort > 65535 {
		return configError("EmbeddedPort", "%d out of range", c.EmbeddedPort)
	}
	if c.Concurrency < 1 {
		return configError("Concurrency", "%d, need at least 1", c.Concurrency)
	}
	if c.SweepEvery < 0 {
		return configError("SweepEvery", "%s is negative", c.SweepEvery)
	}
	if c.AckWait < 100*time.Millisecond {
		return configError("AckWait", "%s is too short (min 100ms)", c.AckWait)
	}
	if c.MaxDeliver < 1 {
		return configError("MaxDeliver", "%d, need at least 1", c.MaxDeliver)
	}
	if c.LeaseTTL < time.Second {
		return configError("LeaseTTL", "%s is too short (min 1s, the KV bucket's TTL resolution)", c.LeaseTTL)
	}
	if c.LeaseBusyDelay < 0 || c.BackoffBase < 0 || c.BackoffMax < c.BackoffBase {
		return configError("BackoffBase/BackoffMax/LeaseBusyDelay", "need 0 ≤ base ≤ max (got %s, %s, %s)", c.BackoffBase, c.BackoffMax, c.LeaseBusyDelay)
	}
	if c.SweepRetryBase < 0 || c.SweepRetryMax < c.SweepRetryBase {
		return configError("SweepRetryBase/SweepRetryMax", "need 0 ≤ base ≤ max (got %s, %s)", c.SweepRetryBase, c.SweepRetryMax)
	}
	if c.DuplicateWindow < time.Second {
		return configError("DuplicateWindow", "%s is too short", c.DuplicateWindow)
	}
	if err := c.setupConfig().validLimits(); err != nil {
		return err
	}
	if c.StartupTimeout < 0 {
		return configError("StartupTimeout", "%s is negative", c.StartupTimeout)
	}
	if c.ShutdownTimeout < 0 {
		return configError("ShutdownTimeout", "%s is negative", c.ShutdownTimeout)
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		return configError("Replicas", "%d, need 1..5", c.Replicas)
	}
	if err := validSpendLimits(c.SpendLimits, c.Stores); err != nil {
		return err
	}
	for _, v := range c.JobVersions {
		if v < 1 {
			return configError("JobVersions", "version %d: versions start at 1", v)
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
func rootOf(s Store) (string, error) {
	abs, err := filepath.Abs(s.Dir)
	if err != nil {
		return "", fmt.Errorf("store %s: %w", s.Name, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("store %s: %w", s.Name, err)
	}
	return real, nil
}

// sweepNow is the sweeps' clock (Config.sweepClock, else the wall clock).
func (c *Config) sweepNow() time.Time {
	if c.sweepClock != nil {
		return c.sweepClock()
	}
	return time.Now()
}

// ConfigError is a Config field that does not validate. Its text is "config: Field: what";
// a command line can name the flag behind Field instead (errors.As finds it).
type ConfigError struct {
	Field string // the field's path in Config, e.g. "Concurrency", "Stores[1].Dir", "NATS.TLSCA"
	Err   error  // what is wrong with it
}

func (e *ConfigError) Error() string { return "config: " + e.Field + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// configError builds a ConfigError; format and args say what is wrong (%w wraps).
func configError(field, format string, args ...any) error {
	return &ConfigError{Field: field, Err: fmt.Errorf(format, args...)}
}
