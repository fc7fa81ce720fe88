package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/pipeline/pipelinetest"
	"github.com/compactor-dev/compactor/wire"
)

const enqueueSession = `{"type":"session","version":3,"id":"019a48fc-d300-72c8-a6b9-f316c6e71060","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/tmp"}
{"type":"message","id":"a9835828","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}
`

// enqueueService starts a real worker (pipelinetest: embedded nats-server on a random
// port) over the store dir whose handler appends a line, or blocks while block is open, or
// fails for reason "fail", and returns its URL.
func enqueueService(t *testing.T, dir string, block chan struct{}) []string {
	t.Helper()
	h := pipeline.HandlerFunc(func(ctx context.Context, job wire.Job, file string) (wire.Result, error) {
		if block != nil {
			<-block
		}
		if job.Reason == "fail" {
			return wire.Result{}, pipeline.Permanent(fmt.Errorf("model refused"))
		}
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return wire.Result{}, err
		}
		defer f.Close()
		_, err = fmt.Fprintf(f, `{"type":"compaction","id":"c0ffee00","parentId":%q}`+"\n", job.ExpectLeafID)
		return wire.Result{Tally: wire.Tally{EntryID: "c0ffee00", TokensBefore: 900, TokensAfter: 90}}, err
	})
	n := pipelinetest.Start(t, pipelinetest.Options{StoreDir: dir, Handler: h}).NATS()
	return []string{"--nats-url", n.URL, "--nats-token-file", n.TokenFile}
}

func writeSessionFile(t *testing.T, dir, rel string) string {
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(enqueueSession), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// runEnqueueCLI runs the enqueue command line (cmd/enqueue) in process.
func runEnqueueCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := RunEnqueue(context.Background(), &Env{Args: args, Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
	return code, out.String(), errb.String()
}

func TestEnqueueWaitPrintsEvent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	natsArgs := enqueueService(t, dir, nil)
	file := writeSessionFile(t, dir, "sessions/--tmp--/x.jsonl")
	code, out, errs := runEnqueueCLI(append([]string{file, "--store-dir", dir, "--wait", "--timeout", "2m"}, natsArgs...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var ev wire.Event
	if err := json.Unmarshal([]byte(out), &ev); err != nil {
		t.Fatalf("stdout %q: %v", out, err)
	}
	if ev.Outcome != pipeline.OutcomeDone || ev.EntryID != "c0ffee00" || ev.Path != "sessions/--tmp--/x.jsonl" || ev.SessionID != "019a48fc-d300-72c8-a6b9-f316c6e71060" {
		t.Errorf("event %+v", ev)
	}
	// A failing job exits 1 and still prints its event.
	file2 := writeSessionFile(t, dir, "y.jsonl")
	data, _ := os.ReadFile(file2)
	_ = os.WriteFile(file2, bytes.Replace(data, []byte("019a48fc-d300"), []byte("019a48fc-d301"), 1), 0o644)
	code, out, _ = runEnqueueCLI(append([]string{file2, "--store-dir", dir, "--wait", "--reason", "fail"}, natsArgs...)...)
	if code != 1 || !strings.Contains(out, `"outcome":"failed"`) || !strings.Contains(out, "model refused") {
		t.Errorf("failed job: exit %d, %s", code, out)
	}
}

func TestEnqueueAlreadyQueued(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	block := make(chan struct{})
	natsArgs := enqueueService(t, dir, block)
	file := writeSessionFile(t, dir, "x.jsonl")
	code, _, errs := runEnqueueCLI(append([]string{file, "--store-dir", dir}, natsArgs...)...)
	if code != 0 || !strings.HasPrefix(errs, "queued: job") {
		t.Fatalf("first: exit %d %q", code, errs)
	}
	// Same session, a different request (forced) while the first is pending: it is not
	// answered by the first job; without --wait it is not queued (exit 1, said so).
	code, _, errs = runEnqueueCLI(append([]string{file, "--store-dir", dir, "--force", "--kind", "compact", "--reason", "again"}, natsArgs...)...)
	if code != 1 || !strings.HasPrefix(errs, "not queued: another request") {
		t.Fatalf("second: exit %d %q", code, errs)
	}
	// With --wait it is queued after the first job ends, and runs.
	type out struct {
		code       int
		stdout, se string
	}
	third := make(chan out, 1)
	waiting := newWatchWriter("waiting: another request's job")
	go func() {
		var o bytes.Buffer
		c := RunEnqueue(context.Background(), &Env{Args: append([]string{file, "--store-dir", dir, "--force", "--wait", "--reason", "again"}, natsArgs...),
			Stdout: &o, Stderr: waiting, Getenv: func(string) string { return "" }})
		third <- out{c, o.String(), waiting.String()}
	}()
	// The first job ends only once the third request waits for it.
	select {
	case <-waiting.seen:
	case r := <-third:
		t.Fatalf("third ended before it waited: exit %d %q %q", r.code, r.se, r.stdout)
	}
	close(block)
	r := <-third
	if r.code != 0 || !strings.Contains(r.se, "waited for another request's job") || !strings.Contains(r.stdout, `"outcome":"done"`) {
		t.Fatalf("third: exit %d %q %q", r.code, r.se, r.stdout)
	}
}

func TestEnqueueBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := writeSessionFile(t, dir, "x.jsonl")
	other := writeSessionFile(t, t.TempDir(), "o.jsonl")
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "exactly one session FILE"},
		{[]string{file, "--kind", "nope", "--store-dir", dir}, "--kind"},
		{[]string{file, "--kind", "branch_summary", "--store-dir", dir}, "needs --to"},
		{[]string{other, "--store-dir", dir}, "not inside the store"},
		{[]string{file, "--store-dir", dir, "--store", "a.b"}, "--store"},
		{[]string{file}, "none of the stores"},
	} {
		code, _, errs := runEnqueueCLI(c.args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d %q, want 2 with %q", c.args, code, errs, c.want)
		}
	}
	if code, out, _ := runEnqueueCLI("--help"); code != 0 || !strings.Contains(out, "Examples:") {
		t.Errorf("--help: %d %q", code, out)
	}
}
