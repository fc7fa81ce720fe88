//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/internal/pigolden"
	"github.com/compactor-dev/compactor/internal/testbin"
)

// Paths shared by every test, set up once by TestMain.
var (
	repoRoot  string // the module root (the parent of this directory)
	piOracle  string // the Pi harness (env PI_HARNESS, default interop/pi/pi; PI_VERSION picks the Pi)
	piVersion string // the version of that Pi ("1.6.0")
	binDir    string // compactor and enqueue, built from this checkout
)

func compactorBin() string { return filepath.Join(binDir, "compactor") }
func enqueueBin() string   { return filepath.Join(binDir, "enqueue") }

func TestMain(m *testing.M) {
	code, err := setup(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func setup(m *testing.M) (int, error) {
	wd, err := os.Getwd()
	if err != nil {
		return 0, err
	}
	repoRoot = filepath.Dir(wd)
	if piOracle, err = pigolden.Harness(); err != nil {
		return 0, err
	}
	if _, err := os.Stat(piOracle); err != nil {
		return 0, fmt.Errorf("the Pi harness not found (set PI_HARNESS): %w", err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		return 0, fmt.Errorf("the real Pi needs Node: %w", err)
	}
	// Install the selected Pi (PI_VERSION) once, before tests run the harness side by side.
	if out, err := exec.Command(piOracle, "install").CombinedOutput(); err != nil {
		return 0, fmt.Errorf("%s where: %w\n%s", piOracle, err, out)
	}
	out, err := exec.Command(piOracle, "version").Output()
	if err != nil {
		return 0, fmt.Errorf("%s version: %w", piOracle, err)
	}
	piVersion = strings.TrimSpace(string(out))
	if binDir, err = testbin.Build("compactor", "enqueue"); err != nil {
		return 0, err
	}
	defer os.RemoveAll(binDir)
	return m.Run(), nil
}
