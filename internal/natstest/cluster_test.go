package natstest

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	MaybeRunNode()
	os.Exit(m.Run())
}

// A node whose port another process holds fails at once, with the server's reason and
// the port in its error.
func TestStartNamesATakenPort(t *testing.T) {
	t.Parallel()
	ports := FreePorts(t, 3)
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	n := &Node{T: t, Spec: NodeSpec{Name: "n0", Cluster: "taken", Port: ports[0], ClusterPort: ports[1],
		Routes: []string{"nats://127.0.0.1:" + strconv.Itoa(ports[2])}, StoreDir: t.TempDir()}}
	err = n.start()
	if err == nil || !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), strconv.Itoa(ports[0])) {
		t.Fatalf("start on a taken port: %v", err)
	}
	t.Log(err)
}

func TestFreePortsBelowTheEphemeralRange(t *testing.T) {
	t.Parallel()
	ports := FreePorts(t, 50)
	seen := map[int]bool{}
	for _, p := range ports {
		if p < 20000 || p >= ephemeralLow() || seen[p] {
			t.Fatalf("port %d (ephemeral range from %d, seen before %v)", p, ephemeralLow(), seen[p])
		}
		seen[p] = true
	}
}

// A cluster starts, each node on the ports it was given, and a killed node starts again
// on them.
func TestStartClusterAndRestart(t *testing.T) {
	t.Parallel()
	nodes := StartCluster(t, "natstest")
	WaitJetStream(t, URLs(nodes), 30*time.Second)
	nodes[1].Kill()
	nodes[1].Start()
	WaitJetStream(t, nodes[1].URL(), 30*time.Second)
}
