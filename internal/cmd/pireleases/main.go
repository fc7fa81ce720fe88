// Command pireleases checks compactor against every published release of Pi (make
// interop-releases): it asks the npm registry for the releases of
// @mariozechner/pi-coding-agent (0.73.x) and @earendil-works/pi-coding-agent, and for each
// one installs it with the project's harness (interop/pi/pi), has it write its own generated
// sessions and print its goldens (its context and its cut at keepRecentTokens 20000, 5000,
// 1000 and with per-model settings, for every session of testdata/corpus and of its own),
// and runs the Go tests that compare compactor with them: `compactor context` and `compactor
// plan --policy pi --counter estimate --pi-version <release>` (internal/cli), and every
// compaction compactor appends loading in that release, written as it would write it
// (engine, with the live Pi). It also compares the entry types and message roles
// the release declares with the ones compactor's rules for it know.
//
// It writes the table into docs/compatibility.md (between the releases markers) and exits 0
// when every release matches on everything, 1 when one differs (naming the release and the
// first difference), 2 when a published release is one compactor does not know yet
// (package pi's known releases) though it matches.
//
//	go run ./internal/cmd/pireleases [-releases all|newest|x.y.z,...] [-doc docs/compatibility.md] [-clean]
//
// -clean installs each release into the work directory and removes it once checked (about 350
// MB a release: all of them take some 16 GB in the harness's cache otherwise).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/pi"
)

// Markers around the generated table in the doc.
const (
	beginMarker = "<!-- releases:begin (make interop-releases writes this table) -->"
	endMarker   = "<!-- releases:end -->"
)

func main() {
	which := flag.String("releases", "all", "all (every published release from 0.73.0 on), newest (the newest published), or a comma-separated list")
	doc := flag.String("doc", "docs/compatibility.md", "the document whose table is rewritten (\"\": none)")
	work := flag.String("work", "", "work directory (default: a new temporary one, removed at the end)")
	clean := flag.Bool("clean", false, "install each release into the work directory and remove it once checked, instead of keeping it in the harness's cache")
	flag.Parse()
	if err := run(*which, *doc, *work, *clean, os.Stdout); err != nil {
		var code exitCode
		if errors.As(err, &code) {
			os.Exit(int(code))
		}
		fmt.Fprintln(os.Stderr, "pireleases:", err)
		os.Exit(1)
	}
}

// exitCode ends the program with that code once everything is written.
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit %d", int(c)) }

// result is one release's line of the table.
type result struct {
	Release string
	Known   bool
	// Corpus and Own are the contexts and plans of testdata/corpus and of the release's own
	// generated sessions: matched, of.
	CorpusContexts, CorpusContextsOf, CorpusPlans, CorpusPlansOf int
	OwnContexts, OwnContextsOf, OwnPlans, OwnPlansOf             int
	// Appends: compactions written, and of those loading in the release as planned and
	// written as it would write them.
	Appended, AppendsLoaded int
	// Types: the entry types and roles it declares are the ones compactor's rules for it know.
	TypesOK bool
	// First is the first difference ("" when none).
	First string
	Took  time.Duration
}

func (r *result) ok() bool {
	return r.First == "" && r.TypesOK && r.CorpusContexts == r.CorpusContextsOf && r.CorpusPlans == r.CorpusPlansOf &&
		r.OwnContexts == r.OwnContextsOf && r.OwnPlans == r.OwnPlansOf && r.Appended == r.AppendsLoaded && r.CorpusContextsOf > 0
}

