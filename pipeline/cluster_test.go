package pipeline

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// cluster is three nats-servers routed to each other on loopback, JetStream clustered,
// each with its store in a temp dir. Each node is the embedded nats-server run by a child
// process (this test binary, see TestMain), so that killing a node is a real SIGKILL: no
// leader hand-over, no goodbye to its peers or clients. Ports are chosen free once and
// kept, so a node restarts where the others (and the clients) expect it.
type cluster struct {
	t     testing.TB
	nodes []*procNode
}

// nodeSpec is what a child process needs to run one node.
type nodeSpec struct {
	Name        string   `json:"name"`
	Port        int      `json:"port"`
	ClusterPort int      `json:"clusterPort"`
	Routes      []string `json:"routes"`
	StoreDir    string   `json:"storeDir"`
}

const nodeEnv = "COMPACTOR_TEST_NATS_NODE"

// TestMain runs a cluster node instead of the tests when the environment asks for one.
func TestMain(m *testing.M) {
	if spec := os.Getenv(nodeEnv); spec != "" {
		os.Exit(runNode(spec))
	}
	os.Exit(m.Run())
}

// runNode serves one node until it is killed or its stdin closes (the test ended).
func runNode(spec string) int {
	var ns nodeSpec
	if err := json.Unmarshal([]byte(spec), &ns); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var routes []*url.URL
	for _, r := range ns.Routes {
		u, err := url.Parse(r)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		routes = append(routes, u)
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: ns.Name, Host: "127.0.0.1", Port: ns.Port, JetStream: true, StoreDir: ns.StoreDir, NoSigs: true, NoLog: true,
		Cluster: server.ClusterOpts{Name: "compactor-test", Host: "127.0.0.1", Port: ns.ClusterPort}, Routes: routes,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		fmt.Fprintln(os.Stderr, "not ready")
		return 1
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	srv.Shutdown()
	return 0
}

// procNode is one node's child process.
type procNode struct {
	t     testing.TB
	spec  nodeSpec
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func (n *procNode) start() {
	n.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		n.t.Fatal(err)
	}
	spec, _ := json.Marshal(n.spec)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), nodeEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		n.t.Fatal(err)
	}
	n.stdin, err = cmd.StdinPipe()
	if err != nil {
		n.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- line == "ready\n"
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case ok := <-ready:
		if !ok {
			n.t.Fatalf("node %s did not start", n.spec.Name)
		}
	case <-time.After(60 * time.Second):
		n.t.Fatalf("node %s not ready after 60s", n.spec.Name)
	}
	n.cmd = cmd
}

// kill ends the node with SIGKILL.
func (n *procNode) kill() {
	if n.cmd != nil {
		_ = n.cmd.Process.Kill()
		_ = n.cmd.Wait()
		n.stdin.Close()
		n.cmd = nil
	}
}

func (n *procNode) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.spec.Port) }

func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var lns []net.Listener
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	ports := freePorts(t, 6)
	c := &cluster{t: t}
	var wg sync.WaitGroup
	for i := range 3 {
		var routes []string
		for j := range 3 {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[3+j]))
			}
		}
		n := &procNode{t: t, spec: nodeSpec{Name: fmt.Sprintf("n%d", i), Port: ports[i], ClusterPort: ports[3+i], Routes: routes, StoreDir: t.TempDir()}}
		c.nodes = append(c.nodes, n)
		t.Cleanup(n.kill)
		wg.Go(n.start) // together: JetStream waits for its peers
	}
	wg.Wait()
	nc := c.connect()
	defer nc.Close()
	js, _ := jetstream.New(nc)
	eventually(t, 30*time.Second, "the JetStream meta leader", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err == nil
	})
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
		which = []int{0, 1, 2}
	}
	var out []string
	for _, i := range which {
		out = append(out, c.nodes[i].url())
	}
	return strings.Join(out, ",")
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
		if n.spec.Name == name {
			return i
		}
	}
	c.t.Fatalf("no node %q", name)
	return -1
}

func streamInfo(t testing.TB, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	t.Helper()
	var info *jetstream.StreamInfo
	eventually(t, 30*time.Second, "info of "+name, func() bool {
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

// The fault-tolerance test of issue 11: three nodes, every stream and bucket with 3
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
		cfg := Config{Stores: []Store{{Name: "default", Dir: dir}}, NATS: NATSConfig{URL: urls}, Concurrency: 3, Idle: -1,
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
	for _, name := range []string{StreamJobs, StreamEvents, StreamDLQ, "KV_" + BucketLeases, "KV_" + BucketSweep, "KV_" + BucketAttempts} {
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
		r, err := Enqueue(context.Background(), nc, Job{Kind: KindCompact, Store: "default", Path: rel, SessionID: sid, ExpectLeafID: leaf}, false, 0)
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
	eventually(t, 30*time.Second, "the batch under way", func() bool { return compacted() >= 10 })

	leader := streamInfo(t, js, StreamJobs).Cluster.Leader
	victim := c.node(leader)
	atKill := compacted()
	c.nodes[victim].kill()
	killed := time.Now()
	t.Logf("killed %s (SIGKILL; leader of %s) after %d of %d jobs", leader, StreamJobs, atKill, jobs)

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
	eventually(t, 40*time.Second, "work to resume on two nodes", func() bool { return compacted() > atKill+6 })
	t.Logf("new jobs done %.1fs after the kill", time.Since(killed).Seconds())
	if err := <-lateStarted; err != nil {
		t.Fatalf("worker started during the election: %v", err)
	}
	c.nodes[victim].start()
	t.Logf("%s restarted %.1fs after the kill", leader, time.Since(killed).Seconds())

	eventually(t, 60*time.Second, "every job done and the queue empty", func() bool {
		if compacted() != jobs {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, StreamJobs)
		return err == nil && s.CachedInfo().State.Msgs == 0
	})
	total := time.Since(start)
	for _, f := range files {
		if n := countType(t, f, "compaction"); n != 1 {
			t.Errorf("%s: %d compactions, want 1", f, n)
		}
	}
	final := map[uint64]Event{}
	eventually(t, 30*time.Second, "a final event for every job", func() bool {
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
	startService(t, Config{Stores: []Store{{Name: "default", Dir: dir}}, NATS: NATSConfig{URL: c.urls()}, Idle: -1, Handler: &fakeHandler{}})
	info := streamInfo(t, js, StreamJobs)
	victim := c.node(info.Cluster.Leader)
	c.nodes[victim].kill()
	sid, leaf := writeSession(t, dir, "s.jsonl")
	job := Job{Kind: KindCompact, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf}
	var (
		r   EnqueueResult
		err error
	)
	eventually(t, 30*time.Second, "enqueue to name the offline stream", func() bool {
		r, err = Enqueue(context.Background(), nc, job, false, 10*time.Second)
		return errors.Is(err, ErrStreamOffline)
	})
	if !strings.Contains(err.Error(), "stream COMPACTOR_JOBS is offline") || !strings.Contains(err.Error(), "--replicas") {
		t.Errorf("error: %v", err)
	}
	t.Logf("with %s down: %v", info.Cluster.Leader, err)
	c.nodes[victim].start()
	eventually(t, 30*time.Second, "enqueue to work again", func() bool {
		r, err = Enqueue(context.Background(), nc, job, false, 5*time.Second)
		return err == nil
	})
	if r.Seq == 0 {
		t.Errorf("result %+v", r)
	}
}
