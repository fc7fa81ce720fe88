package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/cli/status"
	"github.com/compactor-dev/compactor/internal/natstest"
	"github.com/compactor-dev/compactor/internal/proctest"
	"github.com/compactor-dev/compactor/internal/testbin"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/sessionio"
)

// Tests that run compactor as a real process, with real signals: the binary is built once
// from the checkout, stamped as `make build` stamps it (git describe).

var built struct {
	once    sync.Once
	dir     string // removed by TestMain
	path    string
	version string
	err     error
}

// compactorBinary builds cmd/compactor once (without the race detector: it is the program
// under test, not the test) and returns its path and the version stamped into it.
func compactorBinary(t testing.TB) (path, version string) {
	t.Helper()
	built.once.Do(func() {
		out, err := exec.Command("git", "-C", "../..", "describe", "--tags", "--always", "--dirty").Output()
		built.version = strings.TrimSpace(string(out))
		if err != nil || built.version == "" {
			built.version = "test-build" // not a git checkout
		}
		built.dir, built.err = testbin.BuildWith("-X github.com/compactor-dev/compactor/internal/cli/command.version="+built.version, "compactor")
		built.path = filepath.Join(built.dir, "compactor")
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path, built.version
}

// process is a compactor process and its output (stdout and stderr).
type process struct {
	*proctest.Proc
	logs *proctest.Buffer
}

// startProcess runs the binary with args, in an environment of its own (no key in it, HOME
// a temporary directory); it is killed when the test ends if it still runs, and its log is
// printed when the test failed.
func startProcess(t testing.TB, bin string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	p := &process{logs: &proctest.Buffer{}}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	p.Proc = proctest.Start(t, cmd)
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("%s's log:\n%s", cmd.Args[1], p.logs.String())
		}
	})
	return p
}

func (p *process) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// waitLog waits until the process has logged a line holding every part.
func (p *process) waitLog(t testing.TB, what string, parts ...string) {
	t.Helper()
	waitfor.Until(t, what, func() bool {
		if p.Exited() {
			t.Fatalf("%s exited (%d) before %s; its log:\n%s", p.Cmd.Args[1], p.Code(), what, p.logs.String())
		}
		return hasLine(p.logs.String(), parts...)
	})
}

// hasLine reports whether a line of logs holds every part.
func hasLine(logs string, parts ...string) bool {
	for l := range strings.Lines(logs) {
		all := true
		for _, part := range parts {
			all = all && strings.Contains(l, part)
		}
		if all {
			return true
		}
	}
	return false
}

// liveSrc is a corpus session over budget at --context-window 20000 whose summary a fake
// model can write.
const liveSrc = "../../testdata/corpus/12-tricky-custom-message-cut.jsonl"

// overBudgetStore writes n copies of a corpus session (each with its own session id, two
// hours old) in a store: each is over budget with --context-window 20000.
func overBudgetStore(t testing.TB, n int) (dir string, files []string) {
	t.Helper()
	src, err := os.ReadFile(liveSrc)
	if err != nil {
		t.Fatal(err)
	}
	nl := bytes.IndexByte(src, '\n')
	var hdr map[string]any
	if err := json.Unmarshal(src[:nl], &hdr); err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	old := time.Now().Add(-2 * time.Hour)
	for i := range n {
		id := fmt.Sprintf("019d%04x-0000-7000-8000-%012x", i, time.Now().UnixNano()&(1<<40-1))
		hdr["id"] = id
		h, _ := json.Marshal(hdr)
		p := filepath.Join(dir, "--home-dev-p--", "2026-01-01T00-00-00-000Z_"+id+".jsonl")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, append(h, src[nl:]...), 0o644); err != nil {
			t.Fatal(err)
		}
		_ = os.Chtimes(p, old, old)
		files = append(files, p)
	}
	return dir, files
}

// compactions counts the compaction entries of each file.
func compactions(t *testing.T, files []string) (total int, perFile []int) {
	t.Helper()
	for _, f := range files {
		s, err := sessionio.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range s.Entries {
			if e.Type == sessionio.TypeCompaction {
				n++
			}
		}
		total += n
		perFile = append(perFile, n)
	}
	return total, perFile
}

// The version `make build` stamps (git describe) is what `compactor version` prints and what
// a running worker reports in its beats (compactor status).
func TestStampedVersionInBeats(t *testing.T) {
	t.Parallel()
	bin, version := compactorBinary(t)
	out, err := exec.Command(bin, "version").Output()
	if err != nil || strings.TrimSpace(string(out)) != "compactor "+version {
		t.Fatalf("compactor version: %q, %v; want %q", out, err, "compactor "+version)
	}
	url := natstest.StartServer(t).ClientURL()
	p := startProcess(t, bin, "run", "--setup", "--nats-url", url, "--store", "default="+t.TempDir(), "--data-dir", t.TempDir(), "--log-format", "json")
	var rep status.Report
	waitfor.Until(t, "the worker's beat", func() bool {
		if p.Exited() {
			t.Fatalf("run exited (%d):\n%s", p.Code(), p.logs.String())
		}
		out, err := exec.Command(bin, "status", "--nats-url", url, "--json").Output()
		if err != nil {
			return false
		}
		rep = status.Report{}
		// the store is listed as soon as it is set up; its worker once its first beat lands
		return json.Unmarshal(out, &rep) == nil && len(rep.Stores) == 1 && len(rep.Stores[0].Workers) > 0
	})
	if b := rep.Stores[0].Workers[0]; b.Version != version || fmt.Sprint(b.JobVersions) != "[1 2 3]" {
		t.Errorf("beat version %q, job versions %v; want %q, [1 2 3]", b.Version, b.JobVersions, version)
	}
	t.Logf("compactor version: %s; beat: %+v", strings.TrimSpace(string(out)), rep.Stores[0].Workers[0])
	p.signal(t, syscall.SIGTERM)
	if code := p.Await(t); code != 0 {
		t.Errorf("exit %d", code)
	}
}
