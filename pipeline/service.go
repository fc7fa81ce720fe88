package pipeline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The Service from New to Close: its configuration, the NATS connection (and the embedded
// server on its locked data directory), the JetStream resources Start sets up. What it
// does while running is in run.go; the workers' start and stop in workers.go.

// Service is a compactor worker: it owns a NATS connection (and, without a URL, an embedded
// server on a locked data directory), the JetStream resources, and a bounded pool of job
// handlers.
type Service struct {
	cfg    Config
	log    *slog.Logger
	roots  map[string]string // store name → real root
	worker string

	startOnce sync.Once
	startErr  error
	ns        *server.Server
	dd        *dataDir // the locked data directory of the embedded server
	nc        *nats.Conn
	server    atomic.Pointer[string] // the NATS server last connected to, for disconnect logs
	res       *resources
	lease     atomic.Int64 // the fleet's lease TTL in nanoseconds (leaseTTL)
	ids       map[string]StoreIdentity
	m         *metrics
	memoMu    sync.Mutex
	memo      *memo // COMPACTOR_SWEEP in memory, from the first sweep on

	sem     chan struct{}
	flights *flights      // the jobs being worked, for RunOnce and the shutdown
	fleet   fleetView     // what this worker last read of COMPACTOR_WORKERS
	loops   loops         // the fetch loops' state, for /readyz
	pauses  pauses        // the stores' pause records as last read (pause.go)
	probes  []probeResult // Config.ReadyProbes' results, for /readyz
	// draining: the workers are stopping; a job that has not started paying is handed back
	// (ReserveLLM).
	draining atomic.Bool
	drain    atomic.Int64 // the drain limit (Config.ShutdownTimeout; SetDrainTimeout)
	limits   atomic.Pointer[[]SpendLimit]

	mu        sync.Mutex
	recording bool
	rows      []wire.ReportRow
	metrics   net.Addr
	said      map[string]time.Time // warnings said lately (sayEvery)
	held      map[uint64]string    // job messages handed back for a lasting reason, by sequence: their subjects (noteHeld)
}

// New validates cfg and prepares a Service; nothing is started until Start, Run or RunOnce.
func New(cfg Config) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Service{cfg: cfg, log: cfg.Logger, roots: map[string]string{}, m: newMetrics(), sem: make(chan struct{}, cfg.Concurrency),
		flights: newFlights(), probes: make([]probeResult, len(cfg.ReadyProbes))}
	s.drain.Store(int64(cfg.ShutdownTimeout))
	s.m.setBuildInfo(cfg.Version)
	if err := s.SetSpendLimits(cfg.SpendLimits); err != nil {
		return nil, err
	}
	for _, st := range cfg.Stores {
		root, err := rootOf(st)
		if err != nil {
			return nil, configError("Stores", "%w", err)
		}
		s.roots[st.Name] = root
	}
	host, _ := os.Hostname()
	var b [3]byte
	_, _ = rand.Read(b[:])
	s.worker = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	return s, nil
}

// Config returns the effective configuration (defaults applied).
func (s *Service) Config() Config { return s.cfg }

// SetDrainTimeout changes the drain limit (Config.ShutdownTimeout) of the stops to come (a
// reload of the settings).
func (s *Service) SetDrainTimeout(d time.Duration) {
	if d >= 0 {
		s.drain.Store(int64(d))
	}
}

func (s *Service) drainTimeout() time.Duration { return time.Duration(s.drain.Load()) }

// WorkerID names this worker in leases, events and dead letters.
func (s *Service) WorkerID() string { return s.worker }

// Start connects to NATS (starting the embedded server when no URL is configured), sets up
// the streams, buckets and consumers (Setup: the admin's) or binds and checks them (the
// others), retrying within StartupTimeout while JetStream is not ready, and claims its
// stores (owner.go). It is idempotent.
func (s *Service) Start(ctx context.Context) error {
	s.startOnce.Do(func() { s.startErr = s.start(ctx) })
	return s.startErr
}

