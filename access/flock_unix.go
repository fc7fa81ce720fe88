//go:build unix

package access

import (
	"errors"
	"os"
	"syscall"
)

var errLocked = errors.New("locked by another process")

// flock takes an exclusive (or shared) lock on f without waiting.
func flock(f *os.File, exclusive bool) error {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return errLocked
	}
	return err
}

func funlock(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }

// WritableDir reports why dir cannot be written to by this process (access(2) with W_OK:
// its permissions, or a file system mounted read-only), or nil.
func WritableDir(dir string) error {
	if err := syscall.Access(dir, 2 /* W_OK */); err != nil {
		return &os.PathError{Op: "access", Path: dir, Err: err}
	}
	return nil
}

// DevIno is the device and inode of a directory (0, 0 where unknown).
func DevIno(fi os.FileInfo) (dev, ino uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev), st.Ino //nolint:unconvert // Dev's type varies by platform
	}
	return 0, 0
}
