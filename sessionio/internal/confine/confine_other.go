//go:build !linux

package confine

import "os"

// probe: openat2 is Linux's; elsewhere os.Root confines.
func probe() (Mode, string) {
	return Root, "openat2 is Linux's"
}

// OpenBeneath opens rel beneath root through os.Root, non-blocking.
func OpenBeneath(root, rel string, flag int) (*os.File, error) {
	return openInRoot(root, rel, flag)
}
