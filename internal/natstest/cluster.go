package natstest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// nodeEnv carries a NodeSpec to the child process.
const nodeEnv = "COMPACTOR_TEST_NATS_NODE"

// NodeSpec is what a child process needs to run one node.
type NodeSpec struct {
	Name        string   `json:"name"`
	Cluster     string   `json:"cluster"`
	Port        int      `json:"port"`
	ClusterPort int      `json:"clusterPort"`
	Routes      []string `json:"routes"`
	StoreDir    string   `json:"storeDir"`
	// Config is a nats-server configuration file whose settings (its authorization, say)
	// the node starts from; the fields above override its own.
	Config string `json:"config,omitempty"`
}

// MaybeRunNode serves a node instead of running the tests when the environment asks for
// one, and exits when the node ends (killed, or its stdin closed: the test ended).
func MaybeRunNode() {
	if spec := os.Getenv(nodeEnv); spec != "" {
		os.Exit(runNode(spec))
	}
}

func runNode(spec string) int {
	var ns NodeSpec
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
	opts := &server.Options{}
	if ns.Config != "" {
		var err error
		if opts, err = server.ProcessConfigFile(ns.Config); err != nil {
			fmt.Printf("failed: %v\n", err)
			return 2
		}
	}
	opts.ServerName, opts.Host, opts.Port, opts.JetStream, opts.StoreDir, opts.NoSigs, opts.NoLog = ns.Name, "127.0.0.1", ns.Port, true, ns.StoreDir, true, true
	opts.Cluster = server.ClusterOpts{Name: ns.Cluster, Host: "127.0.0.1", Port: ns.ClusterPort}
	opts.Routes = routes
	srv, err := server.NewServer(opts)
	if err != nil {
		fmt.Printf("failed: %v\n", err)
		return 2
	}
	// The server's own words on why it did not start (a port taken, above all); its other
	// complaints (peers killed by the test) are not wanted in the test's output.
	why := &fatalLog{fatal: make(chan struct{})}
	srv.SetLogger(why, false, false)
	go srv.Start()
	ready := make(chan bool, 1)
	go func() { ready <- srv.ReadyForConnections(30 * time.Second) }()
	select {
	case ok := <-ready:
		if !ok {
			fmt.Printf("failed: not ready after 30s: %s\n", why.String())
			return 1
		}
	case <-why.fatal:
		fmt.Printf("failed: %s\n", why.String())
		return 1
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	srv.Shutdown()
	return 0
}

// fatalLog keeps the server's first fatal and error lines; fatal is closed on the first
// fatal one (the server does not start after it).
type fatalLog struct {
	mu    sync.Mutex
	lines []string
	fatal chan struct{}
	once  sync.Once
}

func (l *fatalLog) keep(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) < 5 {
		l.lines = append(l.lines, fmt.Sprintf(format, v...))
	}
}

func (l *fatalLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == 0 {
		return "the server logged no error"
	}
	return strings.Join(l.lines, "; ")
}

func (l *fatalLog) Fatalf(format string, v ...any) {
	l.keep(format, v...)
	l.once.Do(func() { close(l.fatal) })
}
func (l *fatalLog) Errorf(format string, v ...any) { l.keep(format, v...) }
func (*fatalLog) Noticef(string, ...any)           {}
func (*fatalLog) Warnf(string, ...any)             {}
func (*fatalLog) Debugf(string, ...any)            {}
func (*fatalLog) Tracef(string, ...any)            {}

// Node is one node's child process.
type Node struct {
	T     testing.TB
	Spec  NodeSpec
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// Start starts the node and waits until it accepts connections. Call it from the test's
// goroutine (it fails the test); StartCluster starts its nodes together with start.
func (n *Node) Start() {
	n.T.Helper()
	if err := n.start(); err != nil {
		n.T.Fatal(err)
	}
}

func (n *Node) start() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	spec, _ := json.Marshal(n.Spec)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), nodeEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("node %s: %w", n.Spec.Name, err)
	}
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, out)
	}()
	var line string
	select {
	case line = <-ready:
	case <-time.After(60 * time.Second):
		line = "no answer after 60s"
	}
	if line != "ready" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		stdin.Close()
		return fmt.Errorf("node %s (client port %d, cluster port %d) did not start: %s", n.Spec.Name, n.Spec.Port, n.Spec.ClusterPort, line)
	}
	n.cmd, n.stdin = cmd, stdin
	return nil
}

// Kill ends the node with SIGKILL.
func (n *Node) Kill() {
	if n.cmd != nil {
		_ = n.cmd.Process.Kill()
		_ = n.cmd.Wait()
		n.stdin.Close()
		n.cmd = nil
	}
}

// URL is the node's client URL.
func (n *Node) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.Spec.Port) }

// StartCluster starts three nodes routed to each other, JetStream clustered, each with its
// store in a temp dir; they are killed when the test ends. The JetStream meta leader may
// not be elected yet when it returns. A cluster with a node that did not start (another
// process took one of its ports before it bound it, above all) is killed and started
// again on other ports, up to three times; each failure is logged with the server's reason.
func StartCluster(t testing.TB, name string) []*Node {
	t.Helper()
	return StartClusterWith(t, name, "")
}

// StartClusterWith is StartCluster with each node started from the nats-server
// configuration file config (its authorization, say); "" for none.
func StartClusterWith(t testing.TB, name, config string) []*Node {
	t.Helper()
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		var nodes []*Node
		if nodes, err = startCluster(t, name, config); err == nil {
			return nodes
		}
		t.Logf("cluster start, attempt %d: %v", attempt, err)
	}
	t.Fatal(err)
	return nil
}

func startCluster(t testing.TB, name, config string) ([]*Node, error) {
	ports := FreePorts(t, 6)
	var nodes []*Node
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		var routes []string
		for j := range 3 {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[3+j]))
			}
		}
		n := &Node{T: t, Spec: NodeSpec{Name: fmt.Sprintf("n%d", i), Cluster: name, Port: ports[i], ClusterPort: ports[3+i], Routes: routes, StoreDir: t.TempDir(), Config: config}}
		nodes = append(nodes, n)
		wg.Go(func() { errs[i] = n.start() }) // together: JetStream waits for its peers
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, n := range nodes {
			n.Kill()
		}
		return nil, err
	}
	for _, n := range nodes {
		t.Cleanup(n.Kill)
	}
	return nodes, nil
}

// URLs is the nodes' client URL list, for a client that may use any of them.
func URLs(nodes []*Node) string {
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = n.URL()
	}
	return strings.Join(urls, ",")
}

// WaitJetStream waits up to d for the JetStream API at url to answer: on a cluster, until
// it has elected its meta leader. opts are the connection's (its credentials).
func WaitJetStream(t testing.TB, url string, d time.Duration, opts ...nats.Option) {
	t.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{nats.MaxReconnects(-1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	for deadline := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream at %s does not answer after %s: %v", url, d, err)
		}
	}
}
