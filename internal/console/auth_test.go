package console

import (
	"net/http/httptest"
	"testing"
	"time"
)

// Where a form sends the browser back, and where a login goes next, stays on the console:
// an address of another host, in any of the forms a browser reads as one, becomes /.
func TestSafeNext(t *testing.T) {
	for in, want := range map[string]string{
		"/store/a": "/store/a", "/session?store=a&id=x": "/session?store=a&id=x",
		"//evil.example/x": "/", "/\\evil.example": "/", "https://evil.example/": "/", "": "/", "store/a": "/",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

// A session cookie is the process's: altered, expired, or of another key, it is no one's.
func TestSessionCookie(t *testing.T) {
	s, other := newSessions(), newSessions()
	now := time.Now()
	v := s.issue(RoleOperator, now)
	if role, nonce := s.check(v, now); role != RoleOperator || nonce == "" {
		t.Fatalf("a fresh cookie: %q", role)
	}
	for name, bad := range map[string]string{
		"role changed": "viewer" + v[len("operator"):],
		"another key":  other.issue(RoleOperator, now),
		"truncated":    v[:len(v)-2],
		"empty":        "",
	} {
		if role, _ := s.check(bad, now); role != RoleNone {
			t.Errorf("%s: %q", name, role)
		}
	}
	if role, _ := s.check(v, now.Add(sessionLife+time.Minute)); role != RoleNone {
		t.Errorf("an expired cookie: %q", role)
	}
	// The CSRF token is the session's: another session's does not pass.
	_, n1 := s.check(v, now)
	_, n2 := s.check(s.issue(RoleOperator, now), now)
	if s.csrf(n1) == s.csrf(n2) {
		t.Error("two sessions share a CSRF token")
	}
}

// sameOrigin: a browser's word (Sec-Fetch-Site) first, else Origin, else Referer; a
// request with none of them (a script) passes to the token checks.
func TestSameOrigin(t *testing.T) {
	for _, c := range []struct {
		headers map[string]string
		want    bool
	}{
		{map[string]string{"Sec-Fetch-Site": "same-origin"}, true},
		{map[string]string{"Sec-Fetch-Site": "same-site"}, false},
		{map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://console.test"}, false},
		{map[string]string{"Origin": "http://console.test"}, true},
		{map[string]string{"Origin": "null"}, false},
		{map[string]string{"Origin": "http://evil.test"}, false},
		{map[string]string{"Referer": "http://console.test/store/a"}, true},
		{map[string]string{"Referer": "http://evil.test/"}, false},
		{map[string]string{}, true},
	} {
		r := httptest.NewRequest("POST", "http://console.test/action/pause", nil)
		for k, v := range c.headers {
			r.Header.Set(k, v)
		}
		if got := sameOrigin(r); got != c.want {
			t.Errorf("%v: %v, want %v", c.headers, got, c.want)
		}
	}
}
