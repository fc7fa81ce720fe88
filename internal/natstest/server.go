package natstest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// readyWait bounds the wait for a server in this process to accept connections: a guard
// against a server that will never start, not a measure of how fast it starts.
const readyWait = 30 * time.Second

// StartServer runs one nats-server in this process: a free loopback port, JetStream on,
// its store in a temp dir; shut down when the test ends.
func StartServer(t testing.TB) *server.Server {
	t.Helper()
	return StartServerWith(t, &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir()})
}

// StartServerWith runs one nats-server in this process with opts (a configuration file's,
// say: server.ProcessConfigFile), without its signal handlers and its log; shut down when
// the test ends.
func StartServerWith(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	ns, err := serve(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}

// StartServerFrom is StartServer with the settings of the nats-server configuration file
// config (its accounts and users, say: what `compactor auth` prints); the host, port and
// JetStream store are StartServer's whatever the file says, as a cluster node started
// from the same file (StartClusterWith) takes its own.
func StartServerFrom(t testing.TB, config string) *server.Server {
	t.Helper()
	opts, err := server.ProcessConfigFile(config)
	if err != nil {
		t.Fatalf("the server does not take the configuration %s: %v", config, err)
	}
	opts.Host, opts.Port, opts.JetStream, opts.StoreDir = "127.0.0.1", -1, true, t.TempDir()
	return StartServerWith(t, opts)
}

// serve starts a server in this process and waits until it accepts connections.
func serve(opts *server.Options) (*server.Server, error) {
	opts.NoSigs, opts.NoLog = true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, err
	}
	go ns.Start()
	if !ns.ReadyForConnections(readyWait) {
		ns.Shutdown()
		return nil, errors.New(strings.TrimSpace("nats-server "+opts.ServerName) + " not ready")
	}
	return ns, nil
}

// Restartable is a nats-server in this process that a test stops and starts again on the
// same port and store: an outage as its clients see it (they reconnect to the same URL).
type Restartable struct {
	// Opts are what the next Start starts the server with: a test may change them between
	// a Stop and a Start (the server back without JetStream, say).
	Opts server.Options
	t    testing.TB
	ns   *server.Server
}

// StartRestartable runs a server with opts and stops it when the test ends. A Port of -1
// picks a free port below the kernel's ephemeral range (FreePorts: no other process is
// handed it between a stop and a start), kept for restarts.
func StartRestartable(t testing.TB, opts server.Options) *Restartable {
	t.Helper()
	if opts.Port == -1 {
		opts.Port = FreePorts(t, 1)[0]
	}
	r := &Restartable{t: t, Opts: opts}
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

// Start starts the server again (after Stop) on its port and store.
func (r *Restartable) Start() {
	r.t.Helper()
	o := r.Opts
	ns, err := serve(&o)
	if err != nil {
		r.t.Fatal(err)
	}
	r.ns = ns
}

// Stop shuts the server down and waits until it has; a stopped server is left as it is.
func (r *Restartable) Stop() {
	if r.ns != nil {
		r.ns.Shutdown()
		r.ns.WaitForShutdown()
		r.ns = nil
	}
}

// Server is the running server (nil while stopped).
func (r *Restartable) Server() *server.Server { return r.ns }

// URL is the server's client URL, the same across restarts.
func (r *Restartable) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", r.Opts.Port) }
