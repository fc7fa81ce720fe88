package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The built command is this checkout's: it runs and answers --help.
func TestBuildBuildsTheCommand(t *testing.T) {
	dir, err := Build("enqueue")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	out, err := exec.Command(filepath.Join(dir, "enqueue"), "--help").CombinedOutput()
	if !strings.Contains(string(out), "enqueue") {
		t.Fatalf("enqueue --help: %v\n%s", err, out)
	}
}

// A command that does not exist is an error naming it, and leaves no directory behind.
func TestBuildNamesAMissingCommand(t *testing.T) {
	dir, err := Build("no-such-command")
	if err == nil || !strings.Contains(err.Error(), "cmd/no-such-command") || dir != "" {
		t.Fatalf("Build of a missing command: %q %v", dir, err)
	}
}

// BuildWith passes its linker flags: a version stamped with -X is the one the binary reports.
func TestBuildWithStampsTheVersion(t *testing.T) {
	dir, err := BuildWith("-X "+module+"/internal/cli/command.version=v0.0.0-testbin", "compactor")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	out, err := exec.Command(filepath.Join(dir, "compactor"), "--version").CombinedOutput()
	if !strings.Contains(string(out), "v0.0.0-testbin") {
		t.Fatalf("compactor --version: %v\n%s", err, out)
	}
}
