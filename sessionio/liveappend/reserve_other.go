//go:build !linux

package liveappend

import (
	"errors"
	"os"
)

// reserve is not available: appendLine writes unreserved (a short write is still taken
// back or reported).
func reserve(*os.File, int64, int64) error { return errors.ErrUnsupported }
