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
//
// They are kept in a golden store (interop/pi/lib/store.mjs, Read): a pinned release's
// directory holds what differs from the pinned release before it, and _index.json names the
// release whose directory holds each of its goldens.
//
// make interop-releases points the tests at any published release: PIGOLDEN_VERSIONS (a
// comma-separated list instead of versions.txt), PIGOLDEN_EXPECTED (the directory holding
// <version>/ goldens instead of testdata/expected) and PIGOLDEN_CORPUS_EXTRA (a directory of
// own-<version>/ sessions the release wrote itself, added to the corpus).
package pigolden

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
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
// PIGOLDEN_VERSIONS, when set, replaces it.
func Versions() ([]string, error) {
	if env := os.Getenv("PIGOLDEN_VERSIONS"); env != "" {
		var vs []string
		for _, v := range strings.Split(env, ",") {
			if v = strings.TrimSpace(v); v != "" {
				vs = append(vs, v)
			}
		}
		return vs, nil
	}
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
// testdata/corpus/*.jsonl, bad/, pi-generated/, pi-repo/, every gen-<version>/ and the
// own-<version>/ directories of PIGOLDEN_CORPUS_EXTRA.
func CorpusFiles() ([]File, error) {
	root, err := Root()
	if err != nil {
		return nil, err
	}
	corpus := filepath.Join(root, "testdata", "corpus")
	type dir struct{ base, dir, prefix string }
	dirs := []dir{{corpus, ".", ""}, {corpus, "bad", "bad-"}, {corpus, "pi-generated", ""}, {corpus, "pi-repo", ""}}
	gens := map[string]string{} // gen-<version> or own-<version> → the directory holding it
	for _, base := range []struct{ dir, glob string }{{corpus, "gen-*"}, {os.Getenv("PIGOLDEN_CORPUS_EXTRA"), "own-*"}} {
		if base.dir == "" {
			continue
		}
		m, _ := filepath.Glob(filepath.Join(base.dir, base.glob))
		for _, g := range m {
			gens[filepath.Base(g)] = base.dir
		}
	}
	var names []string
	for g := range gens {
		names = append(names, g)
	}
	sort.Strings(names)
	for _, g := range names {
		dirs = append(dirs, dir{gens[g], g, g + "-"})
	}
	var out []File
	for _, d := range dirs {
		m, err := filepath.Glob(filepath.Join(d.base, d.dir, "*.jsonl"))
		if err != nil {
			return nil, fmt.Errorf("pigolden: %w", err)
		}
		sort.Strings(m)
		for _, p := range m {
			rel, _ := filepath.Rel(d.base, p)
			out = append(out, File{Name: d.prefix + strings.TrimSuffix(filepath.Base(p), ".jsonl"), Rel: rel, Path: p})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("pigolden: no session files under %s", corpus)
	}
	return out, nil
}

// Expected is the directory of the context and cut goldens: PIGOLDEN_EXPECTED, else
// testdata/expected.
func Expected() (string, error) {
	if env := os.Getenv("PIGOLDEN_EXPECTED"); env != "" {
		return filepath.Abs(env)
	}
	root, err := Root()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "testdata", "expected"), nil
}

// Bytes is the golden of a kind ("context", "cut-5000", "error", ...) for a file and version.
// A file that Pi refuses has only an "error" golden: Bytes of another kind then returns an
// error wrapping os.ErrNotExist.
func Bytes(version, name, kind string) ([]byte, error) {
	dir, err := Expected()
	if err != nil {
		return nil, err
	}
	return Read(dir, version, name+"."+kind+".json")
}

// Load decodes one golden into v (see Bytes).
func Load(version, name, kind string, v any) error {
	b, err := Bytes(version, name, kind)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("pigolden: %s %s.%s: %w", version, name, kind, err)
	}
	return nil
}

// Names lists the goldens of version under dir (a golden store), sorted.
func Names(dir, version string) ([]string, error) {
	index, err := readIndex(dir, version)
	if err != nil {
		return nil, err
	}
	var names []string
	if index != nil {
		for n := range index {
			names = append(names, n)
		}
	} else {
		ents, err := os.ReadDir(filepath.Join(dir, version))
		if err != nil {
			return nil, fmt.Errorf("pigolden: %w", err)
		}
		for _, e := range ents {
			if !e.IsDir() {
				names = append(names, e.Name())
			}
		}
	}
	sort.Strings(names)
	return names, nil
}

// Read is the golden called name of version from dir, a golden store
// (interop/pi/lib/store.mjs): the bytes the release named by dir/version/_index.json stored,
// with that release's number read as version's where it names the release (AsVersion);
// without an index, dir/version/name itself.
func Read(dir, version, name string) ([]byte, error) {
	index, err := readIndex(dir, version)
	if err != nil {
		return nil, err
	}
	holder := version
	if index != nil {
		h, ok := index[name]
		if !ok {
			return nil, fmt.Errorf("pigolden: %s/%s: no such golden: %w", version, name, os.ErrNotExist)
		}
		holder = h
	}
	b, err := os.ReadFile(filepath.Join(dir, holder, name))
	if err != nil {
		return nil, fmt.Errorf("pigolden: %w", err)
	}
	return AsVersion(b, holder, version), nil
}

// AsVersion is a golden stored by release holder read as release version's: the
// "piVersion":"<holder>" field and "Pi <holder>" in messages name version instead (a path such
// as gen-<holder>/ is left alone), as interop/pi/lib/store.mjs reads it.
func AsVersion(b []byte, holder, version string) []byte {
	if holder == version {
		return b
	}
	b = bytes.ReplaceAll(b, []byte(`"piVersion":"`+holder+`"`), []byte(`"piVersion":"`+version+`"`))
	if !bytes.Contains(b, []byte("Pi "+holder)) {
		return b
	}
	re := regexp.MustCompile(`\bPi ` + regexp.QuoteMeta(holder) + `([^0-9.]|\.[^0-9]|\.?$)`)
	return re.ReplaceAll(b, []byte("Pi "+version+"${1}"))
}

// indexes caches the indexes read (tests read thousands of goldens; an index does not change
// while they run).
var indexes sync.Map // dir/version → map[string]string (nil: none)

// readIndex is dir/version/_index.json's golden → holder map (nil without an index).
func readIndex(dir, version string) (map[string]string, error) {
	key := filepath.Join(dir, version)
	if ix, ok := indexes.Load(key); ok {
		return ix.(map[string]string), nil
	}
	ix, err := loadIndex(dir, version)
	if err == nil {
		indexes.Store(key, ix)
	}
	return ix, err
}

func loadIndex(dir, version string) (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, version, "_index.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pigolden: %w", err)
	}
	var ix struct {
		Goldens map[string]string `json:"goldens"`
	}
	if err := json.Unmarshal(b, &ix); err != nil {
		return nil, fmt.Errorf("pigolden: %s/_index.json: %w", version, err)
	}
	return ix.Goldens, nil
}
