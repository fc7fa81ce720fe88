//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Paths shared by every test, set up once by TestMain.
var (
	repoRoot string // the module root (the parent of this directory)
	piOracle string // the pi-oracle script (env PI_ORACLE, default ../shared/oracle/pi-oracle from the repo root)
	binDir   string // compactor and enqueue, built from this checkout
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
	piOracle = os.Getenv("PI_ORACLE")
	if piOracle == "" {
		piOracle = filepath.Join(repoRoot, "..", "shared", "oracle", "pi-oracle")
	}
	if piOracle, err = filepath.Abs(piOracle); err != nil {
		return 0, err
	}
	if _, err := os.Stat(piOracle); err != nil {
		return 0, fmt.Errorf("pi-oracle not found (set PI_ORACLE): %w", err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		return 0, fmt.Errorf("the real Pi needs Node: %w", err)
	}
	// The installed package must be there (make e2e runs `pi-oracle install` first).
	if out, err := exec.Command(piOracle, "where").CombinedOutput(); err != nil {
		return 0, fmt.Errorf("%s where: %w\n%s", piOracle, err, out)
	}
	binDir, err = os.MkdirTemp("", "compactor-e2e-bin-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(binDir)
	goBin := os.Getenv("GO")
	if goBin == "" {
		goBin = "go"
	}
	for _, b := range [][2]string{{"compactor", "./cmd/compactor"}, {"enqueue", "./cmd/enqueue"}} {
		cmd := exec.Command(goBin, "build", "-o", filepath.Join(binDir, b[0]), b[1])
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("go build %s: %w\n%s", b[1], err, out)
		}
	}
	return m.Run(), nil
}
