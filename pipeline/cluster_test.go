package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/natstest"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/wire"
)

// cluster is three nats-servers routed to each other on loopback, JetStream clustered,
// each run by a child process (internal/natstest), so that killing a node is a real SIGKILL.
type cluster struct {
	t     testing.TB
	nodes []*natstest.Node
}

// TestMain runs a cluster node instead of the tests when the environment asks for one.
func TestMain(m *testing.M) {
	natstest.MaybeRunNode()
	os.Exit(m.Run())
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	c := &cluster{t: t, nodes: natstest.StartCluster(t, "compactor-test")}
	natstest.WaitJetStream(t, c.urls(), 30*time.Second)
	return c
}

// newClusterClient starts a cluster and connects a client to it (closed at the end).
func newClusterClient(t testing.TB) (*cluster, *nats.Conn, jetstream.JetStream) {
	c := newCluster(t)
	nc := c.connect()
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	return c, nc, js
}

// urls is the client URL list of the nodes (all of them unless some are given).
func (c *cluster) urls(which ...int) string {
	if len(which) == 0 {
		return natstest.URLs(c.nodes)
	}
	var out []*natstest.Node
	for _, i := range which {
		out = append(out, c.nodes[i])
	}
	return natstest.URLs(out)
}

func (c *cluster) connect() *nats.Conn {
	c.t.Helper()
	nc, err := nats.Connect(c.urls(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		c.t.Fatal(err)
	}
	return nc
}

// node returns the index of the node named name.
func (c *cluster) node(name string) int {
	for i, n := range c.nodes {
		if n.Spec.Name == name {
			return i
		}
	}
	c.t.Fatalf("no node %q", name)
	return -1
}

func streamInfo(t testing.TB, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	t.Helper()
	var info *jetstream.StreamInfo
	waitfor.Until(t, "info of "+name, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, name)
		if err != nil {
			return false
		}
		info = s.CachedInfo()
		return info.Cluster != nil && info.Cluster.Leader != ""
	})
	return info
}

