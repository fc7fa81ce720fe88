// Command wirets writes the TypeScript side of compactor's wire contract from its Go side:
// extensions/pi/src/wire.gen.ts (the messages' types, the subject roots, stream, bucket and
// version constants, the subject and key builders, and each message's fields with their JSON
// types) and extensions/pi/test/testdata/wire-samples.json (a Go-encoded message of every
// kind and Go's subjects for a set of session ids, which the extension's tests decode and
// check). The Go types are read by reflection: a field's JSON name, its order and its
// omitempty are the contract. What is generated is registered in contract.go.
//
// Run it from the repository root after changing the contract (make wire);
// TestGeneratedUpToDate fails until then.
package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// The generated files' paths from the repository root.
const (
	OutputTS      = "extensions/pi/src/wire.gen.ts"
	OutputSamples = "extensions/pi/test/testdata/wire-samples.json"
)

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	if err := write(root); err != nil {
		fmt.Fprintln(os.Stderr, "wirets:", err)
		os.Exit(1)
	}
}

func write(root string) error {
	ts, err := GenerateTS()
	if err != nil {
		return err
	}
	samples, err := GenerateSamples()
	if err != nil {
		return err
	}
	for path, data := range map[string][]byte{OutputTS: ts, OutputSamples: samples} {
		if err := os.WriteFile(filepath.Join(root, path), data, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}
