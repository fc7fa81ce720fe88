package cli

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The Pi extension's Node engine matches its dependencies': every package it installs for
// its users (its dependencies and theirs, not its development ones) runs on the oldest
// Node it says it runs on (package.json's engines.node), and on the newest major. npm ci
// warned EBADENGINE when a dependency wanted Node 22 and the extension said 20.6.
func TestExtensionEngineMatchesDependencies(t *testing.T) {
	t.Parallel()
	var pkg struct {
		Engines map[string]string `json:"engines"`
	}
	readJSON(t, "../../extensions/pi/package.json", &pkg)
	ours := pkg.Engines["node"]
	oldest, ok := rangeMinimum(ours)
	if !ok {
		t.Fatalf("extensions/pi/package.json: engines.node %q is not a >=X.Y.Z range", ours)
	}
	var lock struct {
		Packages map[string]struct {
			Version string            `json:"version"`
			Dev     bool              `json:"dev"`
			Engines map[string]string `json:"engines"`
		} `json:"packages"`
	}
	readJSON(t, "../../extensions/pi/package-lock.json", &lock)
	checked := 0
	for name, p := range lock.Packages {
		if name == "" || p.Dev {
			continue
		}
		checked++
		r, ok := p.Engines["node"]
		if !ok {
			continue
		}
		for _, v := range [][3]int{oldest, {30, 0, 0}} {
			if !satisfies(r, v) {
				t.Errorf("%s %s wants Node %q, which %d.%d.%d does not meet (the extension says %q)", name, p.Version, r, v[0], v[1], v[2], ours)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no runtime dependency in the lock file")
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// rangeMinimum is X.Y.Z of ">=X.Y.Z".
func rangeMinimum(r string) ([3]int, bool) {
	r = strings.TrimSpace(r)
	if !strings.HasPrefix(r, ">=") {
		return [3]int{}, false
	}
	return parseVersion(strings.TrimSpace(r[2:]))
}

// parseVersion reads X, X.Y, X.Y.Z (x for a missing or wild part: 0).
func parseVersion(s string) ([3]int, bool) {
	var v [3]int
	parts := strings.Split(strings.TrimPrefix(s, "v"), ".")
	if len(parts) > 3 {
		return v, false
	}
	for i, p := range parts {
		if p == "x" || p == "X" || p == "*" {
			break
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

func cmpVersion(a, b [3]int) int {
	for i := range a {
		if a[i] != b[i] {
			return a[i] - b[i]
		}
	}
	return 0
}

// satisfies reports whether v meets an npm engines range: alternatives (||) of
// comparators (>=, >, <=, <, ^, a bare X or X.Y or X.x: that major or minor), each a
// conjunction of space-separated ones.
func satisfies(r string, v [3]int) bool {
	for _, alt := range strings.Split(r, "||") {
		ok := true
		fields := strings.Fields(strings.NewReplacer(">= ", ">=", "> ", ">", "<= ", "<=", "< ", "<", "^ ", "^").Replace(strings.TrimSpace(alt)))
		for _, c := range fields {
			if !meets(c, v) {
				ok = false
				break
			}
		}
		if ok && len(fields) > 0 {
			return true
		}
	}
	return false
}

func meets(c string, v [3]int) bool {
	if c == "*" || c == "" {
		return true
	}
	for _, op := range []string{">=", "<=", ">", "<", "^", "~", "="} {
		if !strings.HasPrefix(c, op) {
			continue
		}
		w, ok := parseVersion(c[len(op):])
		if !ok {
			return false
		}
		d := cmpVersion(v, w)
		switch op {
		case ">=":
			return d >= 0
		case "<=":
			return d <= 0
		case ">":
			return d > 0
		case "<":
			return d < 0
		case "^":
			return d >= 0 && v[0] == w[0]
		case "~":
			return d >= 0 && v[0] == w[0] && v[1] == w[1]
		case "=":
			return d == 0
		}
	}
	// A bare version: its major (X, X.x) or its minor (X.Y).
	w, ok := parseVersion(c)
	if !ok {
		return false
	}
	parts := strings.Split(c, ".")
	if len(parts) >= 2 && parts[1] != "x" && parts[1] != "X" && parts[1] != "*" {
		return v[0] == w[0] && v[1] == w[1]
	}
	return v[0] == w[0]
}
