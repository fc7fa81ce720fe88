//go:build !unix

package access

import (
	"errors"
	"os"
)

var errLocked = errors.New("locked by another process")

// flock is not implemented off Unix: the data directory is not protected there.
func flock(f *os.File, exclusive bool) error { return nil }

func funlock(f *os.File) error { return nil }

// WritableDir is not checked off Unix.
func WritableDir(dir string) error { return nil }

// DevIno is not known off Unix: a store's identity is its marker and host there.
func DevIno(os.FileInfo) (dev, ino uint64) { return 0, 0 }
