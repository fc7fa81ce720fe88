package cli

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The configuration files the repository ships (deploy/, deploy/fleet/, configs/) name
// flags of `compactor run` only, and none that is deprecated: deploy/fleet's host files
// set the former --shutdown-timeout, which warned at every start.
func TestShippedConfigsUseCurrentFlags(t *testing.T) {
	t.Parallel()
	var sets []*flag.FlagSet
	env := &Env{Args: []string{"run", "--help"}, Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" },
		OnFlagSet: func(fs *flag.FlagSet, _, _ string) { sets = append(sets, fs) }}
	Run(context.Background(), env)
	flags := map[string]*flag.Flag{}
	for _, fs := range sets {
		fs.VisitAll(func(f *flag.Flag) { flags[f.Name] = f })
	}
	var files []string
	for _, pat := range []string{"../../deploy/*.json", "../../deploy/fleet/*.json", "../../configs/example.json"} {
		m, _ := filepath.Glob(pat)
		files = append(files, m...)
	}
	sort.Strings(files)
	if len(files) < 4 {
		t.Fatalf("found %d configuration files: %v", len(files), files)
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var cfg map[string]any
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		for key := range cfg {
			f := flags[key]
			switch {
			case strings.HasPrefix(key, "_"):
			case f == nil:
				t.Errorf("%s: %q is not a flag of compactor run", file, key)
			case strings.Contains(f.Usage, "deprecated"):
				t.Errorf("%s: %q is deprecated: %s", file, key, f.Usage)
			}
		}
	}
}
