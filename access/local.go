package access

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The embedded NATS server's address (compactor run without a NATS URL), which clients
// on the same host connect to by default.
const (
	DefaultEmbeddedHost = "127.0.0.1"
	DefaultEmbeddedPort = 4222
)

// DefaultClientURL is where clients (enqueue, sweep) look for NATS when none is configured:
// the embedded server of a `compactor run` on this machine.
var DefaultClientURL = fmt.Sprintf("nats://%s:%d", DefaultEmbeddedHost, DefaultEmbeddedPort)

// TokenFileName holds the embedded server's generated token in its data directory.
const TokenFileName = "nats.token"

// LocalToken returns the file of the embedded server's token, generated once (32 random
// bytes, readable by the data directory's owner only) and kept across restarts, so that
// clients on this machine that may read it (enqueue, sweep, dlq, Pi's extension) find it.
func LocalToken(dir string) (string, error) {
	p := filepath.Join(dir, TokenFileName)
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
	if n.AuthMode() == "none" && dataDir != "" {
		abs, err := filepath.Abs(dataDir)
		if err != nil {
			abs = dataDir
		}
		n.local = &LocalLookup{dir: abs, service: info != nil}
		if p := filepath.Join(dataDir, TokenFileName); readable(p) {
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
