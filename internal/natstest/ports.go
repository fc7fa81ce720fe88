package natstest

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// FreePorts returns n distinct loopback ports free at the time of the call, chosen below
// the kernel's ephemeral range: a port a test keeps for a node's restart is then never
// handed to another process's outgoing connection or port-0 listener in between (a node
// that could not start on its port failed a cluster test in one run of `make test` out of
// 20 under load when the ports came from port 0).
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	lo, hi := 20000, ephemeralLow()
	seen := map[int]bool{}
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 10000 {
			t.Fatalf("no %d free loopback ports in [%d, %d)", n, lo, hi)
		}
		p := lo + rand.IntN(hi-lo)
		if seen[p] {
			continue
		}
		seen[p] = true
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		ln.Close()
		ports = append(ports, p)
	}
	return ports
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's default when it
// cannot be read; other systems start theirs higher).
func ephemeralLow() int {
	const linuxDefault = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return linuxDefault
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return linuxDefault
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low < 21000 {
		return linuxDefault
	}
	return low
}
