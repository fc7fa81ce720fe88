//go:build chaos

package chaos

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/internal/natstest"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/wire"
)

// settle checks the fleet after a scenario: every file only grew, no leaf was compacted
// twice, every session over budget was compacted exactly once (want), and Pi loads them.
func settle(t *testing.T, name string, f *fleet, want func(path string) int) map[string]int {
	t.Helper()
	counts := f.verify(t)
	var files []string
	total := 0
	for p, n := range counts {
		files = append(files, p)
		total += n
		if w := want(p); w >= 0 && n != w {
			t.Errorf("%s: %d compactions, want %d", p, n, w)
		}
	}
	sort.Strings(files)
	t0 := time.Now()
	loaded := piLoad(t, files, counts)
	figures.add("%s: %d files checked byte for byte (only appends), %d compactions, 0 leaves compacted twice: %v; Pi loaded %d/%d files in %s",
		name, len(files), total, !t.Failed(), loaded, len(files), time.Since(t0).Round(time.Second))
	return counts
}

// Workers are SIGKILLed in a loop while they work 300 sessions against a slow endpoint
// (0.3-1.2 s a request); new workers take their place. Every session is compacted exactly
// once, and every job ends.
func TestWorkerKillLoop(t *testing.T) {
	const n = 300
	f := newFleet(t, n)
	llm := newEndpoint(t)
	llm.llm.SetDefault(fakellm.Behavior{Latency: 700 * time.Millisecond})
	secured := startNATS(t)
	nc, js := connect(t, secured)
	defer nc.Close()
	key, logs := keyFile(t), t.TempDir()

	start := time.Now()
	workers := []*proc{compactor(t, logs, workerArgs(secured, f.dir, llm.url, key)...), compactor(t, logs, workerArgs(secured, f.dir, llm.url, key)...)}
	waitServed(t, js)
	if st := sweepStats(t, logs, sweepArgs(secured, f.dir)...); st.Enqueued != n {
		t.Fatalf("sweep enqueued %d of %d: %s", st.Enqueued, n, st)
	}
	kills := 0
	deadline := time.Now().Add(4 * time.Minute)
	for {
		q, err := queued(js)
		if err == nil && q == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs still queued after 4 minutes and %d kills", q, kills)
		}
		time.Sleep(time.Duration(1500+rand.IntN(2000)) * time.Millisecond)
		if q < 10 {
			continue // let the last jobs finish
		}
		i := rand.IntN(len(workers))
		workers[i].kill()
		kills++
		workers[i] = compactor(t, logs, workerArgs(secured, f.dir, llm.url, key)...)
	}
	took := time.Since(start)
	for _, w := range workers {
		w.stop()
	}
	out := outcomes(t, js)
	dl := deadLetters(t, js)
	figures.add("worker kill loop: %d sessions, 2 workers, %d SIGKILLs, all jobs ended in %s; final events %v; dead letters %d; LLM requests %d",
		n, kills, took.Round(time.Second), out, dl, llm.llm.Count())
	if dl != 0 {
		t.Errorf("%d dead letters", dl)
	}
	settle(t, "worker kill loop", f, func(string) int { return 1 })
}

