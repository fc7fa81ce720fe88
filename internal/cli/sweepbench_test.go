package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/engine"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/wire"
	"github.com/compactor-dev/compactor/worker"
)

// BenchmarkSweep measures a sweep of a fleet: SWEEP_BENCH_N sessions (default 10,000)
// copied from the corpus with distinct session ids (~150 KB each, written once into
// SWEEP_BENCH_DIR or a temp dir), the real engine's Assessor (tiktoken, the catalog's
// windows), an embedded nats-server. Sub-benchmarks, one sweep each:
//
//   - walk-stat: baseline, filepath.WalkDir and a stat of every file (the floor of a
//     re-sweep);
//   - walk-read: baseline, every file read whole (the I/O floor of a first sweep);
//   - resweep-kv-get: baseline, the previous design's re-sweep: a stat and one KV Get per
//     file;
//   - first: a sweep with an empty memo (every file assessed and remembered);
//   - resweep: the same service sweeping again with nothing changed;
//   - resweep-new-process: a new Service (another process) on the same NATS: loads the
//     memo with its watcher, then finds everything unchanged.
//
// Each reports wall-s, cpu-s (user+sys of the process, nats-server included), peak-heap-MB
// (sampled every 5 ms during the sweep), max-rss-MB (the process's peak so far) and the
// ratio to walk-stat. SWEEP_BENCH_CPUPROFILE=FILE profiles the first sweep alone.
// Run: make bench-sweep (the page cache is warm: the files were just written or read).
// SWEEP_BENCH_COUNTER=estimate assesses with Pi's chars/4 instead of tiktoken.
func BenchmarkSweep(b *testing.B) {
	n := 10000
	if v := os.Getenv("SWEEP_BENCH_N"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	dir := os.Getenv("SWEEP_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	total := makeFleet(b, dir, n)
	b.Logf("%d sessions, %.2f GB in %s", n, float64(total)/1e9, dir)

	var statWall time.Duration
	measure := func(b *testing.B, f func() error) {
		for range b.N {
			runtime.GC()
			peak := sampleHeap()
			cpu0, t0 := cpuTime(), time.Now()
			if err := f(); err != nil {
				b.Fatal(err)
			}
			wall, cpu := time.Since(t0), cpuTime()-cpu0
			b.ReportMetric(wall.Seconds(), "wall-s")
			b.ReportMetric(cpu.Seconds(), "cpu-s")
			b.ReportMetric(float64(peak())/1e6, "peak-heap-MB")
			b.ReportMetric(float64(maxRSS())/1e6, "max-rss-MB")
			if statWall > 0 {
				b.ReportMetric(wall.Seconds()/statWall.Seconds(), "x-walk-stat")
			} else {
				statWall = wall
			}
		}
	}
	b.Run("walk-stat", func(b *testing.B) {
		measure(b, func() error { return walkFiles(dir, func(p string) error { _, err := os.Stat(p); return err }) })
	})
	b.Run("walk-read", func(b *testing.B) {
		measure(b, func() error {
			return walkFiles(dir, func(p string) error { _, err := os.ReadFile(p); return err })
		})
	})

	data := b.TempDir()
	svc, _ := sweepService(b, dir, data, access.NATSConfig{})
	// The other processes are clients of svc's embedded server, with its token.
	local := access.LocalNATS(data, access.NATSConfig{})
	b.Run("first", func(b *testing.B) {
		if b.N > 1 {
			b.Skip("one sweep with an empty memo per run: use -benchtime 1x")
		}
		measure(b, func() error {
			if prof := os.Getenv("SWEEP_BENCH_CPUPROFILE"); prof != "" {
				f, err := os.Create(prof)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			st, err := svc.Sweep(context.Background(), nil)
			if err == nil && st.Assessed != n {
				err = fmt.Errorf("first sweep assessed %d of %d: %s", st.Assessed, n, st)
			}
			b.Log(st)
			return err
		})
	})
	b.Run("resweep", func(b *testing.B) {
		measure(b, func() error {
			st, err := svc.Sweep(context.Background(), nil)
			if err == nil && st.Unchanged != n {
				err = fmt.Errorf("re-sweep: %d of %d unchanged: %s", st.Unchanged, n, st)
			}
			return err
		})
	})
	b.Run("resweep-new-process", func(b *testing.B) {
		measure(b, func() error {
			other, _ := sweepService(b, dir, "", local)
			defer other.Close()
			st, err := other.Sweep(context.Background(), nil)
			if err == nil && st.Unchanged != n {
				err = fmt.Errorf("re-sweep: %d of %d unchanged: %s", st.Unchanged, n, st)
			}
			return err
		})
	})
	b.Run("resweep-kv-get", func(b *testing.B) {
		nc, err := local.Connect()
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		kv, err := js.KeyValue(context.Background(), wire.BucketSweep)
		if err != nil {
			b.Fatal(err)
		}
		// The previous design: a stat and a Get per file, on every core.
		measure(b, func() error {
			var files []string
			if err := walkFiles(dir, func(p string) error { files = append(files, p); return nil }); err != nil {
				return err
			}
			var wg sync.WaitGroup
			sem := make(chan struct{}, 2)
			for _, p := range files {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					_, _ = os.Stat(p)
					rel, _ := filepath.Rel(dir, p)
					_, _ = kv.Get(context.Background(), "f.default."+keyHash(rel))
				})
			}
			wg.Wait()
			return nil
		})
	})
}

// sweepService starts a Service for the fleet: with dataDir, on its own embedded
// nats-server (whose URL it returns); with nc's URL, as a client of that server.
func sweepService(b *testing.B, dir, dataDir string, nc access.NATSConfig) (*pipeline.Service, string) {
	eng, err := engine.New(summarize.NewExtractive(), engine.Settings{Counter: os.Getenv("SWEEP_BENCH_COUNTER")})
	if err != nil {
		b.Fatal(err)
	}
	cfg := pipeline.Config{Stores: []pipeline.Store{{Name: "default", Dir: dir}}, Idle: -1, Assessor: worker.Assessor(eng, worker.PiVersions{}),
		Handler: worker.Handler(eng, worker.PiVersions{}, nil, worker.Queues{}), NATS: nc, DataDir: dataDir, EmbeddedPort: -1}
	svc, err := pipeline.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	if nc.URL == "" {
		b.Cleanup(svc.Close)
	}
	return svc, svc.ClientURL()
}

func walkFiles(dir string, f func(string) error) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || !strings.HasSuffix(p, ".jsonl") {
			return err
		}
		return f(p)
	})
}

