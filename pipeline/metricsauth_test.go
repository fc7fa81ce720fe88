package pipeline

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// With a metrics token, /metrics answers only a scraper that gives it; /healthz and
// /readyz stay open to probes. Without one, /metrics is open (a loopback address).
func TestMetricsToken(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	cfg := b.config(&fakeHandler{})
	cfg.MetricsAddr = "127.0.0.1:0"
	cfg.MetricsToken = "a-scraper-token-0123456789"
	s := b.service(cfg)
	b.run(s)
	ask := func(path, auth string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.MetricsAddr().String()+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, auth := range []string{"", "Bearer wrong", "Bearer a-scraper-token-012345678", "a-scraper-token-0123456789"} {
		if code, _ := ask("/metrics", auth); code != http.StatusUnauthorized {
			t.Errorf("/metrics with %q: %d, want 401", auth, code)
		}
	}
	if code, body := ask("/metrics", "Bearer a-scraper-token-0123456789"); code != 200 || !strings.Contains(body, "compactor_build_info") {
		t.Errorf("/metrics with the token: %d", code)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, _ := ask(p, ""); code != 200 {
			t.Errorf("%s without a token: %d, want 200", p, code)
		}
	}
}