func run(which, doc, work string, clean bool, out io.Writer) error {
	start := time.Now()
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	harness := filepath.Join(root, "interop", "pi", "pi")
	if _, err := os.Stat(harness); err != nil {
		return fmt.Errorf("run it from the repository root: %w", err)
	}
	releases, err := selectReleases(which)
	if err != nil {
		return err
	}
	if work == "" {
		if work, err = os.MkdirTemp("", "compactor-pireleases-"); err != nil {
			return err
		}
		defer os.RemoveAll(work)
	}
	fmt.Fprintf(out, "pireleases: %d releases (%s to %s); work in %s\n", len(releases), releases[0], releases[len(releases)-1], work)
	// The test binaries, built once.
	cliTest, engineTest := filepath.Join(work, "cli.test"), filepath.Join(work, "engine.test")
	for _, b := range []struct{ bin, pkg string }{{cliTest, "./internal/cli/"}, {engineTest, "./engine/"}} {
		if err := command(root, nil, "go", "test", "-c", "-o", b.bin, b.pkg).Run(); err != nil {
			return fmt.Errorf("go test -c %s: %w", b.pkg, err)
		}
	}
	var results []*result
	for _, v := range releases {
		r := check(root, harness, work, cliTest, engineTest, v, clean)
		results = append(results, r)
		status := "ok"
		if !r.ok() {
			status = "DIFFERS: " + r.First
		} else if !r.Known {
			status = "ok, but compactor does not know this release yet"
		}
		fmt.Fprintf(out, "Pi %-8s contexts %d/%d + %d/%d own, plans %d/%d + %d/%d own, appends %d/%d load, types %v (%.0f s): %s\n",
			v, r.CorpusContexts, r.CorpusContextsOf, r.OwnContexts, r.OwnContextsOf, r.CorpusPlans, r.CorpusPlansOf, r.OwnPlans, r.OwnPlansOf,
			r.AppendsLoaded, r.Appended, r.TypesOK, r.Took.Seconds(), status)
	}
	took := time.Since(start)
	if doc != "" && which == "all" {
		if err := writeTable(filepath.Join(root, doc), results, took); err != nil {
			return err
		}
		fmt.Fprintf(out, "pireleases: wrote the table into %s\n", doc)
	}
	return summarize(out, results, took)
}

// selectReleases are the published releases -releases names: all, the newest, or a list.
func selectReleases(which string) ([]string, error) {
	releases, err := published()
	if err != nil {
		return nil, err
	}
	switch which {
	case "all":
	case "newest":
		releases = releases[len(releases)-1:]
	default:
		var want []string
		for _, v := range strings.Split(which, ",") {
			if v = strings.TrimSpace(v); v != "" {
				if !slices.Contains(releases, v) {
					return nil, fmt.Errorf("-releases: %s is not a published release", v)
				}
				want = append(want, v)
			}
		}
		releases = want
	}
	return releases, nil
}

// summarize names each release that differs or is unknown, and returns the exit code
// they call for.
func summarize(out io.Writer, results []*result, took time.Duration) error {
	differ, unknown := 0, 0
	for _, r := range results {
		switch {
		case !r.ok():
			differ++
			annotate(out, "error", fmt.Sprintf("Pi %s differs from compactor: %s (docs/compatibility.md, \"When Pi moves\")", r.Release, r.First))
		case !r.Known:
			unknown++
			annotate(out, "warning", fmt.Sprintf("Pi %s is published and matches, but compactor does not know it yet: add it to pi's knownReleases (docs/compatibility.md, \"When Pi moves\")", r.Release))
		}
	}
	fmt.Fprintf(out, "pireleases: %d releases in %s: %d differ, %d match but are unknown to compactor\n", len(results), took.Round(time.Second), differ, unknown)
	switch {
	case differ > 0:
		return exitCode(1)
	case unknown > 0:
		return exitCode(2)
	}
	return nil
}

// annotate prints a line, as a GitHub Actions annotation when it runs there.
func annotate(out io.Writer, level, msg string) {
	if os.Getenv("GITHUB_ACTIONS") == "true" {
		fmt.Fprintf(out, "::%s::%s\n", level, msg)
		return
	}
	fmt.Fprintf(out, "%s: %s\n", strings.ToUpper(level), msg)
}

// published lists Pi's releases from 0.73.0 on, oldest first, as the registry has them.
func published() ([]string, error) {
	var all []string
	for _, pkg := range []string{"@mariozechner/pi-coding-agent", "@earendil-works/pi-coding-agent"} {
		b, err := exec.Command("npm", "view", pkg, "versions", "--json").Output()
		if err != nil {
			return nil, fmt.Errorf("npm view %s versions: %w", pkg, err)
		}
		var vs []string
		if err := json.Unmarshal(b, &vs); err != nil {
			return nil, fmt.Errorf("npm view %s versions: %w", pkg, err)
		}
		for _, v := range vs {
			r, err := pi.ParseRelease(v)
			if err != nil || strings.Contains(v, "-") || r.Package() != pkg || !atLeast(v, "0.73.0") {
				continue
			}
			all = append(all, v)
		}
	}
	slices.SortFunc(all, compareVersions)
	return slices.Compact(all), nil
}

