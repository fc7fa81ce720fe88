package pipeline

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// startEmbedded starts a nats-server with JetStream on cfg.EmbeddedHost:cfg.EmbeddedPort,
// storing under DataDir/nats. It listens on loopback by default so enqueue on the same
// machine reaches it and nothing else does, and requires the token or the user and
// password of auth (the service's own connection and its clients use the same; without
// one given, a token generated into the data directory: see localToken), unless
// cfg.InsecureLocal. With cfg.ServeTLSCert it speaks TLS only. The caller holds DataDir's
// lock.
func startEmbedded(cfg Config, auth NATSConfig) (*server.Server, error) {
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
		token, err := secret(auth.Token, auth.TokenFile, "token")
		if err != nil {
			return nil, err
		}
		opts.Authorization = token
	case auth.User != "":
		pass, err := secret(auth.Password, auth.PasswordFile, "password")
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

// tokenFileName holds the embedded server's generated token in its data directory.
const tokenFileName = "nats.token"

// localToken returns the file of the embedded server's token, generated once (32 random
// bytes, readable by the data directory's owner only) and kept across restarts, so that
// clients on this machine that may read it (enqueue, sweep, dlq, Pi's extension) find it.
func localToken(dir string) (string, error) {
	p := filepath.Join(dir, tokenFileName)
	if fi, err := os.Stat(p); err == nil {
		if fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(p, 0o600); err != nil {
				return "", fmt.Errorf("embedded nats: token file %s is readable by others and cannot be made private: %w", p, err)
			}
		}
		return p, nil
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return p, nil
	}
	if err != nil {
		return "", fmt.Errorf("embedded nats: token: %w", err)
	}
	_, werr := f.WriteString(hex.EncodeToString(b[:]) + "\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(p)
		return "", fmt.Errorf("embedded nats: token: %w", werr)
	}
	return p, nil
}

// LocalNATS completes n for a client on this machine without --nats-url: the address of
// the service running on dataDir (written into its service.json; else DefaultClientURL),
// its generated token when n names no credentials and the data directory holds one the
// caller may read, and its certificate as the CA of a TLS server when n names none.
func LocalNATS(dataDir string, n NATSConfig) NATSConfig {
	if n.URL != "" {
		return n
	}
	n.URL = DefaultClientURL
	info := (*ServiceInfo)(nil)
	if dataDir != "" {
		info = RunningService(dataDir)
	}
	if info != nil && info.ClientURL != "" {
		n.URL = info.ClientURL
		if info.TLSCert != "" && n.TLSCA == "" {
			n.TLSCA = info.TLSCert
		}
	}
	if n.authMode() == "none" && dataDir != "" {
		abs, err := filepath.Abs(dataDir)
		if err != nil {
			abs = dataDir
		}
		n.local = &localLookup{dir: abs, service: info != nil}
		if p := filepath.Join(dataDir, tokenFileName); readable(p) {
			n.TokenFile = p
			n.local.token = true
		}
	}
	return n
}

func readable(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	f.Close()
	return true
}
