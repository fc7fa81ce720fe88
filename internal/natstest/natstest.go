// Package natstest runs clustered nats-servers for tests, each node in a child process (the
// test binary itself, re-executed), so that killing a node is a real SIGKILL: no leader
// hand-over, no goodbye to its peers or clients. Ports are chosen free once and kept, so a
// node restarts where the others (and the clients) expect it. A test binary using it calls
// MaybeRunNode first in its TestMain.
package natstest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
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
	srv, err := server.NewServer(&server.Options{
		ServerName: ns.Name, Host: "127.0.0.1", Port: ns.Port, JetStream: true, StoreDir: ns.StoreDir, NoSigs: true, NoLog: true,
		Cluster: server.ClusterOpts{Name: ns.Cluster, Host: "127.0.0.1", Port: ns.ClusterPort}, Routes: routes,
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

// Node is one node's child process.
type Node struct {
	T     testing.TB
	Spec  NodeSpec
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// Start starts the node and waits until it accepts connections.
func (n *Node) Start() {
	n.T.Helper()
	exe, err := os.Executable()
	if err != nil {
		n.T.Fatal(err)
	}
	spec, _ := json.Marshal(n.Spec)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), nodeEnv+"="+string(spec))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		n.T.Fatal(err)
	}
	n.stdin, err = cmd.StdinPipe()
	if err != nil {
		n.T.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		n.T.Fatal(err)
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
			n.T.Fatalf("node %s did not start", n.Spec.Name)
		}
	case <-time.After(60 * time.Second):
		n.T.Fatalf("node %s not ready after 60s", n.Spec.Name)
	}
	n.cmd = cmd
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

// FreePorts returns n loopback ports free at the time of the call.
func FreePorts(t testing.TB, n int) []int {
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

// StartCluster starts three nodes routed to each other, JetStream clustered, each with its
// store in a temp dir; they are killed when the test ends. The JetStream meta leader may
// not be elected yet when it returns.
func StartCluster(t testing.TB, name string) []*Node {
	t.Helper()
	ports := FreePorts(t, 6)
	var nodes []*Node
	var wg sync.WaitGroup
	for i := range 3 {
		var routes []string
		for j := range 3 {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[3+j]))
			}
		}
		n := &Node{T: t, Spec: NodeSpec{Name: fmt.Sprintf("n%d", i), Cluster: name, Port: ports[i], ClusterPort: ports[3+i], Routes: routes, StoreDir: t.TempDir()}}
		nodes = append(nodes, n)
		t.Cleanup(n.Kill)
		wg.Go(n.Start) // together: JetStream waits for its peers
	}
	wg.Wait()
	return nodes
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
// it has elected its meta leader.
func WaitJetStream(t testing.TB, url string, d time.Duration) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
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

// StartServer runs one nats-server in this process: a free loopback port, JetStream on,
// its store in a temp dir; shut down when the test ends.
func StartServer(t testing.TB) *server.Server {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}
