package fleetops

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// logBuffer collects log lines for a test to read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// reconcile starts from the server's configuration: replicas only go up, settings left
// unset (the server's defaults) are not changed, and a retention that cannot change is
// an error naming it.
func TestReconcile(t *testing.T) {
	t.Parallel()
	var log logBuffer
	have := jetstream.StreamConfig{Name: "S", Description: "d", Subjects: []string{"a.>"}, Retention: jetstream.WorkQueuePolicy,
		MaxMsgsPerSubject: -1, Duplicates: 2 * time.Minute, Replicas: 3, Storage: jetstream.FileStorage, AllowDirect: true}
	want := have
	want.MaxMsgsPerSubject, want.Replicas, want.AllowDirect = 0, 1, false
	if _, ok, err := Reconcile("stream", "S", have, want, log.logger()); !ok || err != nil {
		t.Fatalf("nothing to change: ok %v, %v", ok, err)
	}
	if !strings.Contains(log.String(), "keeping the replicas set on the server") {
		t.Errorf("replicas kept without a word: %s", log.String())
	}
	want.Replicas, want.Duplicates = 5, time.Minute
	next, ok, err := Reconcile("stream", "S", have, want, log.logger())
	if ok || err != nil || next.Replicas != 5 || next.Duplicates != time.Minute || !next.AllowDirect || next.MaxMsgsPerSubject != -1 {
		t.Fatalf("raise and change: ok %v, %v, %+v", ok, err, next)
	}
	want.Retention = jetstream.InterestPolicy
	if _, _, err := Reconcile("stream", "S", have, want, log.logger()); err == nil || !strings.Contains(err.Error(), "retention") {
		t.Fatalf("retention change: %v", err)
	}
}
