//go:build !unix

package pipeline

import (
	"errors"
	"os"
)

var errLocked = errors.New("locked by another process")

// flock is not implemented off Unix: the data directory is not protected there.
func flock(f *os.File, exclusive bool) error { return nil }

func funlock(f *os.File) error { return nil }

// writableDir is not checked off Unix.
func writableDir(dir string) error { return nil }

// devIno is not known off Unix: a store's identity is its marker and host there.
func devIno(os.FileInfo) (dev, ino uint64) { return 0, 0 }
