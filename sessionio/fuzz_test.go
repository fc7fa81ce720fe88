package sessionio_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/picontext"
)

// FuzzParse feeds arbitrary bytes to the reader. It must never panic or hang; it either
// fails with a FileError naming one of the documented reasons, or returns a session whose
// every path can be walked and turned into a context.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("../testdata/corpus/bad/*.jsonl")
	small, _ := filepath.Glob("../testdata/corpus/1*.jsonl")
	for _, p := range append(append(seeds, small...), "../testdata/corpus/01-minimal.jsonl", "../testdata/corpus/pi-generated/synthetic-v3-session.jsonl") {
		if data, err := os.ReadFile(p); err == nil && len(data) < 20_000 {
			f.Add(data)
		}
	}
	f.Add([]byte(`{"type":"session","version":3,"id":"s1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/x"}` + "\n" +
		`{"type":"message","id":"a","parentId":"a","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"cycle","timestamp":1}}` + "\n"))
	pi073 := pi.MustParseRelease("0.73.1")
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := sessionio.Parse(data, "fuzz.jsonl")
		if err != nil {
			var fe *sessionio.FileError
			if !errors.As(err, &fe) || !(errors.Is(err, sessionio.ErrEmpty) || errors.Is(err, sessionio.ErrNoHeader) || errors.Is(err, sessionio.ErrCycle)) {
				t.Fatalf("unexpected error %T %v", err, err)
			}
			return
		}
		for _, e := range s.Entries {
			p, err := s.Path(e.ID)
			if err != nil {
				t.Fatalf("path to %q: %v", e.ID, err)
			}
			c := picontext.Build(p, pi073)
			if len(c.Messages) != len(c.EntryIDs) {
				t.Fatalf("messages %d, entry ids %d", len(c.Messages), len(c.EntryIDs))
			}
		}
	})
}
