package sessionio_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
)

// TestCheckLoadsBOM: Pi 1.6 refuses a header line with a byte-order mark (its loader parses
// each line as it is), Pi 0.73 trimmed it away; blank lines before the header are skipped by
// both.
func TestCheckLoadsBOM(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	header := `{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/p"}`
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bom := write("bom.jsonl", "\ufeff"+header+"\n")
	err := sessionio.CheckLoads(bom, pi.MustParseRelease("0.78.1"))
	var fe *sessionio.FileError
	if !errors.As(err, &fe) || fe.Line != 1 || !errors.Is(err, sessionio.ErrPaddedHeader) || !strings.Contains(err.Error(), "byte-order mark") {
		t.Fatalf("Pi 1.6, BOM: %v", err)
	}
	if err := sessionio.CheckLoads(bom, pi.MustParseRelease("0.78.0")); err != nil {
		t.Fatalf("Pi 0.78.0 reads a BOM'd file: %v", err)
	}
	nbsp := write("nbsp.jsonl", "\n  \n\u00a0"+header+"\n")
	if err := sessionio.CheckLoads(nbsp, pi.Latest); !errors.As(err, &fe) || fe.Line != 3 {
		t.Fatalf("Pi 1.6, a no-break space on line 3: %v", err)
	}
	for name, content := range map[string]string{"plain": header + "\n", "blank-first": "\n\r\n" + header + "\r\n", "empty": "", "garbage": "hello\n"} {
		if err := sessionio.CheckLoads(write(name+".jsonl", content), pi.Latest); err != nil {
			t.Errorf("%s: %v (what both Pis refuse is left to the read)", name, err)
		}
	}
}