func atLeast(v, min string) bool { return compareVersions(v, min) >= 0 }

func compareVersions(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < 3; i++ {
		x, _ := strconv.Atoi(pa[i])
		y, _ := strconv.Atoi(pb[i])
		if x != y {
			return x - y
		}
	}
	return 0
}

// check runs every comparison for release v.
func check(root, harness, work, cliTest, engineTest, v string, clean bool) *result {
	start := time.Now()
	rel := pi.MustParseRelease(v)
	r := &result{Release: v, Known: rel.Known()}
	defer func() { r.Took = time.Since(start) }()
	env := []string{"PI_VERSION=" + v, "PI_HARNESS=" + harness}
	if clean {
		home := filepath.Join(work, "pi")
		env = append(env, "COMPACTOR_PI_HOME="+home)
		defer os.RemoveAll(home)
	}
	own := filepath.Join(work, "own", v, "own-"+v)
	expected := filepath.Join(work, "expected")
	for _, step := range [][]string{
		{harness, "install"},
		{harness, "gen", "--out", own, "--compact"},
		{harness, "goldens", "--out", filepath.Join(expected, v), "--gen", own},
	} {
		var stderr bytes.Buffer
		c := command(root, env, step[0], step[1:]...)
		c.Stdout, c.Stderr = io.Discard, &stderr
		if err := c.Run(); err != nil {
			r.fail("interop/pi/pi %s: %v: %s", step[1], err, lastLine(stderr.String()))
			return r
		}
	}
	r.checkTypes(root, harness, env, rel)
	goldens := append(env, "PIGOLDEN_VERSIONS="+v, "PIGOLDEN_EXPECTED="+expected, "PIGOLDEN_CORPUS_EXTRA="+filepath.Dir(own))
	r.checkGoldens(root, cliTest, goldens, v)
	r.checkAppends(root, engineTest, goldens)
	return r
}

// fail records the first difference.
func (r *result) fail(format string, args ...any) {
	if r.First == "" {
		r.First = fmt.Sprintf(format, args...)
	}
}

// checkTypes compares the entry types and roles the release declares with the ones
// compactor's rules for it know.
func (r *result) checkTypes(root, harness string, env []string, rel pi.Release) {
	b, err := command(root, env, harness, "types", "--compact").Output()
	var types struct{ EntryTypes, Roles []string }
	if err == nil {
		err = json.Unmarshal(b, &types)
	}
	switch {
	case err != nil:
		r.fail("interop/pi/pi types: %v", err)
	case !slices.Equal(types.EntryTypes, sessionio.EntryTypes(rel)):
		r.fail("declares the entry types %v; compactor knows %v for it", types.EntryTypes, sessionio.EntryTypes(rel))
	case !slices.Equal(types.Roles, sessionio.Roles(rel)):
		r.fail("declares the message roles %v; compactor knows %v for it", types.Roles, sessionio.Roles(rel))
	default:
		r.TypesOK = true
	}
}

// checkGoldens counts the contexts and plans of the corpus and of the release's own
// sessions that match its goldens.
func (r *result) checkGoldens(root, cliTest string, goldens []string, v string) {
	events, err := goTest(filepath.Join(root, "internal", "cli"), cliTest, goldens, "TestContextMatchesPi$|TestPlanMatchesPiOracle$")
	if err != nil {
		r.fail("internal/cli: %v", err)
	}
	ownPrefix := "/own-" + v + "-"
	for _, ev := range events {
		if ev.Action != "pass" && ev.Action != "fail" {
			continue
		}
		parts := strings.Split(ev.Test, "/")
		ok := ev.Action == "pass"
		isOwn := strings.Contains(ev.Test, ownPrefix)
		switch {
		case parts[0] == "TestContextMatchesPi" && len(parts) == 3:
			count(&r.CorpusContexts, &r.CorpusContextsOf, &r.OwnContexts, &r.OwnContextsOf, isOwn, ok)
		case parts[0] == "TestPlanMatchesPiOracle" && len(parts) == 4:
			count(&r.CorpusPlans, &r.CorpusPlansOf, &r.OwnPlans, &r.OwnPlansOf, isOwn, ok)
		default:
			continue
		}
		if !ok {
			r.fail("%s: %s", strings.Join(parts[1:], " "), firstFailure(events, ev.Test))
		}
	}
}

