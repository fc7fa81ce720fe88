package access

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

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
	local *LocalLookup
}

// LocalLookup is what LocalNATS found in a data directory.
type LocalLookup struct {
	dir     string
	service bool // a running service's file was there
	token   bool // its token file was there (and readable)
}

// Inbox is the inbox prefix the connection uses ("" for the library's default).
func (c NATSConfig) Inbox() string {
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

// ValidateAs checks the connection settings; prefix is the field's name in errors.
func (c NATSConfig) ValidateAs(prefix string) error {
	n := 0
	for _, set := range []bool{c.User != "" || c.Password != "" || c.PasswordFile != "", c.Token != "" || c.TokenFile != "", c.NKeySeedFile != "", c.CredsFile != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		return ConfigErrorf(prefix, "choose one of user/password, token, nkey seed file, creds file")
	}
	if (c.Password != "" || c.PasswordFile != "") && c.User == "" {
		return ConfigErrorf(prefix+".User", "a password needs a user")
	}
	if c.Password != "" && c.PasswordFile != "" {
		return ConfigErrorf(prefix+".PasswordFile", "give the password or its file, not both")
	}
	if c.Token != "" && c.TokenFile != "" {
		return ConfigErrorf(prefix+".TokenFile", "give the token or its file, not both")
	}
	if c.InboxPrefix != "" {
		if err := validInboxPrefix(c.InboxPrefix); err != nil {
			return ConfigErrorf(prefix+".InboxPrefix", "%w", err)
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return ConfigErrorf(prefix+".TLSCert/TLSKey", "give both or neither")
	}
	for field, f := range map[string]string{"PasswordFile": c.PasswordFile, "TokenFile": c.TokenFile, "NKeySeedFile": c.NKeySeedFile, "CredsFile": c.CredsFile, "TLSCA": c.TLSCA, "TLSCert": c.TLSCert, "TLSKey": c.TLSKey} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return ConfigErrorf(prefix+"."+field, "%w", err)
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
	if p := c.Inbox(); p != "" {
		opts = append(opts, nats.CustomInboxPrefix(p))
	}
	switch {
	case c.User != "":
		pass, err := Secret(c.Password, c.PasswordFile, "password")
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserInfo(c.User, pass))
	case c.Token != "" || c.TokenFile != "":
		token, err := Secret(c.Token, c.TokenFile, "token")
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
	ref := NewRefusals(c.Role, c.Stores)
	opts = append(opts, nats.ErrorHandler(ref.handle), nats.ClosedHandler(func(nc *nats.Conn) { RefusalsByConn.Delete(nc) }))
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
	RefusalsByConn.Store(nc, ref)
	return nc, nil
}

// authHint explains a refusal of a client that looked for a local service in a data
// directory: where it looked, what it found, and how to point it elsewhere.
func (l *LocalLookup) authHint() string {
	var found string
	switch {
	case !l.service && !l.token:
		found = "found no compactor service there (no " + ServiceFileName + ", no " + TokenFileName + ")"
	case !l.token:
		found = "found a service's address there but no readable " + TokenFileName
	default:
		found = "used the token there, which this server does not take (the service there is not the one at this address)"
	}
	return fmt.Sprintf(" (this client looked for the local service's address and token in the data directory %s and %s: a service started with another --data-dir keeps them in that directory; give the same --data-dir, or set COMPACTOR_DATA_DIR, or give --nats-url with the server's credentials)", l.dir, found)
}

// AuthMode names the client authentication configured ("none", "token", "user", ...),
// never the secret.
func (c NATSConfig) AuthMode() string {
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

// Secret is value, or the trimmed content of file.
func Secret(value, file, what string) (string, error) {
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
