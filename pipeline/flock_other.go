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
