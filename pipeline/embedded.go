package pipeline

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// startEmbedded starts a nats-server with JetStream on cfg.EmbeddedHost:cfg.EmbeddedPort,
// storing under DataDir/nats. It listens on loopback by default so enqueue on the same
// machine reaches it and nothing else does. With a token or a user and password in
// cfg.NATS, the server requires them: the service's own connection and its clients
// (enqueue, sweep, dlq) then use the same settings. The caller holds DataDir's lock.
func startEmbedded(cfg Config) (*server.Server, error) {
	opts := &server.Options{
		ServerName: "compactor-embedded",
		Host:       cfg.EmbeddedHost,
		Port:       cfg.EmbeddedPort,
		JetStream:  true,
		StoreDir:   filepath.Join(cfg.DataDir, "nats"),
		NoSigs:     true,
		NoLog:      true,
	}
	switch {
	case cfg.NATS.Token != "":
		opts.Authorization = cfg.NATS.Token
	case cfg.NATS.User != "":
		opts.Username, opts.Password = cfg.NATS.User, cfg.NATS.Password
	}
	if cfg.EmbeddedPort > 0 {
		// Fail at once with the reason, rather than after the readiness wait below.
		ln, err := net.Listen("tcp", listenAddr(cfg))
		if err != nil {
			return nil, fmt.Errorf("embedded nats: %w (another NATS or compactor there? choose another address with --listen)", err)
		}
		ln.Close()
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready on %s after 10s (port in use? choose another with --listen)", listenAddr(cfg))
	}
	return ns, nil
}

func listenAddr(cfg Config) string {
	if cfg.EmbeddedPort < 0 {
		return net.JoinHostPort(cfg.EmbeddedHost, "0")
	}
	return net.JoinHostPort(cfg.EmbeddedHost, strconv.Itoa(cfg.EmbeddedPort))
}
