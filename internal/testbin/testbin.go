package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// module is the import path the commands are built from (cmd/<name>), whatever directory
// the test runs in.
const module = "github.com/compactor-dev/compactor"

// Build builds each named command (cmd/<name>) into a new temporary directory and returns
// it; the caller removes it when its tests are done. The go command is $GO when set (the
// Makefile's toolchain), else go.
func Build(names ...string) (dir string, err error) {
	return BuildWith("", names...)
}

// BuildWith is Build with linker flags (-ldflags), for a test that stamps what `make build`
// stamps into the binary (its version, say); empty flags build as Build does.
func BuildWith(ldflags string, names ...string) (dir string, err error) {
	dir, err = os.MkdirTemp("", "compactor-test-bin-")
	if err != nil {
		return "", fmt.Errorf("testbin: %w", err)
	}
	goBin := os.Getenv("GO")
	if goBin == "" {
		goBin = "go"
	}
	for _, name := range names {
		args := []string{"build", "-o", filepath.Join(dir, name)}
		if ldflags != "" {
			args = append(args, "-ldflags", ldflags)
		}
		cmd := exec.Command(goBin, append(args, module+"/cmd/"+name)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("testbin: go build cmd/%s: %w\n%s", name, err, out)
		}
	}
	return dir, nil
}
