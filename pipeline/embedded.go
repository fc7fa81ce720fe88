package pipeline

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/compactor-dev/compactor/access"
	"github.com/nats-io/nats-server/v2/server"
)

// startEmbedded starts a nats-server with JetStream on cfg.EmbeddedHost:cfg.EmbeddedPort,
// storing under DataDir/nats. It listens on loopback by default so enqueue on the same
// machine reaches it and nothing else does, and requires the token or the user and
// password of auth (the service's own connection and its clients use the same; without
// one given, a token generated into the data directory: see localToken), unless
// cfg.InsecureLocal. With cfg.ServeTLSCert it speaks TLS only. The caller holds DataDir's
// lock.
func startEmbedded(cfg Config, auth access.NATSConfig) (*server.Server, error) {
	opts := &server.Options{
		ServerName: "compactor-embedded",
		Host:       cfg.EmbeddedHost,
		Port:       cfg.EmbeddedPort,
		JetStream:  true,
		StoreDir:   filepath.Join(cfg.DataDir, "nats"),
		NoSigs:     true,
		NoLog:      true,
	}
	opts.SyncInterval, opts.SyncAlways = syncOptions(cfg)
	if cfg.EmbeddedMonitorPort != 0 {
		opts.HTTPHost, opts.HTTPPort = cfg.EmbeddedMonitorHost, cfg.EmbeddedMonitorPort
	}
	switch {
	case auth.Token != "" || auth.TokenFile != "":
		token, err := access.Secret(auth.Token, auth.TokenFile, "token")
		if err != nil {
			return nil, err
		}
		opts.Authorization = token
	case auth.User != "":
		pass, err := access.Secret(auth.Password, auth.PasswordFile, "password")
		if err != nil {
			return nil, err
		}
		opts.Username, opts.Password = auth.User, pass
	}
	if cfg.ServeTLSCert != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: cfg.ServeTLSCert, KeyFile: cfg.ServeTLSKey})
		if err != nil {
			return nil, fmt.Errorf("embedded nats: TLS: %w", err)
		}
		opts.TLSConfig, opts.TLS, opts.TLSTimeout = tc, true, 5
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

// defaultSyncInterval is nats-server's own sync interval (its defaultSyncInterval).
const defaultSyncInterval = 2 * time.Minute

// syncOptions are the embedded server's sync settings (nats-server's sync_interval:
// "always" is the default interval and SyncAlways, as its configuration parser sets it).
func syncOptions(cfg Config) (time.Duration, bool) {
	if cfg.EmbeddedSyncAlways {
		return defaultSyncInterval, true
	}
	return cfg.EmbeddedSync, false
}

// SyncSetting says how the embedded server syncs to disk: "always" or the interval.
func (c Config) SyncSetting() string {
	switch iv, always := syncOptions(c); {
	case always:
		return "always"
	case iv == 0:
		return defaultSyncInterval.String()
	default:
		return iv.String()
	}
}

func listenAddr(cfg Config) string {
	if cfg.EmbeddedPort < 0 {
		return net.JoinHostPort(cfg.EmbeddedHost, "0")
	}
	return net.JoinHostPort(cfg.EmbeddedHost, strconv.Itoa(cfg.EmbeddedPort))
}
