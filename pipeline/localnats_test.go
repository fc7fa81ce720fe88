package pipeline

import (
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

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
	n := LocalNATS(other, NATSConfig{})
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
