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
