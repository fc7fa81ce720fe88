// Package pipelinetest runs a real compactor service inside a test, for people who write
// a pipeline.Handler or embed the service: an embedded nats-server with JetStream on a
// random loopback port, its store in a temporary directory, one session store, the
// service's workers, and a client connection to enqueue jobs and wait for their events.
// Nothing is mocked: jobs go through the same streams, consumers, leases and events as in
// production, so a handler tested here behaves the same under `compactor run`.
//
//	srv := pipelinetest.Start(t, pipelinetest.Options{Handler: myHandler})
//	file := filepath.Join(srv.StoreDir, "--proj--", "s.jsonl") // write a session there
//	job, err := srv.JobFor(file)
//	res, err := srv.Enqueue(ctx, job, true, time.Minute) // res.Event is the job's result
package pipelinetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/wire"
)

// Options configure a Server. Zero values are the defaults.
type Options struct {
	// StoreName is the session store's name (default "default").
	StoreName string
	// StoreDir is the store's root (default: a new temporary directory, removed by Close).
	StoreDir string
	// Handler works the jobs. Without one no worker runs: jobs stay queued.
	Handler pipeline.Handler
	// Assessor answers sweeps and the after-job re-check (optional).
	Assessor pipeline.Assessor
	// Idle is the worker's idle check (default: none, -1, as a test writes its sessions
	// just before it enqueues them).
	Idle time.Duration
	// Paused starts the service without its workers; Resume starts them (to queue jobs
	// first, or to change files while they wait).
	Paused bool
	// Configure, if set, changes the rest of the configuration before the service is made
	// (concurrency, backoff, AckWait...). The NATS settings are the embedded server's.
	Configure func(*pipeline.Config)
}

// Server is a running service. Its fields are for reading.
type Server struct {
	Service   *pipeline.Service
	Conn      *nats.Conn // a client connection of the test's own
	StoreName string
	StoreDir  string

	cfg     pipeline.Config
	dataDir string
	tmp     []string
	mu      sync.Mutex
	running bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// Start is New for a test: it fails the test if the service does not start and closes it
// when the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatalf("pipelinetest: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// New starts an embedded NATS server and the service on it, and the workers unless
// opts.Paused or there is no Handler. Close stops everything and removes what New made.
func New(opts Options) (*Server, error) {
	s := &Server{StoreName: opts.StoreName, StoreDir: opts.StoreDir}
	if s.StoreName == "" {
		s.StoreName = pipeline.DefaultStoreName
	}
	if s.StoreDir == "" {
		dir, err := s.tempDir("store")
		if err != nil {
			return nil, err
		}
		s.StoreDir = dir
	}
	data, err := s.tempDir("nats")
	if err != nil {
		s.removeTemp()
		return nil, err
	}
	idle := opts.Idle
	if idle == 0 {
		idle = -1
	}
	cfg := pipeline.Config{Stores: []pipeline.Store{{Name: s.StoreName, Dir: s.StoreDir}}, Idle: idle,
		Handler: opts.Handler, Assessor: opts.Assessor}
	if opts.Configure != nil {
		opts.Configure(&cfg)
	}
	// Always the embedded server, on a random port, with its store here.
	cfg.NATS, cfg.DataDir, cfg.EmbeddedHost, cfg.EmbeddedPort = pipeline.NATSConfig{}, data, "127.0.0.1", -1
	s.cfg, s.dataDir = cfg, data
	if s.Service, err = pipeline.New(cfg); err != nil {
		s.removeTemp()
		return nil, err
	}
	if err := s.Service.Start(context.Background()); err != nil {
		s.Service.Close()
		s.removeTemp()
		return nil, err
	}
	// The embedded server requires the token it generated into its data directory.
	if s.Conn, err = pipeline.LocalNATS(data, pipeline.NATSConfig{Name: "pipelinetest"}).Connect(); err != nil {
		s.Service.Close()
		s.removeTemp()
		return nil, fmt.Errorf("pipelinetest: connect: %w", err)
	}
	if opts.Handler != nil && !opts.Paused {
		s.Resume()
	}
	return s, nil
}

// URL is the embedded server's client URL (for `enqueue --nats-url` or another client).
func (s *Server) URL() string { return s.Service.ClientURL() }

// NATS is how a client reaches the server: its URL and the token it requires (a file in
// its data directory, as `compactor run` generates one).
func (s *Server) NATS() pipeline.NATSConfig {
	return pipeline.LocalNATS(s.dataDir, pipeline.NATSConfig{})
}

// Resume starts the workers (if they are not running); they run until Close.
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running || s.cfg.Handler == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.running, s.cancel, s.done = true, cancel, make(chan struct{})
	go func() {
		defer close(s.done)
		_ = s.Service.Run(ctx)
	}()
}

// Close stops the workers (running jobs get the shutdown timeout), the connections and
// the server, and removes the temporary directories.
func (s *Server) Close() {
	s.mu.Lock()
	if s.running {
		s.cancel()
		<-s.done
		s.running = false
	}
	s.mu.Unlock()
	if s.Conn != nil {
		s.Conn.Close()
	}
	s.Service.Close()
	s.removeTemp()
}

// JobFor is the compact job an on-demand request makes for file as it is now: the store's
// name, the path relative to its root, the session id and the leaf read from the file.
func (s *Server) JobFor(file string) (wire.Job, error) {
	rel, err := pipeline.RelPath(s.StoreDir, file)
	if err != nil {
		return wire.Job{}, err
	}
	sess, err := sessionio.ReadFile(file)
	if err != nil {
		return wire.Job{}, err
	}
	if sess.Header.ID == "" {
		return wire.Job{}, errors.New("pipelinetest: " + file + ": no session id in the header")
	}
	return wire.Job{Kind: wire.KindCompact, Store: s.StoreName, Path: rel, SessionID: sess.Header.ID,
		Reason: "test", ExpectLeafID: sess.LeafID()}, nil
}

// Enqueue publishes job on the server, as `enqueue` does, and with wait waits up to
// timeout for its final event (EnqueueResult.Event).
func (s *Server) Enqueue(ctx context.Context, job wire.Job, wait bool, timeout time.Duration) (pipeline.EnqueueResult, error) {
	return pipeline.Enqueue(ctx, s.Conn, job, wait, timeout)
}

func (s *Server) tempDir(what string) (string, error) {
	dir, err := os.MkdirTemp("", "pipelinetest-"+what+"-")
	if err != nil {
		return "", fmt.Errorf("pipelinetest: %w", err)
	}
	s.tmp = append(s.tmp, dir)
	return dir, nil
}

func (s *Server) removeTemp() {
	for _, d := range s.tmp {
		_ = os.RemoveAll(d)
	}
	s.tmp = nil
}
