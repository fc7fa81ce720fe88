//go:build linux

package liveappend

import (
	"errors"
	"os"
	"syscall"
)

// fallocKeepSize is FALLOC_FL_KEEP_SIZE: allocate without changing the file's size.
const fallocKeepSize = 0x1

// reserve allocates [off, off+n) of f's blocks, keeping its size (see appendLine).
func reserve(f *os.File, off, n int64) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	if cerr := rc.Control(func(fd uintptr) {
		for {
			if err = syscall.Fallocate(int(fd), fallocKeepSize, off, n); !errors.Is(err, syscall.EINTR) {
				return
			}
		}
	}); cerr != nil {
		return cerr
	}
	if err != nil {
		return &os.PathError{Op: "fallocate", Path: f.Name(), Err: err}
	}
	return nil
}
