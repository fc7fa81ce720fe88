package cli

import (
	"strings"
	"testing"
)

// TestPiVersionFlags: --pi-version takes any release (a known one silently, an unknown one
// with a warning on stderr), --pi-unknown refuse refuses an unknown one, and a malformed one
// is a usage error naming the flag.
func TestPiVersionFlags(t *testing.T) {
	t.Parallel()
	file := "../../testdata/corpus/01-minimal.jsonl"
	for _, c := range []struct {
		args       []string
		code       int
		stderr     string
		notInError string
	}{
		{[]string{"--pi-version", "0.80.3"}, 0, "", "warning"},
		{[]string{"--pi-version", "0.73"}, 0, "", "warning"},
		{[]string{"--pi-version", "latest"}, 0, "", "warning"},
		{[]string{"--pi-version", "9.9.9"}, 0, "compactor: warning: --pi-version: Pi 9.9.9 is newer than every release compactor knows", ""},
		{[]string{"--pi-version", "1.2.0"}, 0, "Pi 1.2.0 is not a release compactor has proven", ""},
		{[]string{"--pi-version", "9.9.9", "--pi-unknown", "refuse"}, 2, "--pi-version: Pi 9.9.9 is newer than every release compactor knows", ""},
		{[]string{"--pi-version", "banana"}, 2, `--pi-version: "banana" is not a Pi release (x.y.z`, ""},
		{[]string{"--pi-unknown", "maybe"}, 2, `--pi-unknown "maybe": want warn or refuse`, ""},
	} {
		args := append([]string{"plan", file, "--json"}, c.args...)
		code, _, stderr := runCLI(t, args...)
		if code != c.code || !strings.Contains(stderr, c.stderr) || c.notInError != "" && strings.Contains(stderr, c.notInError) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d with %q", c.args, code, stderr, c.code, c.stderr)
		}
	}
	var sp storePiFlag
	if err := sp.Set("host1=0.86.1"); err != nil {
		t.Errorf("--store-pi host1=0.86.1: %v", err)
	}
	if err := sp.Set("host1=1.x"); err == nil {
		t.Error("--store-pi host1=1.x accepted")
	}
}
