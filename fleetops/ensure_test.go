package fleetops

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func TestReconcile(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	have := jetstream.StreamConfig{Name: "S", Description: "d", Subjects: []string{"a.>"}, Retention: jetstream.WorkQueuePolicy,
		MaxMsgsPerSubject: -1, Duplicates: 2 * time.Minute, Replicas: 3, Storage: jetstream.FileStorage, AllowDirect: true}
	want := have
	want.MaxMsgsPerSubject, want.Replicas, want.AllowDirect = 0, 1, false
	if _, ok, err := Reconcile("stream", "S", have, want, log); !ok || err != nil {
		t.Fatalf("nothing to change: ok %v, %v", ok, err)
	}
	if !strings.Contains(out.String(), "keeping the replicas set on the server") {
		t.Errorf("replicas kept without a word: %s", out.String())
	}
	want.Replicas, want.Duplicates = 5, time.Minute
	next, ok, err := Reconcile("stream", "S", have, want, log)
	if ok || err != nil || next.Replicas != 5 || next.Duplicates != time.Minute || !next.AllowDirect || next.MaxMsgsPerSubject != -1 {
		t.Fatalf("raise and change: ok %v, %v, %+v", ok, err, next)
	}
	want.Retention = jetstream.InterestPolicy
	if _, _, err := Reconcile("stream", "S", have, want, log); err == nil || !strings.Contains(err.Error(), "retention") {
		t.Fatalf("retention change: %v", err)
	}
}
