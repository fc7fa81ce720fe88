package proctest

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/waitfor"
)

// Proc is a started command.
type Proc struct {
	Cmd  *exec.Cmd
	done chan struct{}
	code int
	end  time.Time
}

// Start starts cmd as it is set up (its arguments, environment, outputs; Setpgid in its
// SysProcAttr to start it in a group of its own, so that a stop reaches all it started)
// and fails the test when it cannot. The caller decides how it ends when the test does
// (Stop or Kill in a t.Cleanup).
func Start(t testing.TB, cmd *exec.Cmd) *Proc {
	t.Helper()
	p := &Proc{Cmd: cmd, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	go func() {
		p.code = exitCode(cmd.Wait())
		p.end = time.Now()
		close(p.done)
	}()
	return p
}

// exitCode is the code a shell reports: the process's own, or 128 plus the signal that
// ended it; -1 when it could not be waited for.
func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ee.ExitCode() >= 0 {
			return ee.ExitCode()
		}
		return 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
	default:
		return -1
	}
}

// Done is closed once the process has exited and its outputs are written.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Code is the exit code; valid once Done is closed.
func (p *Proc) Code() int { return p.code }

// Ended is when the process was found to have exited; valid once Done is closed.
func (p *Proc) Ended() time.Time { return p.end }

// Wait waits for the process to exit, or for ctx to end (then it is stopped as Stop does
// with the grace given), and returns its exit code.
func (p *Proc) Wait(ctx context.Context, grace time.Duration) int {
	select {
	case <-p.done:
	case <-ctx.Done():
		p.Stop(grace)
	}
	return p.code
}

// Await waits for the process to exit and returns its exit code; after waitfor.HangGuard
// it fails the test, naming the command.
func (p *Proc) Await(t testing.TB) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(waitfor.HangGuard):
		t.Fatalf("%v did not exit within %s", p.Cmd.Args, waitfor.HangGuard)
	}
	return p.code
}

// Stop sends SIGTERM (to the process's group when it has one of its own), then SIGKILL
// after grace, and waits for the exit. A process that has exited is left as it is.
func (p *Proc) Stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Kill()
	}
}

// Kill ends the process (its group when it has one of its own) with SIGKILL, as a crash
// or the OOM killer would, and waits for the exit.
func (p *Proc) Kill() {
	if p.Exited() {
		return
	}
	p.signal(syscall.SIGKILL)
	<-p.done
}

func (p *Proc) signal(sig syscall.Signal) {
	if a := p.Cmd.SysProcAttr; a != nil && a.Setpgid {
		_ = syscall.Kill(-p.Cmd.Process.Pid, sig)
		return
	}
	_ = p.Cmd.Process.Signal(sig)
}

// Buffer collects a process's output while a test reads it: a bytes.Buffer safe for both
// at once.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
