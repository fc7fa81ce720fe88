package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The committed reference is what the code generates: a flag, a default, a description or
// an environment variable changed without `make configref` fails here.
func TestConfigReferenceUpToDate(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	want, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile(filepath.Join(root, Output))
	if err != nil {
		t.Fatal(err)
	}
	if string(have) != want {
		hl, wl := strings.Split(string(have), "\n"), strings.Split(want, "\n")
		for i := 0; i < len(hl) || i < len(wl); i++ {
			var h, w string
			if i < len(hl) {
				h = hl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if h != w {
				t.Fatalf("%s is out of date (run `make configref`); first difference at line %d:\ncommitted: %s\ngenerated: %s", Output, i+1, h, w)
			}
		}
	}
	// The reference covers what an operator sets most: spot-check that it is not empty.
	for _, s := range []string{"### compactor run", "`--sweep-retry-base`", "`--replicas`", "`COMPACTOR_DATA_DIR`", "`OPENAI_API_KEY`"} {
		if !strings.Contains(want, s) {
			t.Errorf("reference lacks %s", s)
		}
	}
}