// A three-node cluster with every stream and bucket at three replicas: the node leading
// COMPACTOR_JOBS is SIGKILLed in the middle of a batch and started again later. Every
// session is compacted exactly once.
func TestClusterNodeKill(t *testing.T) {
	const n = 100
	f := newFleet(t, n)
	llm := newEndpoint(t)
	llm.llm.SetDefault(fakellm.Behavior{Latency: 400 * time.Millisecond})
	nodes, secured := startCluster(t)
	nc, js := connect(t, secured)
	defer nc.Close()
	key, logs := keyFile(t), t.TempDir()

	start := time.Now()
	var workers []*proc
	for range 2 {
		workers = append(workers, compactor(t, logs, workerArgs(secured, f.dir, llm.url, key, "--concurrency", "4")...))
	}
	waitServed(t, js)
	if st := sweepStats(t, logs, sweepArgs(secured, f.dir)...); st.Enqueued != n {
		t.Fatalf("sweep enqueued %d of %d: %s", st.Enqueued, n, st)
	}
	waitFor(t, 2*time.Minute, "a quarter of the sessions compacted", func() bool { return llm.llm.Count() >= n/4 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	s, err := js.Stream(ctx, wire.StreamJobs)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	info := s.CachedInfo()
	if info.Config.Replicas != 3 {
		t.Fatalf("COMPACTOR_JOBS has %d replicas, want 3", info.Config.Replicas)
	}
	leader := info.Cluster.Leader
	var victim *natstest.Node
	for _, nd := range nodes {
		if nd.Spec.Name == leader {
			victim = nd
		}
	}
	if victim == nil {
		t.Fatalf("no node is the leader %q", leader)
	}
	killedAt := time.Now()
	victim.Kill()
	time.Sleep(5 * time.Second)
	victim.Start()
	restartedAfter := time.Since(killedAt)
	waitFor(t, 4*time.Minute, "every job to end", func() bool { q, err := queued(js); return err == nil && q == 0 })
	took := time.Since(start)
	for _, w := range workers {
		w.stop()
	}
	out := outcomes(t, js)
	dl := deadLetters(t, js)
	figures.add("cluster node kill: %d sessions, 3 nodes R3, leader %s SIGKILLed after %d LLM requests and restarted %s later; all jobs ended in %s; final events %v; dead letters %d",
		n, leader, n/4, restartedAfter.Round(time.Second), took.Round(time.Second), out, dl)
	if dl != 0 {
		t.Errorf("%d dead letters", dl)
	}
	settle(t, "cluster node kill", f, func(string) int { return 1 })
}

// The endpoint fails in every way it can, mixed at random over the first requests: 500,
// 429 with Retry-After, hangs (past --llm-timeout), connections cut without an answer,
// empty completions. Every fault is transient: every session is compacted exactly once.
func TestLLMFaults(t *testing.T) {
	const n = 60
	f := newFleet(t, n)
	llm := newEndpoint(t)
	faults := map[string]int{}
	var script []fakellm.Behavior
	for range 70 {
		switch k := rand.IntN(5); k {
		case 0:
			script, faults["500"] = append(script, fakellm.Behavior{Status: 500}), faults["500"]+1
		case 1:
			script, faults["429"] = append(script, fakellm.Behavior{Status: 429, RetryAfter: "1"}), faults["429"]+1
		case 2:
			script, faults["hang"] = append(script, fakellm.Behavior{Hang: true}), faults["hang"]+1
		case 3:
			script, faults["empty"] = append(script, fakellm.Behavior{Empty: true}), faults["empty"]+1
		case 4:
			faults["cut"]++
		}
	}
	llm.llm.Enqueue(script...)
	llm.cuts.Store(int32(faults["cut"]))
	secured := startNATS(t)
	nc, js := connect(t, secured)
	defer nc.Close()
	key, logs := keyFile(t), t.TempDir()
	start := time.Now()
	w := compactor(t, logs, workerArgs(secured, f.dir, llm.url, key)...)
	waitServed(t, js)
	if st := sweepStats(t, logs, sweepArgs(secured, f.dir)...); st.Enqueued != n {
		t.Fatalf("sweep enqueued %d of %d: %s", st.Enqueued, n, st)
	}
	waitFor(t, 4*time.Minute, "every job to end", func() bool { q, err := queued(js); return err == nil && q == 0 })
	took := time.Since(start)
	w.stop()
	out := outcomes(t, js)
	dl := deadLetters(t, js)
	figures.add("LLM faults: %d sessions, faults injected %v (cuts left %d), all jobs ended in %s; final events %v; dead letters %d; LLM requests %d",
		n, faults, llm.cuts.Load(), took.Round(time.Second), out, dl, llm.llm.Count())
	if dl != 0 {
		t.Errorf("%d dead letters:\n%s", dl, tail(w.log, 30))
	}
	settle(t, "LLM faults", f, func(string) int { return 1 })
}

// A store with bad files next to good ones: garbage, a 50 MB line, a torn tail, symlinks
// in and out of the store, a FIFO, a file deleted and one renamed while its job was
// queued. Nothing bad is touched, nothing outside the store is touched, the good sessions
// (and the abandoned torn one, and the renamed one) are compacted once, and every worker
// survives.
func TestBadFiles(t *testing.T) {
	f := newFleet(t, 10)
	llm := newEndpoint(t)
	secured := startNATS(t)
	nc, js := connect(t, secured)
	defer nc.Close()
	key, logs := keyFile(t), t.TempDir()
	src, err := os.ReadFile(filepath.Join("..", "testdata", "corpus", "12-tricky-custom-message-cut.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	want := map[string]int{}
	for p := range f.before {
		want[p] = 1
	}

	garbage := filepath.Join(f.dir, "--bad--", "garbage.jsonl")
	rb := make([]byte, 64<<10)
	for i := range rb {
		rb[i] = byte(rand.IntN(256))
	}
	f.write(t, garbage, rb)
	want[garbage] = 0

	big := filepath.Join(f.dir, "--bad--", "2026-01-01T00-00-00-000Z_019c0000-0000-7000-8000-00000000b160.jsonl")
	var bl bytes.Buffer
	bl.WriteString(`{"type":"session","version":3,"id":"019c0000-0000-7000-8000-00000000b160","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}` + "\n")
	bl.WriteString(`{"type":"message","id":"b1600001","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"`)
	bl.WriteString(strings.Repeat("x", 50<<20))
	bl.WriteString("\n")
	f.write(t, big, bl.Bytes()) // one 50 MB line that never ends: a torn tail, far too big
	want[big] = 0

	torn := f.add(t, "--bad--/2026-01-01T00-00-00-000Z_019c0000-0000-7000-8000-00000000e0a1.jsonl", "019c0000-0000-7000-8000-00000000e0a1", append(append([]byte{}, src...), []byte(`{"type":"message","id":"e0a10001","parentId":"x","mes`)...))
	want[torn] = 1 // abandoned (2 h old): compacted after a newline, as Pi skips the torn line

	outFile := filepath.Join(outside, "2026-01-01T00-00-00-000Z_019c0000-0000-7000-8000-0000000000a1.jsonl")
	f.write(t, outFile, src) // outside the store, reached through a symlink in it
	want[outFile] = 0
	linkOut := filepath.Join(f.dir, "--bad--", "link-out.jsonl")
	if err := os.Symlink(outFile, linkOut); err != nil {
		t.Fatal(err)
	}
	var inside string
	for p := range f.before {
		if strings.HasPrefix(p, f.dir) && !strings.Contains(p, "--bad--") {
			inside = p
			break
		}
	}
	linkIn := filepath.Join(f.dir, "--bad--", "link-in.jsonl")
	if err := os.Symlink(inside, linkIn); err != nil { // an alias of a store file
		t.Fatal(err)
	}
	if err := os.Symlink(f.dir, filepath.Join(outside, "store-link")); err != nil { // into the store from outside
		t.Fatal(err)
	}
	fifo := filepath.Join(f.dir, "--bad--", "fifo.jsonl")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}

	// Jobs queued before any worker runs; then one file is deleted and one renamed. The
	// admin set the streams up (startNATS); the sweep queues for a store no worker serves
	// yet (--allow-unserved).
	deleted := f.add(t, "--q--/2026-01-01T00-00-00-000Z_019c0000-0000-7000-8000-0000000de1e7.jsonl", "019c0000-0000-7000-8000-0000000de1e7", src)
	renamed := f.add(t, "--q--/2026-01-01T00-00-00-000Z_019c0000-0000-7000-8000-00000000ae2a.jsonl", "019c0000-0000-7000-8000-00000000ae2a", src)
	st := sweepStats(t, logs, sweepArgs(secured, f.dir, "--allow-unserved")...)
	for _, j := range []wire.Job{
		{Kind: wire.KindCompact, Store: "default", Path: "--bad--/link-out.jsonl", SessionID: "019c0000-0000-7000-8000-0000000000a1", Reason: "chaos"},
		{Kind: wire.KindCompact, Store: "default", Path: "--bad--/fifo.jsonl", SessionID: "fifo", Reason: "chaos"},
		{Kind: wire.KindCompact, Store: "default", Path: "--bad--/link-in.jsonl", SessionID: f.ids[inside], Reason: "chaos-alias"},
	} {
		if _, err := pipeline.Enqueue(context.Background(), nc, j, false, 10*time.Second); err != nil {
			t.Fatalf("enqueue %s: %v", j.Path, err)
		}
	}
	if err := os.Remove(deleted); err != nil {
		t.Fatal(err)
	}
	delete(f.before, deleted)
	moved := filepath.Join(f.dir, "--q--", "moved", filepath.Base(renamed))
	if err := os.MkdirAll(filepath.Dir(moved), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(renamed, moved); err != nil {
		t.Fatal(err)
	}
	f.before[moved] = f.before[renamed]
	delete(f.before, renamed)
	want[moved] = 1

	start := time.Now()
	w := compactor(t, logs, workerArgs(secured, f.dir, llm.url, key)...)
	waitFor(t, 4*time.Minute, "every job to end", func() bool { q, err := queued(js); return err == nil && q == 0 })
	took := time.Since(start)
	w.stop()
	if code := w.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("worker exit %d\n%s", code, tail(w.log, 30))
	}
	// The FIFO was never opened for reading (it would block), the out-of-store file never
	// touched: both are in f.before / want, checked by settle.
	out := outcomes(t, js)
	dl := deadLetters(t, js)
	figures.add("bad files: %s; jobs ended in %s; final events %v; dead letters %d (the symlink out, the FIFO, the deleted file)",
		st, took.Round(100*time.Millisecond), out, dl)
	if dl != 3 {
		t.Errorf("%d dead letters, want 3 (symlink out of the store, FIFO, deleted file)\n%s", dl, tail(w.log, 40))
	}
	counts := f.verify(t)
	for p, wn := range want {
		if counts[p] != wn {
			t.Errorf("%s: %d compactions, want %d", p, counts[p], wn)
		}
	}
	// Pi loads every session file (not the garbage, the unterminated 50 MB line or the FIFO).
	var files []string
	for p := range f.before {
		if p != garbage && p != big {
			files = append(files, p)
		}
	}
	sort.Strings(files)
	loaded := piLoad(t, files, counts)
	figures.add("bad files: %d files checked byte for byte (garbage, 50 MB line, outside file unchanged; torn tail and renamed file compacted once): %v; Pi loaded %d/%d session files",
		len(f.before), !t.Failed(), loaded, len(files))
}