// The fault-tolerance test: three nodes, every stream and bucket with 3
// replicas, 60 jobs running on two workers; the node leading COMPACTOR_JOBS is killed
// (SIGKILL) mid-batch, a third worker starts while the cluster elects new leaders, and the node is
// started again. Every job ends with a final event, every session has exactly one
// compaction, nothing is dead-lettered and no job is left in the queue. A worker started
// with the default of 1 replica does not lower them.
func TestClusterLeaderKill(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cluster test: -short")
	}
	c, nc, js := newClusterClient(t)
	dir := t.TempDir()

	h := &fakeHandler{delay: 400 * time.Millisecond}
	newWorker := func(urls string, replicas int) (*Service, error) {
		cfg := Config{Stores: []Store{{Name: "default", Dir: dir}}, NATS: access.NATSConfig{URL: urls}, Setup: true, Concurrency: 3, Idle: -1,
			AckWait: 2 * time.Second, LeaseTTL: 3 * time.Second, LeaseBusyDelay: 200 * time.Millisecond,
			BackoffBase: 100 * time.Millisecond, BackoffMax: 2 * time.Second, ShutdownTimeout: 5 * time.Second,
			Replicas: replicas, StartupTimeout: 45 * time.Second, Handler: h}
		s, err := New(cfg)
		if err != nil {
			return nil, err
		}
		t.Cleanup(s.Close)
		return s, s.Start(context.Background())
	}
	worker := func(urls string, replicas int) *Service {
		s, err := newWorker(urls, replicas)
		if err != nil {
			t.Fatalf("worker start: %v", err)
		}
		return s
	}
	run := func(s *Service) { runService(t, s) }
	a := worker(c.urls(), 3)
	b := worker(c.urls(), 0) // the default: must not lower the replicas
	for _, name := range []string{wire.StreamJobs, wire.StreamEvents, wire.StreamDLQ, "KV_" + wire.BucketLeases, "KV_" + wire.BucketSweep, "KV_" + wire.BucketAttempts} {
		if info := streamInfo(t, js, name); info.Config.Replicas != 3 || len(info.Cluster.Replicas) != 2 {
			t.Fatalf("%s: %d replicas (%d peers besides the leader), want 3", name, info.Config.Replicas, len(info.Cluster.Replicas))
		}
	}

	const jobs = 60
	var files []string
	seqs := map[uint64]string{}
	for i := range jobs {
		rel := fmt.Sprintf("p%02d/s.jsonl", i)
		sid, leaf := writeSession(t, dir, rel)
		files = append(files, filepath.Join(dir, filepath.FromSlash(rel)))
		r, err := fleetops.Enqueue(context.Background(), nc, wire.Job{Kind: wire.KindCompact, Store: "default", Path: rel, SessionID: sid, ExpectLeafID: leaf}, false, 0)
		if err != nil {
			t.Fatal(err)
		}
		seqs[r.Seq] = rel
	}
	start := time.Now()
	run(a)
	run(b)
	compacted := func() int {
		n := 0
		for _, f := range files {
			n += min(countType(t, f, "compaction"), 1)
		}
		return n
	}
	waitfor.Until(t, "the batch under way", func() bool { return compacted() >= 10 })

	leader := streamInfo(t, js, wire.StreamJobs).Cluster.Leader
	victim := c.node(leader)
	atKill := compacted()
	c.nodes[victim].Kill()
	killed := time.Now()
	t.Logf("killed %s (SIGKILL; leader of %s) after %d of %d jobs", leader, wire.StreamJobs, atKill, jobs)

	// A worker that starts now meets a cluster electing leaders.
	var survivors []int
	for i := range 3 {
		if i != victim {
			survivors = append(survivors, i)
		}
	}
	lateStarted := make(chan error, 1)
	go func() {
		late, err := newWorker(c.urls(survivors...), 3)
		if err == nil {
			run(late)
			t.Logf("a worker started during the election in %.1fs", time.Since(killed).Seconds())
		}
		lateStarted <- err
	}()
	// Beyond the jobs the two workers were running at the kill (3 each), new deliveries.
	waitfor.Until(t, "work to resume on two nodes", func() bool { return compacted() > atKill+6 })
	t.Logf("new jobs done %.1fs after the kill", time.Since(killed).Seconds())
	if err := <-lateStarted; err != nil {
		t.Fatalf("worker started during the election: %v", err)
	}
	c.nodes[victim].Start()
	t.Logf("%s restarted %.1fs after the kill", leader, time.Since(killed).Seconds())

	waitfor.Until(t, "every job done and the queue empty", func() bool {
		if compacted() != jobs {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, wire.StreamJobs)
		return err == nil && s.CachedInfo().State.Msgs == 0
	})
	total := time.Since(start)
	for _, f := range files {
		if n := countType(t, f, "compaction"); n != 1 {
			t.Errorf("%s: %d compactions, want 1", f, n)
		}
	}
	final := map[uint64]wire.Event{}
	waitfor.Until(t, "a final event for every job", func() bool {
		for _, ev := range eventsOf(t, nc) {
			if ev.Final() {
				final[ev.JobSeq] = ev
			}
		}
		for seq := range seqs {
			if _, ok := final[seq]; !ok {
				return false
			}
		}
		return true
	})
	outcomes := map[Outcome]int{}
	for seq := range seqs {
		outcomes[final[seq].Outcome]++
		if o := final[seq].Outcome; o != OutcomeDone && o != OutcomeSkipped {
			t.Errorf("job %d (%s): %+v", seq, seqs[seq], final[seq])
		}
	}
	if dls := (&bundle{t: t, js: js}).deadLetters(); len(dls) != 0 {
		t.Errorf("%d dead letters: %+v", len(dls), dls)
	}
	calls, maxActive := h.stats()
	if maxActive != 1 {
		t.Errorf("a session was worked by %d handlers at once", maxActive)
	}
	t.Logf("%d jobs in %.1fs: lost 0, duplicated effects 0, final outcomes %v, handler calls %d (%d redone after the fault)",
		jobs, total.Seconds(), outcomes, calls, calls-jobs)
}

// With 1 replica a stream dies with its node: enqueue then says the stream is offline
// (not "is compactor run running?"), and work resumes when the node is back.
func TestClusterR1StreamOfflineNamed(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cluster test: -short")
	}
	c, nc, js := newClusterClient(t)
	dir := t.TempDir()
	startService(t, Config{Stores: []Store{{Name: "default", Dir: dir}}, NATS: access.NATSConfig{URL: c.urls()}, Setup: true, Idle: -1, Handler: &fakeHandler{}})
	info := streamInfo(t, js, wire.StreamJobs)
	victim := c.node(info.Cluster.Leader)
	c.nodes[victim].Kill()
	sid, leaf := writeSession(t, dir, "s.jsonl")
	job := wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf}
	var (
		r   fleetops.EnqueueResult
		err error
	)
	waitfor.Until(t, "enqueue to name the offline stream", func() bool {
		r, err = fleetops.Enqueue(context.Background(), nc, job, false, 10*time.Second)
		return errors.Is(err, fleetops.ErrStreamOffline)
	})
	if !strings.Contains(err.Error(), "stream COMPACTOR_JOBS is offline") || !strings.Contains(err.Error(), "--replicas") {
		t.Errorf("error: %v", err)
	}
	t.Logf("with %s down: %v", info.Cluster.Leader, err)
	c.nodes[victim].Start()
	waitfor.Until(t, "enqueue to work again", func() bool {
		r, err = fleetops.Enqueue(context.Background(), nc, job, false, 5*time.Second)
		return err == nil
	})
	if r.Seq == 0 {
		t.Errorf("result %+v", r)
	}
}
