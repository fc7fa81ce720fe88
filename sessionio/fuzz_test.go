package sessionio

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
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
	f.Add([]byte(hdr + "\n" + user("a", "a", "cycle") + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data, "fuzz.jsonl")
		if err != nil {
			var fe *FileError
			if !errors.As(err, &fe) || !(errors.Is(err, ErrEmpty) || errors.Is(err, ErrNoHeader) || errors.Is(err, ErrCycle)) {
				t.Fatalf("unexpected error %T %v", err, err)
			}
			return
		}
		for _, e := range s.Entries {
			p, err := s.Path(e.ID)
			if err != nil {
				t.Fatalf("path to %q: %v", e.ID, err)
			}
			c := BuildContext(p, pi073)
			if len(c.Messages) != len(c.EntryIDs) {
				t.Fatalf("messages %d, entry ids %d", len(c.Messages), len(c.EntryIDs))
			}
		}
	})
}