// checkAppends counts the compactions written, with the live Pi, that load in the
// release as planned.
func (r *result) checkAppends(root, engineTest string, goldens []string) {
	events, err := goTest(filepath.Join(root, "engine"), engineTest, append(goldens, "COMPACTOR_INTEROP=1"), "TestAppendsLoadAsPlannedInEveryPi$")
	if err != nil {
		r.fail("engine: %v", err)
	}
	re := regexp.MustCompile(`Pi \S+: (\d+) compactions written and checked, by the real Pi`)
	for _, ev := range events {
		if m := re.FindStringSubmatch(ev.Output); m != nil {
			r.Appended, _ = strconv.Atoi(m[1])
		}
		if ev.Action == "fail" && ev.Test != "" && strings.Count(ev.Test, "/") <= 1 {
			r.fail("appends: %s", firstFailure(events, ev.Test))
		}
	}
	r.AppendsLoaded = r.Appended
	for _, ev := range events {
		if ev.Action == "fail" && strings.HasPrefix(ev.Test, "TestAppendsLoadAsPlannedInEveryPi/") {
			r.AppendsLoaded = 0 // a failure anywhere: the count checked is not to be trusted
		}
	}
}

func count(ok, of, ownOK, ownOf *int, isOwn, pass bool) {
	if isOwn {
		ok, of = ownOK, ownOf
	}
	*of++
	if pass {
		*ok++
	}
}

// testEvent is one line of `go test -json`.
type testEvent struct {
	Action, Test, Output string
}

// goTest runs a test binary in dir with -test.run and returns its events; a failing test is
// not an error (the events say it), a binary that does not run is.
func goTest(dir, bin string, env []string, run string) ([]testEvent, error) {
	c := command(dir, env, "go", "tool", "test2json", "-t", bin, "-test.run", run, "-test.v=test2json", "-test.count=1", "-test.timeout=20m")
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	runErr := c.Run()
	var events []testEvent
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var ev testEvent
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			events = append(events, ev)
		}
	}
	if len(events) == 0 && runErr != nil {
		return nil, fmt.Errorf("%v: %s", runErr, lastLine(stderr.String()))
	}
	return events, nil
}

// firstFailure is the first line a failed test logged (its t.Error).
func firstFailure(events []testEvent, test string) string {
	for _, ev := range events {
		if ev.Test == test && ev.Action == "output" {
			line := strings.TrimSpace(ev.Output)
			if line != "" && !strings.HasPrefix(line, "=== ") && !strings.HasPrefix(line, "--- ") {
				return line
			}
		}
	}
	return "failed"
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func command(dir string, env []string, name string, args ...string) *exec.Cmd {
	c := exec.Command(name, args...)
	c.Dir = dir
	c.Env = append(os.Environ(), env...)
	return c
}

// writeTable replaces the table between the markers in doc.
func writeTable(doc string, results []*result, took time.Duration) error {
	b, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, beginMarker), strings.Index(s, endMarker)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %q ... %q", doc, beginMarker, endMarker)
	}
	var t strings.Builder
	t.WriteString(beginMarker + "\n")
	fmt.Fprintf(&t, "Measured by `make interop-releases` on %s in %s: every published release, its goldens made by the release itself.\n\n",
		time.Now().UTC().Format("2006-01-02"), took.Round(time.Second))
	t.WriteString("| Pi release | served as | contexts (corpus) | plans (corpus) | contexts (its own sessions) | plans (its own sessions) | compactions written / loading in Pi | entry types | differences |\n")
	t.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		served := "known"
		if !r.Known {
			served = "**unknown** (newest rules)"
		}
		diff := "none"
		if !r.ok() {
			diff = strings.ReplaceAll(r.First, "|", "\\|")
		}
		types := "as compactor knows"
		if !r.TypesOK {
			types = "**other**"
		}
		fmt.Fprintf(&t, "| %s | %s | %d/%d | %d/%d | %d/%d | %d/%d | %d / %d | %s | %s |\n", r.Release, served,
			r.CorpusContexts, r.CorpusContextsOf, r.CorpusPlans, r.CorpusPlansOf, r.OwnContexts, r.OwnContextsOf, r.OwnPlans, r.OwnPlansOf,
			r.Appended, r.AppendsLoaded, types, diff)
	}
	t.WriteString(endMarker)
	s = s[:i] + t.String() + s[j+len(endMarker):]
	return os.WriteFile(doc, []byte(s), 0o644)
}
