package pi

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestParseRelease(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"": "1.6.0", "latest": "1.6.0", "1.6": "1.6.0", "1.6.0": "1.6.0", "v1.6.0": "1.6.0",
		"0.73": "0.73.1", " 0.73.1 ": "0.73.1", "0.73.0": "0.73.0", "0.80.3": "0.80.3", "1.5": "1.5.2", "9.9.9": "9.9.9",
		"1.7.0-beta.1": "1.7.0-beta.1", "0.0.0": "0.0.0", "1.2": "1.2.0"} {
		got, err := ParseRelease(in)
		if err != nil || got.String() != want {
			t.Errorf("ParseRelease(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"1", "1.6.0.1", "x.y.z", "1.-6.0", "+1.6.0", "01.6.0", "1.6.0-", "1.6-beta", "1.6.0-be ta",
		strings.Repeat("1", 40), "123456.0.0"} {
		if _, err := ParseRelease(bad); err == nil {
			t.Errorf("ParseRelease(%q) accepted", bad)
		}
	}
	if !MustParseRelease("0.80.3").Known() || MustParseRelease("9.9.9").Known() ||
		MustParseRelease("1.2.0").Known() || MustParseRelease("1.6.0-rc.1").Known() || MustParseRelease("0.0.0").Known() {
		t.Error("Known: only the published releases compactor is proven against")
	}
	if (Release{}).String() != Latest.String() || !(Release{}).Has(ContextEdits) {
		t.Error("the zero release is the newest")
	}
}

// TestBehavioursFollowTheirReleases: each behaviour holds from its first release (and until
// the release that undid it), in every known release and in unknown ones by their number;
// an unknown release newer than every known one has the newest's rules.
func TestBehavioursFollowTheirReleases(t *testing.T) {
	t.Parallel()
	for _, b := range Behaviours() {
		since := b.Since()
		before := MustParseRelease(fmt.Sprintf("%d.%d.%d-x", major(since), minor(since), patch(since)))
		if !since.Has(b) || before.Has(b) {
			t.Errorf("%s: holds in %s %v, in a pre-release of it %v", b, since, since.Has(b), before.Has(b))
		}
		if until, ok := b.Until(); ok && (until.Has(b) || !MustParseRelease("0.86.1").Has(b)) {
			t.Errorf("%s: still holds in %s", b, until)
		}
		if b.Evidence() == "" || b.String() == "" {
			t.Errorf("%s: no evidence", b)
		}
	}
	if got, want := MustParseRelease("9.9.9").Rules(), Latest.Rules(); !slices.Equal(got, want) {
		t.Errorf("9.9.9 has %v, the newest %v", got, want)
	}
	if r := MustParseRelease("0.75.5"); len(r.Rules()) != 0 {
		t.Errorf("0.75.5 has %v; it reads, cuts and writes as 0.73", r.Rules())
	}
	for _, c := range []struct {
		v    string
		b    Behaviour
		want bool
	}{
		{"0.75.5", UserImagesWeigh, false}, {"0.76.0", UserImagesWeigh, true},
		{"0.79.7", NoPlanWhenNothingToSummarize, false}, {"0.79.8", NoPlanWhenNothingToSummarize, true},
		{"0.80.3", ContextMessagesWeigh, false}, {"0.80.6", ContextMessagesWeigh, true},
		{"0.85.1", ResentSummary, true}, {"0.86.1", ResentSummary, true}, {"0.87.0", ResentSummary, false},
		{"1.0.3", ThinkingOmitted, false}, {"1.3.0", ThinkingOmitted, true},
		{"1.5.2", SurrogateSafeTruncation, true}, {"1.5.0", SurrogateSafeTruncation, false},
	} {
		if got := MustParseRelease(c.v).Has(c.b); got != c.want {
			t.Errorf("%s has %s: %v, want %v", c.v, c.b, got, c.want)
		}
	}
	sets := RuleSets()
	if sets[len(sets)-1] != Latest || len(sets) < 8 {
		t.Errorf("rule sets %v", sets)
	}
}

func major(r Release) int { return part(r, 0) }
func minor(r Release) int { return part(r, 1) }
func patch(r Release) int { return part(r, 2) }
func part(r Release, i int) int {
	var n [3]int
	fmt.Sscanf(r.String(), "%d.%d.%d", &n[0], &n[1], &n[2])
	return n[i]
}

// TestUnproven: a known release is served silently; any other says how it is served.
func TestUnproven(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]string{"1.6.0": "", "0.80.3": "", "9.9.9": "newer than every release", "1.7.0-beta.1": "newer than every release",
		"0.72.1": "older than every release", "1.2.0": "not a release compactor has proven", "1.6.0-rc.1": "not a release compactor has proven"} {
		got := MustParseRelease(v).Unproven()
		if want == "" && got != "" || want != "" && !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", v, got, want)
		}
	}
}

// TestCompatibilityDocNamesEveryBehaviour: docs/compatibility.md has a row for every
// behaviour, with the release it holds from (and until).
func TestCompatibilityDocNamesEveryBehaviour(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/compatibility.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range Behaviours() {
		until := " "
		if u, ok := b.Until(); ok {
			until = " " + u.String() + " "
		}
		row := fmt.Sprintf("| `%s` | %s |%s|", b, b.Since(), until)
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/compatibility.md has no row starting %q", row)
		}
	}
}
