package experiment

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/compactor-dev/compactor/tokenize"
)

// benchSessions is the size of the benchmark directory.
const benchSessions = 2000

// benchDir fills a directory with benchSessions sessions made from the v3 corpus files
// (every numbered file but 08-large, which alone is 3.6 MB, plus Pi's synthetic session),
// each copy with its own session id, spread over subdirectories of 100.
func benchDir(b *testing.B) (string, int64) {
	b.Helper()
	var srcs [][]byte
	names := []string{"01-minimal", "02-tools-parallel-errors-images", "03-branches-labels-name", "04-model-thinking-changes",
		"05-compactions", "06-custom-bash-entries", "07-long-outputs", "09-ends-with-compaction", "10-tricky-parallel",
		"11-tricky-trailing-toolresults", "12-tricky-custom-message-cut", "pi-generated/synthetic-v3-session"}
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(corpusDir, n+".jsonl"))
		if err != nil {
			b.Fatal(err)
		}
		srcs = append(srcs, data)
	}
	dir := b.TempDir()
	var total int64
	for i := range benchSessions {
		src := srcs[i%len(srcs)]
		header, rest, _ := bytes.Cut(src, []byte("\n"))
		// Re-id the session: the header's "id" is the first one on the line.
		at := bytes.Index(header, []byte(`"id":"`)) + len(`"id":"`)
		end := at + bytes.IndexByte(header[at:], '"')
		data := fmt.Appendf(nil, "%s%s-%d%s\n%s", header[:at], header[at:end], i, header[end:], rest)
		sub := filepath.Join(dir, fmt.Sprintf("d%02d", i/100))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("s%04d.jsonl", i)), data, 0o644); err != nil {
			b.Fatal(err)
		}
		total += int64(len(data))
	}
	return dir, total
}

func benchExperiment(b *testing.B, cfg Config) {
	dir, size := benchDir(b)
	// Load the tiktoken vocabulary before timing.
	if _, err := tokenize.New(tokenize.CounterTiktoken, ""); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	b.ResetTimer()
	sessions := 0
	for b.Loop() {
		r, err := Run(context.Background(), dir, cfg)
		if err != nil {
			b.Fatal(err)
		}
		if len(r.Errors) > 0 || r.Sessions != benchSessions {
			b.Fatalf("%d sessions, errors %v", r.Sessions, r.Errors)
		}
		sessions += r.Sessions
	}
	b.ReportMetric(float64(sessions)/b.Elapsed().Seconds(), "sessions/s")
}

// BenchmarkExperimentSnapshot: 2,000 sessions, three policies, keepRecentTokens 5000 and
// 20000, tiktoken.
func BenchmarkExperimentSnapshot(b *testing.B) {
	benchExperiment(b, Config{Counter: tokenize.CounterTiktoken, KeepRecentTokens: []int{5000, 20000}})
}

// BenchmarkExperimentReplay: the same plus a replay of every session with a 64000-token
// window and the extractive summarizer.
func BenchmarkExperimentReplay(b *testing.B) {
	benchExperiment(b, Config{Counter: tokenize.CounterTiktoken, KeepRecentTokens: []int{5000, 20000}, Replay: true, ContextWindow: 64000})
}
