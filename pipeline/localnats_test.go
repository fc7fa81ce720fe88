package pipeline

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/internal/natstest"
)

// A client that looked for the local service in a data directory and was refused names
// that directory, what it found there, and how to point it elsewhere (--data-dir,
// COMPACTOR_DATA_DIR, --nats-url): a client of a service started with another --data-dir
// used to say "Authorization Violation" alone.
func TestLocalRefusalNamesTheDataDir(t *testing.T) {
	t.Parallel()
	ns := natstest.StartServerWith(t, &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), Authorization: "the-service-token"})
	other := t.TempDir() // a data directory no service runs on
	n := access.LocalNATS(other, access.NATSConfig{})
	n.URL = ns.ClientURL() // the default address, where the other service listens
	_, err := n.Connect()
	if err == nil {
		t.Fatal("connected without the server's token")
	}
	for _, want := range []string{other, "--data-dir", "COMPACTOR_DATA_DIR", "--nats-url", "found no compactor service there"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q:\n%v", want, err)
		}
	}
}

// The embedded server serves NATS's monitoring (/varz, /jsz) on the loopback address
// given, and logs it; without it, none.
func TestEmbeddedMonitoring(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var logs jsonLog
	cfg := Config{Stores: []Store{{Name: "default", Dir: dir}}, DataDir: t.TempDir(), EmbeddedPort: -1, Idle: -1, Handler: &fakeHandler{},
		EmbeddedMonitorHost: "127.0.0.1", EmbeddedMonitorPort: -1, Logger: logs.logger()}
	startService(t, cfg)
	recs := logs.records("embedded NATS started")
	if len(recs) != 1 {
		t.Fatalf("no start line: %s", logs.String())
	}
	monitor, _ := recs[0]["monitor"].(string)
	if !strings.HasPrefix(monitor, "http://127.0.0.1:") {
		t.Fatalf("monitor %q", monitor)
	}
	resp, err := http.Get(monitor + "/jsz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"streams"`) {
		t.Errorf("/jsz: %d %s", resp.StatusCode, body)
	}
}
