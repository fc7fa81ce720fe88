package pi

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Release is the Pi release whose rules compactor follows for a session: how its context is
// built, how a compaction is planned and counted, what a summary request holds and what an
// appended entry holds. A session file does not say which Pi wrote it (every release writes
// the same header), so the release is a setting (per store; the newest by default) or comes
// with a job from the agent itself.
//
// Pi's rules changed release by release: each change is a Behaviour with the first release
// that has it (and the last, for the one that was undone), in the table behaviours
// (docs/compatibility.md shows it with the CHANGELOG line or the measured difference). Code
// asks r.Has(b), never compares versions.
//
// Any x.y.z is a Release. One that is not a published release compactor has proven against
// the real Pi (Known false: newer than the newest, unpublished, or a pre-release) gets the
// behaviours its number falls in (a newer one: the newest known's), and the caller says so
// (the stated policy in docs/compatibility.md). The zero value is the newest known release.
type Release struct {
	major, minor, patch int
	pre                 string // a pre-release or build suffix ("1.7.0-beta.1"), never known
	set                 bool   // false: the zero value
}

// Latest is the newest Pi release compactor knows: the default everywhere.
var Latest = MustParseRelease(knownReleases[len(knownReleases)-1])

// knownReleases are the Pi releases compactor is proven against, oldest first: every release
// published from 0.73.0 on (@mariozechner/pi-coding-agent up to 0.73.1,
// @earendil-works/pi-coding-agent from 0.74.0), each checked by make interop-releases (every
// context, plan and append of the corpus) and the newest of each rule set pinned with goldens
// (interop/pi/versions.txt). A release published after these is unknown until it is proven
// and added here.
var knownReleases = []string{
	"0.73.0", "0.73.1",
	"0.74.0", "0.74.1", "0.74.2", "0.75.1", "0.75.4", "0.75.5", "0.76.0", "0.78.0", "0.78.1",
	"0.79.0", "0.79.1", "0.79.3", "0.79.4", "0.79.6", "0.79.7", "0.79.8", "0.79.9", "0.79.10",
	"0.80.2", "0.80.3", "0.80.6", "0.80.7", "0.80.10", "0.81.1", "0.82.0", "0.82.1", "0.83.0",
	"0.84.0", "0.84.1", "0.84.2", "0.84.3", "0.84.4", "0.85.0", "0.85.1", "0.86.1",
	"0.87.0", "0.87.1", "0.99.1", "1.0.3", "1.3.0", "1.4.0", "1.5.0", "1.5.2", "1.6.0",
}

// Releases lists the known releases, oldest first.
func Releases() []Release {
	out := make([]Release, len(knownReleases))
	for i, v := range knownReleases {
		out[i] = MustParseRelease(v)
	}
	return out
}

// MaxReleaseLen bounds a version string compactor reads (jobs and bridge requests carry
// one): longer ones are refused before they are parsed.
const MaxReleaseLen = 32

// ParseRelease reads a Pi version as a user or an agent writes it: "x.y.z" (an optional "v"
// before it, an optional pre-release or build suffix after it), "x.y" (the newest known
// release of x.y, or x.y.0 when none is known), "latest" or "" (the newest known). Anything
// else is an error naming what is wrong; a well-formed version is never refused for being
// unknown (see Known).
func ParseRelease(s string) (Release, error) {
	if len(s) > MaxReleaseLen {
		return Release{}, fmt.Errorf("%.16q...: longer than %d characters for a Pi release", s, MaxReleaseLen)
	}
	v := strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "v")
	newest := knownReleases[len(knownReleases)-1]
	if v == "" || v == "latest" {
		v = newest
	}
	core, pre, hasPre := strings.Cut(v, "-")
	if !hasPre {
		core, pre, hasPre = strings.Cut(v, "+")
	}
	if hasPre && (pre == "" || strings.Trim(pre, "abcdefghijklmnopqrstuvwxyz0123456789.-+") != "") {
		return Release{}, fmt.Errorf("%q as a Pi release: the suffix after x.y.z may hold letters, digits, '.', '-' and '+' only", s)
	}
	parts := strings.Split(core, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return Release{}, fmt.Errorf("%q is not a Pi release (x.y.z, for example %s), x.y or latest", s, newest)
	}
	var n [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil || strings.Trim(p, "0123456789") != "" || x > 99999 || len(p) > 1 && p[0] == '0' {
			return Release{}, fmt.Errorf("%q is not a Pi release: %q is not a number (x.y.z, for example %s)", s, p, newest)
		}
		n[i] = x
	}
	r := Release{major: n[0], minor: n[1], patch: n[2], pre: pre, set: true}
	if len(parts) == 2 {
		if hasPre {
			return Release{}, fmt.Errorf("%q as a Pi release: a suffix needs a full x.y.z", s)
		}
		for _, k := range knownReleases { // x.y: its newest known patch
			if strings.HasPrefix(k, fmt.Sprintf("%d.%d.", r.major, r.minor)) {
				r.patch, _ = strconv.Atoi(k[strings.LastIndexByte(k, '.')+1:])
			}
		}
	}
	return r, nil
}