func (s *Service) start(ctx context.Context) error {
	nc := s.cfg.NATS
	if nc.URL == "" {
		local, err := s.embedded()
		if err != nil {
			return err
		}
		nc = local
		if s.ns == nil {
			// Joined another service's embedded server (run --once): that service set it
			// up; this one binds, and its own settings change nothing of the other's.
			s.cfg.Setup = false
		}
	}
	if nc.Name == "" {
		nc.Name = "compactor " + s.worker
	}
	nc.Role = RoleWorker
	if s.cfg.Setup {
		nc.Role = RoleAdmin
	}
	for _, st := range s.cfg.Stores {
		nc.Stores = append(nc.Stores, st.Name)
	}
	ids, err := s.identities()
	if err != nil {
		s.Close()
		return err
	}
	s.ids = ids
	conn, err := nc.Connect(s.connEvents()...)
	if err != nil {
		s.Close()
		return err
	}
	s.nc = conn
	RefusalsOf(conn).OnRefusal(func(pe *PermissionError) { s.log.Error(pe.Error(), "subject", pe.Subject, "op", pe.Op) },
		func(err error) { s.log.Warn("NATS error", "err", err) })
	s.noteServer(conn)
	s.log.Info("connected to NATS", "url", conn.ConnectedUrlRedacted(), "server", conn.ConnectedServerName(),
		"cluster", conn.ConnectedClusterName(), "auth", nc.authMode(), "role", string(nc.Role), "inbox", nc.inbox())
	js, err := jetstream.New(conn)
	if err != nil {
		s.Close()
		return fmt.Errorf("jetstream: %w", err)
	}
	res, err := ensureUntil(ctx, js, s.cfg, s.log, func(ctx context.Context, res *resources) error {
		for _, st := range s.cfg.Stores {
			if err := checkOwner(ctx, res.workers, s.ids[st.Name], !s.cfg.Client, func(err error) { s.foreign(st.Name, foreignOwner, err) }); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.Close()
		return err
	}
	s.res = res
	s.follow(res.fleet)
	s.m.reg.MustRegister(&queueCollector{s: s})
	s.log.Info("compactor pipeline ready", "nats", nc.String(), "server", conn.ConnectedServerName(), "stores", len(s.cfg.Stores),
		"concurrency", s.cfg.Concurrency, "replicas", res.fleet.Replicas, "lease_ttl_s", seconds(s.leaseTTL()), "ack_wait_s", seconds(s.cfg.AckWait),
		"max_deliver", s.cfg.MaxDeliver, "worker", s.worker)
	s.logConfinement()
	return nil
}

// follow takes the fleet's settings that a worker must share with the others: the lease
// TTL (the lease bucket's) and MaxDeliver, and the AckWait of its stores' consumer. A
// process's own flag that differs is said and not used: only `compactor setup` changes a
// shared setting. Called at start; again with every beat for the lease TTL.
func (s *Service) follow(f FleetSettings) {
	ttl := time.Duration(f.LeaseTTL)
	if old := time.Duration(s.lease.Swap(int64(ttl))); old == 0 {
		if !s.cfg.Setup && s.cfg.LeaseTTL != ttl {
			s.log.Info("using the fleet's lease TTL, not this process's (only compactor setup changes it)", "fleet", ttl.String(), "process", s.cfg.LeaseTTL.String())
		}
		if !s.cfg.Setup && s.cfg.MaxDeliver != f.MaxDeliver {
			s.log.Info("using the fleet's max deliver, not this process's (only compactor setup changes it)", "fleet", f.MaxDeliver, "process", s.cfg.MaxDeliver)
		}
		s.cfg.MaxDeliver = f.MaxDeliver
		for _, c := range s.res.cons {
			if aw := c.CachedInfo().Config.AckWait; aw > 0 {
				if !s.cfg.Setup && aw != s.cfg.AckWait {
					s.log.Info("using the store's consumer's ack wait, not this process's (only compactor setup changes it)", "consumer", c.CachedInfo().Name, "consumer_ack_wait", aw.String(), "process", s.cfg.AckWait.String())
				}
				s.cfg.AckWait = aw
				break
			}
		}
	} else if old != ttl {
		s.log.Warn("the fleet's lease TTL changed; leases are renewed from the new one", "old", old.String(), "new", ttl.String())
	}
}

// leaseTTL is the lifetime of a session's lease: the fleet's, the lease bucket's own.
func (s *Service) leaseTTL() time.Duration {
	if d := s.lease.Load(); d > 0 {
		return time.Duration(d)
	}
	return s.cfg.LeaseTTL
}

// embedded starts the embedded server on the locked data directory and returns how to
// connect to it: its URL and the credentials it requires (a token generated into the data
// directory unless some were given or InsecureLocal), its certificate as the CA when it
// speaks TLS. When another process holds the lock and JoinRunning is set, it returns that
// process's server instead (this Service is then only a client of it).
func (s *Service) embedded() (NATSConfig, error) {
	nc := s.cfg.NATS
	dd, err := lockDataDir(s.cfg.DataDir)
	var busy *DataDirBusyError
	if errors.As(err, &busy) && s.cfg.JoinRunning && busy.Info != nil && busy.Info.ClientURL != "" {
		joined := LocalNATS(s.cfg.DataDir, nc)
		joined.URL = busy.Info.ClientURL
		if busy.Info.Auth != "none" && joined.authMode() == "none" {
			return nc, fmt.Errorf("data directory %s belongs to a running compactor (pid %d) whose NATS at %s requires %s authentication, and its token file cannot be read: give its credentials (--nats-token-file, or --nats-user with --nats-password-file)",
				busy.Dir, busy.Info.PID, busy.Info.ClientURL, busy.Info.Auth)
		}
		s.log.Info("data directory in use by a running service: working through its NATS as a client",
			"data_dir", busy.Dir, "pid", busy.Info.PID, "url", busy.Info.ClientURL)
		return joined, nil
	}
	if err != nil {
		return nc, err
	}
	info := ServiceInfo{PID: os.Getpid(), Auth: "none", Worker: s.worker, Started: time.Now().UTC()}
	if nc.authMode() == "none" && !s.cfg.InsecureLocal {
		if nc.TokenFile, err = localToken(dd.dir); err != nil {
			dd.release()
			return nc, err
		}
		info.TokenFile = nc.TokenFile
	}
	if nc.authMode() != "none" {
		info.Auth = nc.authMode()
	}
	ns, err := startEmbedded(s.cfg, nc)
	if err != nil {
		dd.release()
		return nc, err
	}
	s.ns, s.dd = ns, dd
	nc.URL = ns.ClientURL()
	if s.cfg.ServeTLSCert != "" {
		info.TLSCert, _ = filepath.Abs(s.cfg.ServeTLSCert)
		if nc.TLSCA == "" {
			nc.TLSCA = info.TLSCert
		}
	}
	info.ClientURL = nc.URL
	if err := dd.writeInfo(info); err != nil {
		s.log.Warn("service file not written; run --once and clients will not find this server", "err", err)
	}
	if s.cfg.InsecureLocal {
		s.log.Warn("embedded NATS takes any connection from this machine (--insecure-local): every local user can read and steer this service's sessions")
	}
	monitor := ""
	if a := ns.MonitorAddr(); a != nil {
		monitor = "http://" + a.String()
	}
	s.log.Info("embedded NATS started", "url", nc.URL, "store_dir", ns.StoreDir(), "auth", info.Auth, "token_file", info.TokenFile, "tls", info.TLSCert != "", "monitor", monitor,
		"sync", s.cfg.SyncSetting())
	return nc, nil
}

// connEvents logs what happens to the connection: an operator must see a worker lose its
// server, and which server it found again.
func (s *Service) connEvents() []nats.Option {
	return []nats.Option{
		nats.DisconnectErrHandler(func(c *nats.Conn, err error) {
			if c.IsClosed() {
				return
			}
			s.log.Warn("NATS disconnected; reconnecting", "server", s.lastServer(), "err", err)
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			s.noteServer(c)
			s.log.Info("NATS reconnected", "url", c.ConnectedUrlRedacted(), "server", c.ConnectedServerName())
		}),
	}
}

func (s *Service) noteServer(c *nats.Conn) {
	v := c.ConnectedServerName() + " " + c.ConnectedUrlRedacted()
	s.server.Store(&v)
}

func (s *Service) lastServer() string {
	if p := s.server.Load(); p != nil {
		return *p
	}
	return ""
}

// Conn is the NATS connection (nil before Start).
func (s *Service) Conn() *nats.Conn { return s.nc }

// ClientURL is the URL clients use to reach the NATS this service is on.
func (s *Service) ClientURL() string {
	if s.ns != nil {
		return s.ns.ClientURL()
	}
	if s.nc != nil {
		return s.nc.ConnectedUrlRedacted()
	}
	return s.cfg.NATS.URL
}

// MetricsAddr is the address the metrics server listens on (nil if not started).
func (s *Service) MetricsAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.metrics
}

// Close drops the NATS connection, stops the embedded server and unlocks the data
// directory. Call it after Run returns.
//
// The sweeps' memo watcher (a subscription, like the connection's own) lives until here:
// the connection is closed first, so that stopping the watcher sends nothing (with NATS
// down, deleting its consumer would wait for the request timeout); the server drops the
// watcher's ephemeral consumer by itself.
func (s *Service) Close() {
	if s.nc != nil {
		s.nc.Close()
	}
	s.closeMemo()
	if s.ns != nil {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
		s.ns = nil
	}
	if s.dd != nil {
		s.dd.release()
		s.dd = nil
	}
}

func (s *Service) healthy() error {
	if s.nc == nil || !s.nc.IsConnected() {
		return errors.New("not connected to NATS")
	}
	return nil
}