// fleetSources average ~155 KB: five sessions of 80-100 KB and one of 440 KB.
var fleetSources = []string{"10-tricky-parallel", "11-tricky-trailing-toolresults", "12-tricky-custom-message-cut",
	"09-ends-with-compaction", "02-tools-parallel-errors-images", "07-long-outputs"}

// makeFleet writes n sessions in Pi's layout (100 project directories) unless dir already
// holds them, with distinct session ids and an mtime an hour ago; it returns their bytes.
func makeFleet(b *testing.B, dir string, n int) int64 {
	var srcs [][]byte
	for _, name := range fleetSources {
		data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "corpus", name+".jsonl"))
		if err != nil {
			b.Fatal(err)
		}
		srcs = append(srcs, data)
	}
	old := time.Now().Add(-time.Hour)
	var total int64
	for i := range n {
		id := fmt.Sprintf("019b%04x-0000-7000-8000-%012x", i%65536, i)
		p := filepath.Join(dir, fmt.Sprintf("--home-dev-p%02d--", i%100), "2026-01-01T00-00-00-000Z_"+id+".jsonl")
		src := srcs[i%len(srcs)]
		if fi, err := os.Stat(p); err == nil && fi.Size() > int64(len(src)) {
			total += fi.Size()
			continue
		}
		nl := bytes.IndexByte(src, '\n')
		hdr := string(src[:nl])
		j := strings.Index(hdr, `"id":"`)
		k := strings.IndexByte(hdr[j+6:], '"')
		// Every text block gets the session's mark, so that no two sessions share a
		// message: the engine's count cache (keyed by content) must not flatter the
		// figures with the copies' identical entries.
		body := bytes.ReplaceAll(src[nl:], []byte(`"text":"`), []byte(`"text":"[s`+strconv.Itoa(i)+`] `))
		data := append([]byte(hdr[:j+6]+id+hdr[j+6+k:]), body...)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			b.Fatal(err)
		}
		_ = os.Chtimes(p, old, old)
		total += int64(len(data))
	}
	return total
}

// keyHash is the memo's key for a path (pipeline's sweepKey: sha256, 20 bytes in hex).
func keyHash(rel string) string {
	sum := sha256.Sum256([]byte(filepath.ToSlash(rel)))
	return hex.EncodeToString(sum[:20])
}

// maxRSS is the process's peak resident set so far (the embedded nats-server included).
func maxRSS() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Maxrss * 1024
}

// sampleHeap samples the live heap every 5 ms until the returned function is called,
// which returns the peak.
func sampleHeap() func() uint64 {
	stop := make(chan struct{})
	done := make(chan uint64)
	go func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		var peak uint64
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			peak = max(peak, s[0].Value.Uint64())
			select {
			case <-stop:
				done <- peak
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 { close(stop); return <-done }
}
