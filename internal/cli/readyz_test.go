package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/waitfor"

	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/internal/natstest"
)

// metricsAddr is the address a `compactor run` logged as its metrics server's (JSON logs).
func metricsAddr(logs string) string {
	for l := range strings.Lines(logs) {
		var rec struct{ Msg, Addr string }
		if json.Unmarshal([]byte(l), &rec) == nil && rec.Msg == "metrics listening" {
			return rec.Addr
		}
	}
	return ""
}

// httpGet gets url and returns the status and the body.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// /readyz of `compactor run` probes the LLM endpoint (GET /models with the key): ready
// while it answers, not ready, naming the refusal, once it answers 401 to every call.
func TestReadyzLLMRefusesKey(t *testing.T) {
	t.Parallel()
	url := natstest.StartServer(t).ClientURL()
	llm := fakellm.Start(t)
	run := startCLI([]string{"run", "--setup", "--nats-url", url, "--store", "default=" + t.TempDir(), "--data-dir", t.TempDir(), "--log-format", "json",
		"--summarizer", "openai", "--base-url", llm.URL(), "--model", "fake-model", "--metrics-addr", "127.0.0.1:0"})
	if err := run.ready(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.stop(t) })
	var addr string
	waitfor.Until(t, "the metrics server", func() bool { addr = metricsAddr(run.log.String()); return addr != "" })
	readyz := func() (int, string) { return httpGet(t, "http://"+addr+"/readyz") }
	wait := func(code int, want string) {
		t.Helper()
		start := time.Now()
		var body string
		waitfor.Until(t, "/readyz "+want, func() bool {
			var c int
			c, body = readyz()
			return c == code && strings.Contains(body, want)
		})
		t.Logf("/readyz %d after %.2fs:\n%s", code, time.Since(start).Seconds(), body)
	}
	wait(200, "llm: ok")
	llm.SetDefault(fakellm.Behavior{Status: 401, Message: "Incorrect API key provided"})
	wait(503, "HTTP 401: the endpoint refuses the API key")
	if n := llm.Count(); n != 0 {
		t.Errorf("%d chat completions: the probe must cost nothing", n)
	}
	if len(llm.ModelLists()) == 0 {
		t.Error("no GET /models reached the endpoint")
	}
}
