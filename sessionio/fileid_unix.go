//go:build unix

package sessionio

import (
	"os"
	"syscall"
)

// identify is the file's device and inode.
func identify(fi os.FileInfo) fileID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}
	}
	return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino), ok: true}
}

// linksOf is the file's number of hard links.
func linksOf(fi os.FileInfo) uint64 {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 1
	}
	return uint64(st.Nlink) //nolint:unconvert // Nlink's type varies by platform
}
