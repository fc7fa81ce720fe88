//go:build !unix

package sessionio

import "os"

// identify: no checkpoints where a file's identity is not known.
func identify(os.FileInfo) fileID { return fileID{} }

// linksOf: not known off Unix.
func linksOf(os.FileInfo) uint64 { return 1 }
