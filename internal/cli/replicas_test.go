package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/waitfor"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor-dev/compactor/internal/natstest"
)

// replicaTrials is how many trials of each start order TestReplicasNeverLowered runs:
// 1 in `make test`; COMPACTOR_REPLICA_TRIALS=20 for the figure (about 7 minutes
// with the race detector on 2 cores).
func replicaTrials(t *testing.T) int {
	if v := os.Getenv("COMPACTOR_REPLICA_TRIALS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("COMPACTOR_REPLICA_TRIALS=%q: want a positive number", v)
		}
		return n
	}
	return 1
}

// The operator's race on replicas: on a 3-node cluster whose compactor streams were
// deleted, `compactor run --replicas 3` and a client (`compactor sweep`, typed without
// --replicas) are started together, in both orders; and two services, --replicas 3 and
// --replicas 1, are started together. Once the services are ready, every stream and bucket
// has 3 replicas. Not parallel: it runs a cluster, and sets the NewPipelineHandler hook.
func TestReplicasNeverLowered(t *testing.T) {
	trials := replicaTrials(t)
	useSkippingHandler(t)
	url := natstest.URLs(natstest.StartCluster(t, "compactor-cli"))
	natstest.WaitJetStream(t, url, 30*time.Second)
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	store := t.TempDir()
	service := func(replicas string) []string {
		return []string{"run", "--setup", "--nats-url", url, "--store", "default=" + store, "--replicas", replicas, "--data-dir", t.TempDir(),
			"--idle", "0", "--log-format", "json", "--drain-timeout", "1s"}
	}
	client := []string{"sweep", "--nats-url", url, "--store", "default=" + store, "--idle", "0"}

	type scenario struct {
		name  string
		first []string
		then  []string
	}
	scenarios := []scenario{
		{"service, then client", service("3"), client},
		{"client, then service", client, service("3")},
		{"service R3, then service R1", service("3"), service("1")},
		{"service R1, then service R3", service("1"), service("3")},
	}
	for _, sc := range scenarios {
		passed, start := 0, time.Now()
		endings := map[string]int{} // how the processes that ended by themselves ended
		for trial := range trials {
			deleteStreams(t, js)
			procs := []*cliProc{startCLI(sc.first), startCLI(sc.then)}
			ok := true
			for _, p := range procs {
				if err := p.ready(); err != nil {
					ok = false
					t.Errorf("%s, trial %d: %v", sc.name, trial+1, err)
				}
			}
			if bad := replicasBelow(t, js, 3); len(bad) > 0 {
				ok = false
				t.Errorf("%s, trial %d: below 3 replicas: %s", sc.name, trial+1, strings.Join(bad, ", "))
			}
			for _, p := range procs {
				if p.ended() {
					endings[p.ending()]++
				}
				p.cancel() // both at once: they stop together
			}
			for _, p := range procs {
				p.stop(t)
			}
			if ok {
				passed++
			}
		}
		t.Logf("%s: %d of %d trials passed (every process started or refused with its reason; 3 replicas everywhere) in %s; clients: %v",
			sc.name, passed, trials, time.Since(start).Round(100*time.Millisecond), endings)
	}
}

// cliProc is a compactor command run in process, as a process of its own would run it.
type cliProc struct {
	args   []string
	cancel context.CancelFunc
	done   chan struct{}
	code   int
	out    bytes.Buffer
	log    *watchWriter
}

func startCLI(args []string) *cliProc {
	ctx, cancel := context.WithCancel(context.Background())
	p := &cliProc{args: args, cancel: cancel, done: make(chan struct{}), log: newWatchWriter("compactor pipeline ready")}
	go func() {
		defer close(p.done)
		p.code = Run(ctx, &Env{Args: args, Stdout: &p.out, Stderr: p.log, Getenv: func(string) string { return "" }})
	}()
	return p
}

// ready waits until a service has set up the cluster (its start-up line), or a client
// has ended. A client started before the service may refuse (exit 1), naming what is
// missing and that `compactor run` sets it up; any other ending is an error.
func (p *cliProc) ready() error {
	select {
	case <-p.log.seen:
		return nil
	case <-p.done:
		if p.args[0] == "run" || p.code > 1 || (p.code == 1 && !strings.Contains(p.log.String(), "compactor run")) {
			return fmt.Errorf("%s: exit %d\n%s", p.args[0], p.code, p.log.String())
		}
		return nil
	case <-time.After(time.Minute):
		return fmt.Errorf("%s: not ready after a minute\n%s", p.args[0], p.log.String())
	}
}

func (p *cliProc) ended() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ending sums up how an ended command ended: its exit code and, for a refusal, what it
// found missing.
func (p *cliProc) ending() string {
	log := p.log.String()
	switch {
	case p.code == 0:
		return p.args[0] + " exit 0"
	case strings.Contains(log, "does not exist on this NATS server"):
		return p.args[0] + " exit 1 (not set up yet)"
	case strings.Contains(log, "no worker serves store"):
		return p.args[0] + " exit 1 (not served yet)"
	}
	return fmt.Sprintf("%s exit %d", p.args[0], p.code)
}

func (p *cliProc) stop(t *testing.T) {
	t.Helper()
	p.cancel()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not stop\n%s", p.args[0], p.log.String())
	}
}

// watchWriter collects a command's log and closes seen when a line contains want.
type watchWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func newWatchWriter(want string) *watchWriter {
	return &watchWriter{want: want, seen: make(chan struct{})}
}

func (w *watchWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(b)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(b), nil
}

func (w *watchWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// compactorStreams lists the streams of compactor's streams and buckets on the server.
func compactorStreams(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names := js.StreamNames(ctx)
	var out []string
	for n := range names.Name() {
		if strings.HasPrefix(n, "COMPACTOR_") || strings.HasPrefix(n, "KV_COMPACTOR_") {
			out = append(out, n)
		}
	}
	if err := names.Err(); err != nil {
		t.Fatalf("stream names: %v", err)
	}
	return out
}

func deleteStreams(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	for _, n := range compactorStreams(t, js) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := js.DeleteStream(ctx, n)
		cancel()
		if err != nil {
			t.Fatalf("delete %s: %v", n, err)
		}
	}
	// A cluster's stream list can still name a stream for a moment after its deletion was
	// answered: wait for it to be gone rather than fail the trial on it.
	waitfor.Until(t, "the deleted streams gone from the list", func() bool { return len(compactorStreams(t, js)) == 0 })
}

// replicasBelow names the compactor streams and buckets with fewer than want replicas
// (and says so when there are none: a service that made nothing is no pass).
func replicasBelow(t *testing.T, js jetstream.JetStream, want int) []string {
	t.Helper()
	names := compactorStreams(t, js)
	if len(names) < 7 {
		t.Fatalf("only %d compactor streams and buckets: %v", len(names), names)
	}
	var bad []string
	for _, n := range names {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s, err := js.Stream(ctx, n)
		cancel()
		if err != nil {
			t.Fatalf("stream %s: %v", n, err)
		}
		if r := s.CachedInfo().Config.Replicas; r < want {
			bad = append(bad, fmt.Sprintf("%s R%d", n, r))
		}
	}
	return bad
}
