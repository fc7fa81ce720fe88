//go:build unix

package sessionio

import (
	"github.com/compactor-dev/compactor/sessionio/internal/checkpoint"
	"os"
	"syscall"
)

// identify is the file's device and inode.
func identify(fi os.FileInfo) checkpoint.FileID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return checkpoint.FileID{}
	}
	return checkpoint.FileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino), OK: true}
}

// linksOf is the file's number of hard links.
func linksOf(fi os.FileInfo) uint64 {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 1
	}
	return uint64(st.Nlink) //nolint:unconvert // Nlink's type varies by platform
}
