package sessionio

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkFileOpen is what confinement adds to each of a job's opens of its file (about
// five: the format check, the stat, the read, the write check, the append): one open for
// reading, its fstat and the checks, by name (os.OpenFile, as before) and beneath the
// root with openat2 and with os.Root. Run with -count 8 and compare the medians of each
// round: docs/security.md gives the figures.
func BenchmarkFileOpen(b *testing.B) {
	root, _ := filepath.EvalSymlinks(b.TempDir())
	rel := filepath.Join("--proj--", "2026-01-01T00-00-00-000Z_s.jsonl")
	if err := os.MkdirAll(filepath.Join(root, "--proj--"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, rel), []byte(hdr+"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, f *File) {
		for b.Loop() {
			fh, _, err := f.open(os.O_RDONLY)
			if err != nil {
				b.Fatal(err)
			}
			fh.Close()
		}
	}
	b.Run("by-name", func(b *testing.B) { run(b, Named(filepath.Join(root, rel))) })
	for _, m := range []ConfineMode{ConfineOpenat2, ConfineRoot} {
		b.Run(map[ConfineMode]string{ConfineOpenat2: "openat2", ConfineRoot: "os.Root"}[m], func(b *testing.B) {
			old, err := SetConfinement(m)
			if err != nil {
				b.Skip(err)
			}
			defer SetConfinement(old) //nolint:errcheck // the process's mode again
			run(b, Beneath(root, rel))
		})
	}
}
