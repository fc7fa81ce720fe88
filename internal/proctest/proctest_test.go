package proctest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/waitfor"
)

// sh starts script in a shell (in a process group of its own with group), its stdout
// collected; it is killed when the test ends.
func sh(t *testing.T, script string, group bool) (*Proc, *Buffer) {
	t.Helper()
	out := &Buffer{}
	cmd := exec.Command("sh", "-c", script)
	cmd.Stdout = out
	if group {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	p := Start(t, cmd)
	t.Cleanup(p.Kill)
	return p, out
}

// A process's output is read while it runs, and its exit code is its own.
func TestStartAwaitsTheExitCode(t *testing.T) {
	t.Parallel()
	p, out := sh(t, "echo started; exit 3", false)
	if code := p.Await(t); code != 3 || !p.Exited() || strings.TrimSpace(out.String()) != "started" {
		t.Fatalf("exit %d, exited %v, output %q", code, p.Exited(), out.String())
	}
}

// Stop sends SIGTERM first: a process that handles it exits with its own code.
func TestStopTermsFirst(t *testing.T) {
	t.Parallel()
	p, out := sh(t, "trap 'exit 7' TERM; echo ready; while :; do sleep 0.01; done", false)
	waitfor.Until(t, "the trap set", func() bool { return strings.Contains(out.String(), "ready") })
	p.Stop(time.Hour)
	if p.Code() != 7 {
		t.Fatalf("exit %d after SIGTERM, want the trap's 7", p.Code())
	}
}

// A process that ignores SIGTERM is killed after the grace period, and so is the rest of
// its group: its child does not outlive it. (The child's output goes elsewhere: holding
// the shell's stdout, it would keep the wait for the shell's output open.)
func TestStopKillsTheGroupAfterGrace(t *testing.T) {
	t.Parallel()
	p, out := sh(t, "trap '' TERM; sleep 1000 >/dev/null & echo $!; wait", true)
	waitfor.Until(t, "the child's pid", func() bool { return strings.HasSuffix(out.String(), "\n") })
	p.Stop(50 * time.Millisecond)
	if p.Code() != 128+int(syscall.SIGKILL) {
		t.Fatalf("exit %d, want SIGKILL's %d", p.Code(), 128+int(syscall.SIGKILL))
	}
	child := strings.TrimSpace(out.String())
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc to look the child up in")
	}
	// Killed with its group, the child is gone, or a zombie until something reaps it.
	waitfor.Until(t, "the child "+child+" killed with its group", func() bool {
		stat, err := os.ReadFile("/proc/" + child + "/stat")
		if err != nil {
			return true
		}
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		return len(f) > 0 && f[0] == "Z"
	})
}

// Wait stops the process when its context ends first.
func TestWaitStopsOnContext(t *testing.T) {
	t.Parallel()
	p := Start(t, exec.Command("sleep", "1000"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if code := p.Wait(ctx, time.Hour); code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit %d, want SIGTERM's %d", code, 128+int(syscall.SIGTERM))
	}
}
