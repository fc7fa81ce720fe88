package sessionio

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkHeaderID is the admission's read of a job's file header (pipeline's session-id
// check) against the read of the same file a compact job's assessment makes
// (ReadTailWith, NeedMessages|NeedModel), on files of 1 and 16 MB with a short and an 8 KB
// header: the header read is to cost a small part of the job's own.
func BenchmarkHeaderID(b *testing.B) {
	for _, shape := range []struct {
		name      string
		cwd       int // bytes of the header's cwd
		fileBytes int
	}{
		{"1MB-short-header", 20, 1 << 20},
		{"16MB-short-header", 20, 16 << 20},
		{"16MB-8KB-header", 8 << 10, 16 << 20},
	} {
		file := filepath.Join(b.TempDir(), "s.jsonl")
		writeBenchSession(b, file, shape.cwd, shape.fileBytes)
		b.Run(shape.name+"/header", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if id, err := Named(file).HeaderID(); err != nil || id != "bench-1" {
					b.Fatal(id, err)
				}
			}
		})
		b.Run(shape.name+"/assess", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ReadTailWith(file, NeedMessages|NeedModel, TailOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// writeBenchSession writes a session of user and assistant messages of about size bytes.
func writeBenchSession(b *testing.B, file string, cwd, size int) {
	f, err := os.Create(file)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	n, _ := fmt.Fprintf(w, `{"type":"session","version":3,"id":"bench-1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/%s"}`+"\n", strings.Repeat("w", cwd))
	text := strings.Repeat("lorem ipsum ", 80)
	parent := "null"
	for i := 0; n < size; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		id := fmt.Sprintf("e%07d", i)
		k, _ := fmt.Fprintf(w, `{"type":"message","id":"%s","parentId":%s,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"%s","content":[{"type":"text","text":"%s"}]}}`+"\n", id, parent, role, text)
		n += k
		parent = `"` + id + `"`
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}
