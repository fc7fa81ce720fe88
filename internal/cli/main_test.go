package cli

import (
	"os"
	"testing"

	"github.com/compactor-dev/compactor/internal/natstest"
)

// TestMain serves a cluster node instead of running the tests when the environment asks
// for one (internal/natstest: the replica tests run a 3-node cluster of child processes).
// It removes the compactor binary the process tests built.
func TestMain(m *testing.M) {
	natstest.MaybeRunNode()
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}