// MustParseRelease is ParseRelease for a version written in the code; it panics on an error.
func MustParseRelease(s string) Release {
	r, err := ParseRelease(s)
	if err != nil {
		panic(err)
	}
	return r
}

// Or is r, or Latest for the zero value.
func (r Release) Or() Release {
	if !r.set {
		return Latest
	}
	return r
}

// String is the release number ("0.80.3", "1.7.0-beta.1").
func (r Release) String() string {
	r = r.Or()
	s := fmt.Sprintf("%d.%d.%d", r.major, r.minor, r.patch)
	if r.pre != "" {
		s += "-" + r.pre
	}
	return s
}

// Known reports whether r is a release compactor is proven against (knownReleases).
func (r Release) Known() bool {
	r = r.Or()
	if r.pre != "" {
		return false
	}
	return slices.Contains(knownReleases, r.String())
}

// Package is the npm package of that Pi: @mariozechner/pi-coding-agent before 0.74.0.
func (r Release) Package() string {
	if r.Or().less(0, 74, 0) {
		return "@mariozechner/pi-coding-agent"
	}
	return "@earendil-works/pi-coding-agent"
}

// less reports whether r comes before x.y.z. A pre-release of x.y.z comes before it.
func (r Release) less(major, minor, patch int) bool {
	if r.major != major {
		return r.major < major
	}
	if r.minor != minor {
		return r.minor < minor
	}
	if r.patch != patch {
		return r.patch < patch
	}
	return r.pre != ""
}

// Has reports whether Pi r has behaviour b.
func (r Release) Has(b Behaviour) bool {
	r = r.Or()
	d := behaviours[b]
	return !r.less(d.from[0], d.from[1], d.from[2]) && (d.until == [3]int{} || r.less(d.until[0], d.until[1], d.until[2]))
}

// Unproven says how Pi r is served when compactor has not proven it ("" for a known
// release): a release newer than the newest known with the newest's rules, one older than
// the oldest with the oldest's, any other (unpublished in the known range, or a
// pre-release) with the behaviours its number falls in. Callers log it, count it and put
// it into the job's result (docs/compatibility.md, "A release compactor does not know").
func (r Release) Unproven() string {
	r = r.Or()
	if r.Known() {
		return ""
	}
	oldest, newest := MustParseRelease(knownReleases[0]), Latest
	switch {
	case newest.less(r.major, r.minor, r.patch) || r.pre != "" && !r.less(newest.major, newest.minor, newest.patch):
		return fmt.Sprintf("Pi %s is newer than every release compactor knows (%s to %s): served with the rules of %s", r, oldest, newest, newest)
	case r.less(oldest.major, oldest.minor, oldest.patch):
		return fmt.Sprintf("Pi %s is older than every release compactor knows (%s to %s): served with the rules of %s", r, oldest, newest, oldest)
	}
	return fmt.Sprintf("Pi %s is not a release compactor has proven (it knows every published release from %s to %s): served with the rules its number falls in", r, oldest, newest)
}
