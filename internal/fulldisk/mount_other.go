//go:build !linux

package fulldisk

import (
	"errors"
	"testing"
)

// Mount skips the test: only Linux mounts a tmpfs this way.
func Mount(t testing.TB, size int64) string {
	t.Helper()
	t.Skip("fulldisk: a test tmpfs is mounted on Linux only")
	return ""
}

func freeBytes(string) (int64, error) { return 0, errors.ErrUnsupported }

func isNoSpace(error) bool { return false }
