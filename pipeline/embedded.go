package pipeline

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// startEmbedded starts a nats-server with JetStream on cfg.EmbeddedHost:cfg.EmbeddedPort,
// storing under DataDir/nats. It listens on loopback by default so enqueue on the same
// machine reaches it and nothing else does.
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
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready on %s:%d after 10s (port in use?)", cfg.EmbeddedHost, cfg.EmbeddedPort)
	}
	return ns, nil
}
