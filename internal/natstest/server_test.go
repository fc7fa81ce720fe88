package natstest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A server started from a configuration file takes its users (a client without their
// credentials is refused, one with them uses JetStream), on a port of its own choosing.
func TestStartServerFromTakesTheFilesUsers(t *testing.T) {
	t.Parallel()
	conf := filepath.Join(t.TempDir(), "auth.conf")
	text := "port: 4222\naccounts { a: { jetstream: enabled, users: [ { user: u, password: p } ] } }\n"
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	url := StartServerFrom(t, conf).ClientURL()
	if url == "nats://127.0.0.1:4222" {
		t.Fatalf("the server took the file's port: %s", url)
	}
	if nc, err := nats.Connect(url); err == nil {
		nc.Close()
		t.Fatal("a client without the file's credentials was let in")
	}
	nc, err := nats.Connect(url, nats.UserInfo("u", "p"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.AccountInfo(context.Background()); err != nil {
		t.Fatalf("JetStream of the file's account: %v", err)
	}
}

// A restartable server comes back on its URL with its store: a client reconnects by
// itself and finds the stream it made before the outage.
func TestRestartableKeepsItsPortAndStore(t *testing.T) {
	t.Parallel()
	r := StartRestartable(t, server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir()})
	url := r.URL()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KEPT", Subjects: []string{"kept"}}); err != nil {
		t.Fatal(err)
	}
	r.Stop()
	if r.Server() != nil {
		t.Fatal("a stopped server is still there")
	}
	r.Stop() // a second stop is harmless
	r.Start()
	if r.URL() != url || r.Server().ClientURL() != url {
		t.Fatalf("restarted at %s (%s), not %s", r.Server().ClientURL(), r.URL(), url)
	}
	if err := nc.FlushTimeout(time.Minute); err != nil {
		t.Fatalf("the client did not reconnect: %v", err)
	}
	if _, err := js.Stream(ctx, "KEPT"); err != nil {
		t.Fatalf("the stream made before the outage: %v", err)
	}
	// Back with other options: the same port, no JetStream.
	r.Stop()
	r.Opts.JetStream = false
	r.Start()
	if err := nc.FlushTimeout(time.Minute); err != nil {
		t.Fatalf("the client did not reconnect: %v", err)
	}
	if _, err := js.Stream(ctx, "KEPT"); err == nil {
		t.Fatal("JetStream answered on a server started without it")
	}
}
