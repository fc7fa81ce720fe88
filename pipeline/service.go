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
	"sync"
	"sync/atomic"
	"time"

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
	m         *metrics
	memoMu    sync.Mutex
	memo      *memo // COMPACTOR_SWEEP in memory, from the first sweep on

	sem     chan struct{}
	flights *flights      // the jobs being worked, for RunOnce and the shutdown
	fleet   fleetView     // what this worker last read of COMPACTOR_WORKERS
	loops   loops         // the fetch loops' state, for /readyz
	probes  []probeResult // Config.ReadyProbes' results, for /readyz
	// draining: the workers are stopping; a job that has not started paying is handed back
	// (ReserveLLM).
	draining atomic.Bool
	drain    atomic.Int64 // the drain limit (Config.ShutdownTimeout; SetDrainTimeout)
	limits   atomic.Pointer[[]SpendLimit]

	mu        sync.Mutex
	recording bool
	rows      []ReportRow
	metrics   net.Addr
	said      map[string]time.Time // warnings said lately (sayEvery)
	held      map[uint64]bool      // job messages handed back for a lasting reason (noteHeld)
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

// Start connects to NATS (starting the embedded server when no URL is configured) and
// creates or updates the streams, buckets and consumers, retrying within StartupTimeout
// while JetStream is not ready. It is idempotent.
func (s *Service) Start(ctx context.Context) error {
	s.startOnce.Do(func() { s.startErr = s.start(ctx) })
	return s.startErr
}

func (s *Service) start(ctx context.Context) error {
	nc := s.cfg.NATS
	if nc.URL == "" {
		url, err := s.embedded()
		if err != nil {
			return err
		}
		nc.URL = url
	}
	if nc.Name == "" {
		nc.Name = "compactor " + s.worker
	}
	conn, err := nc.Connect(s.connEvents()...)
	if err != nil {
		s.Close()
		return err
	}
	s.nc = conn
	s.noteServer(conn)
	s.log.Info("connected to NATS", "url", conn.ConnectedUrlRedacted(), "server", conn.ConnectedServerName(),
		"cluster", conn.ConnectedClusterName(), "auth", nc.authMode())
	js, err := jetstream.New(conn)
	if err != nil {
		s.Close()
		return fmt.Errorf("jetstream: %w", err)
	}
	res, err := ensureUntil(ctx, js, s.cfg, s.log)
	if err != nil {
		s.Close()
		return err
	}
	s.res = res
	s.m.reg.MustRegister(&queueCollector{s: s})
	s.log.Info("compactor pipeline ready", "nats", nc.String(), "server", conn.ConnectedServerName(), "stores", len(s.cfg.Stores),
		"concurrency", s.cfg.Concurrency, "replicas", s.cfg.Replicas, "worker", s.worker)
	return nil
}

// embedded starts the embedded server on the locked data directory and returns its client
// URL. When another process holds the lock and JoinRunning is set, it returns that
// process's URL instead (this Service is then only a client of it).
func (s *Service) embedded() (string, error) {
	dd, err := lockDataDir(s.cfg.DataDir)
	var busy *DataDirBusyError
	if errors.As(err, &busy) && s.cfg.JoinRunning && busy.Info != nil && busy.Info.ClientURL != "" {
		if busy.Info.Auth != "none" && s.cfg.NATS.authMode() == "none" {
			return "", fmt.Errorf("data directory %s belongs to a running compactor (pid %d) whose NATS at %s requires %s authentication: give the same --nats-token or --nats-user/--nats-password (or NATS_TOKEN, NATS_USER and NATS_PASSWORD)",
				busy.Dir, busy.Info.PID, busy.Info.ClientURL, busy.Info.Auth)
		}
		s.log.Info("data directory in use by a running service: working through its NATS as a client",
			"data_dir", busy.Dir, "pid", busy.Info.PID, "url", busy.Info.ClientURL)
		return busy.Info.ClientURL, nil
	}
	if err != nil {
		return "", err
	}
	ns, err := startEmbedded(s.cfg)
	if err != nil {
		dd.release()
		return "", err
	}
	s.ns, s.dd = ns, dd
	auth := "none"
	if s.cfg.NATS.Token != "" || s.cfg.NATS.User != "" {
		auth = s.cfg.NATS.authMode()
	}
	if err := dd.writeInfo(ServiceInfo{PID: os.Getpid(), ClientURL: ns.ClientURL(), Auth: auth, Worker: s.worker, Started: time.Now().UTC()}); err != nil {
		s.log.Warn("service file not written; run --once and clients will not find this server", "err", err)
	}
	s.log.Info("embedded NATS started", "url", ns.ClientURL(), "store_dir", ns.StoreDir(), "auth", auth)
	return ns.ClientURL(), nil
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
		nats.ErrorHandler(func(c *nats.Conn, sub *nats.Subscription, err error) {
			s.log.Warn("NATS error", "err", err)
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
