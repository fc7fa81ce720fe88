package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Who may use the console: a viewer reads every page but a summary's text; an operator
// also reads summaries and acts (retry, purge, pause, resume). Each role has a token: a
// browser gives it once on /login and gets a session cookie (HttpOnly, SameSite=Strict,
// signed with a key of this process); a script sends it as "Authorization: Bearer". Every
// action is a POST that carries the session's CSRF token (a form field or the
// X-CSRF-Token header) and comes from this origin (Origin or Sec-Fetch-Site).

// Role is a console user's role.
type Role string

// The roles.
const (
	RoleNone     Role = ""
	RoleViewer   Role = "viewer"
	RoleOperator Role = "operator"
)

// Tokens are the roles' tokens. An empty token lets no one in as that role.
type Tokens struct {
	Viewer, Operator string
}

// Token files in a directory (the data directory of the embedded setup, or the one given
// to compactor console).
const (
	ViewerTokenFile   = "console-viewer.token"
	OperatorTokenFile = "console-operator.token"
)

// LoadTokens reads the roles' tokens from dir, generating each one that is missing
// (32 random bytes, hex, in a file of mode 0600). It returns the files' paths.
func LoadTokens(dir string) (Tokens, []string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Tokens{}, nil, fmt.Errorf("console tokens: %w", err)
	}
	var t Tokens
	var files []string
	for _, f := range []struct {
		name string
		dst  *string
	}{{ViewerTokenFile, &t.Viewer}, {OperatorTokenFile, &t.Operator}} {
		p := filepath.Join(dir, f.name)
		tok, err := readOrCreateToken(p)
		if err != nil {
			return Tokens{}, nil, err
		}
		*f.dst = tok
		files = append(files, p)
	}
	return t, files, nil
}

// ReadTokenFile reads a token from a file (its content, trimmed); it must not be empty.
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("console token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 {
		return "", fmt.Errorf("console token %s: want at least 16 characters", path)
	}
	return tok, nil
}

func readOrCreateToken(path string) (string, error) {
	if tok, err := ReadTokenFile(path); err == nil {
		return tok, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(b[:])
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return ReadTokenFile(path) // another process made it meanwhile
	}
	if err != nil {
		return "", fmt.Errorf("console token: %w", err)
	}
	if _, err := f.WriteString(tok + "\n"); err != nil {
		f.Close()
		return "", fmt.Errorf("console token: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("console token: %w", err)
	}
	return tok, nil
}

// roleOf is the role a token gives.
func (t Tokens) roleOf(tok string) Role {
	if tok == "" {
		return RoleNone
	}
	if t.Operator != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(t.Operator)) == 1 {
		return RoleOperator
	}
	if t.Viewer != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(t.Viewer)) == 1 {
		return RoleViewer
	}
	return RoleNone
}

const (
	cookieName   = "compactor_console"
	sessionLife  = 12 * time.Hour
	csrfField    = "csrf"
	csrfHeader   = "X-CSRF-Token"
	bearerPrefix = "Bearer "
)

// sessions sign and check session cookies and CSRF tokens with a key of this process (a
// restart logs everyone out).
type sessions struct {
	key []byte
}

func newSessions() *sessions {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return &sessions{key: k}
}

func (s *sessions) mac(parts ...string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(strings.Join(parts, "|")))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// issue is a cookie value for role: role|expiry|nonce|mac.
func (s *sessions) issue(role Role, now time.Time) string {
	var n [12]byte
	_, _ = rand.Read(n[:])
	exp := strconv.FormatInt(now.Add(sessionLife).Unix(), 10)
	nonce := base64.RawURLEncoding.EncodeToString(n[:])
	return string(role) + "|" + exp + "|" + nonce + "|" + s.mac(string(role), exp, nonce)
}

// check returns the role and nonce of a cookie value, or RoleNone.
func (s *sessions) check(v string, now time.Time) (Role, string) {
	parts := strings.Split(v, "|")
	if len(parts) != 4 {
		return RoleNone, ""
	}
	if !hmac.Equal([]byte(parts[3]), []byte(s.mac(parts[0], parts[1], parts[2]))) {
		return RoleNone, ""
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || now.Unix() > exp {
		return RoleNone, ""
	}
	switch Role(parts[0]) {
	case RoleViewer, RoleOperator:
		return Role(parts[0]), parts[2]
	}
	return RoleNone, ""
}

// csrf is the CSRF token of a session (its nonce).
func (s *sessions) csrf(nonce string) string { return s.mac("csrf", nonce) }

// caller is who made a request.
type caller struct {
	role   Role
	nonce  string // the session's; "" for a bearer token
	bearer bool
}

// who reads a request's credentials: a bearer token, else the session cookie.
func (c *Console) who(r *http.Request) caller {
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, bearerPrefix) {
		return caller{role: c.tokens.roleOf(strings.TrimPrefix(h, bearerPrefix)), bearer: true}
	}
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return caller{}
	}
	role, nonce := c.sess.check(ck.Value, time.Now())
	return caller{role: role, nonce: nonce}
}

// sameOrigin reports whether a state-changing request comes from this console's own pages.
// A browser says where a request comes from in Sec-Fetch-Site (same-origin for the
// console's own forms and scripts); one that does not send it is judged by its Origin (or,
// without one, its Referer), which must be this host ("null", an opaque origin, is not). A
// request with none of them (a script, curl) passes: it carries no cookie of a browser's,
// so its bearer token or CSRF token decides.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin"
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		origin = r.Header.Get("Referer")
	}
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}

// checkAction says why an action may not be done ("" when it may): it needs the
// operator, this origin, and (a browser's session) its CSRF token.
func (c *Console) checkAction(r *http.Request, who caller) (int, string) {
	if !sameOrigin(r) {
		return http.StatusForbidden, "refused: the request comes from another site"
	}
	switch who.role {
	case RoleNone:
		return http.StatusUnauthorized, "refused: log in with the operator's token"
	case RoleViewer:
		return http.StatusForbidden, "refused: actions need the operator's token (this session is a viewer's)"
	}
	if who.bearer {
		return 0, ""
	}
	got := r.Header.Get(csrfHeader)
	if got == "" {
		got = r.PostFormValue(csrfField)
	}
	if got == "" || !hmac.Equal([]byte(got), []byte(c.sess.csrf(who.nonce))) {
		return http.StatusForbidden, "refused: missing or wrong CSRF token (reload the page)"
	}
	return 0, ""
}
