// Package pigolden finds the project's Pi harness (interop/pi/pi) and the goldens it wrote
// for each Pi version of the matrix (testdata/expected/<version>/), for tests that compare
// compactor with the real Pi.
//
// Goldens of version V for a corpus file named NAME (see CorpusFiles):
//
//	NAME.context.json                 interop/pi/pi context FILE
//	NAME.cut-20000.json, -5000, -1000 interop/pi/pi cut FILE --keep-recent-tokens K
//	NAME.cut-override.json            cut with testdata/pi-settings/model-overrides.json
//	NAME.error.json                   instead of all of these when Pi cannot load the file
package pigolden

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Kinds are the goldens each loadable corpus file has, in the order the harness writes them.
var Kinds = []string{"context", "cut-20000", "cut-5000", "cut-1000", "cut-override"}

// Root is the repository's root: the nearest directory above the working directory that
// holds go.mod and interop/pi.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("pigolden: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "interop", "pi", "versions.txt")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("pigolden: no interop/pi/versions.txt above the working directory")
		}
		dir = parent
	}
}

// Harness is the harness script: $PI_HARNESS, else <root>/interop/pi/pi. The Pi version it
// runs is $PI_VERSION (unset: the newest of the matrix), which child processes inherit.
func Harness() (string, error) {
	if h := os.Getenv("PI_HARNESS"); h != "" {
		return filepath.Abs(h)
	}
	root, err := Root()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "interop", "pi", "pi"), nil
}

// Versions lists the matrix (interop/pi/versions.txt), oldest first; the last is the default.
func Versions() ([]string, error) {
	root, err := Root()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(root, "interop", "pi", "versions.txt"))
	if err != nil {
		return nil, fmt.Errorf("pigolden: %w", err)
	}
	defer f.Close()
	var vs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			vs = append(vs, l)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("pigolden: versions.txt: %w", err)
	}
	if len(vs) == 0 {
		return nil, errors.New("pigolden: versions.txt lists no version")
	}
	return vs, nil
}

// File is one corpus file and the name its goldens carry.
type File struct {
	Name string // golden name: the base name; "bad-" before bad/ files, "gen-V-" before gen-V/ files
	Rel  string // path under testdata/corpus (the goldens' "file" field)
	Path string // absolute path
}

// CorpusFiles lists every session file the goldens cover, as interop/pi/goldens.mjs does:
// testdata/corpus/*.jsonl, bad/, pi-generated/, pi-repo/ and every gen-<version>/.
func CorpusFiles() ([]File, error) {
	root, err := Root()
	if err != nil {
		return nil, err
	}
	corpus := filepath.Join(root, "testdata", "corpus")
	dirs := []struct{ dir, prefix string }{{".", ""}, {"bad", "bad-"}, {"pi-generated", ""}, {"pi-repo", ""}}
	gens, _ := filepath.Glob(filepath.Join(corpus, "gen-*"))
	sort.Strings(gens)
	for _, g := range gens {
		dirs = append(dirs, struct{ dir, prefix string }{filepath.Base(g), filepath.Base(g) + "-"})
	}
	var out []File
	for _, d := range dirs {
		m, err := filepath.Glob(filepath.Join(corpus, d.dir, "*.jsonl"))
		if err != nil {
			return nil, fmt.Errorf("pigolden: %w", err)
		}
		sort.Strings(m)
		for _, p := range m {
			rel, _ := filepath.Rel(corpus, p)
			out = append(out, File{Name: d.prefix + strings.TrimSuffix(filepath.Base(p), ".jsonl"), Rel: rel, Path: p})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("pigolden: no session files under %s", corpus)
	}
	return out, nil
}

// Path is the golden of a kind ("context", "cut-5000", "error", ...) for a file and version.
func Path(version, name, kind string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "testdata", "expected", version, name+"."+kind+".json"), nil
}

// Load decodes one golden into v. A file that Pi refuses has only an "error" golden: Load of
// another kind then returns an error wrapping os.ErrNotExist.
func Load(version, name, kind string, v any) error {
	p, err := Path(version, name, kind)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("pigolden: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("pigolden: %s: %w", p, err)
	}
	return nil
}
