//go:build !linux

package sessionio

import "os"

// probeConfinement: openat2 is Linux's; elsewhere os.Root confines.
func probeConfinement() (ConfineMode, string) {
	return ConfineRoot, "openat2 is Linux's"
}

// openBeneath opens rel beneath root through os.Root, non-blocking.
func openBeneath(root, rel string, flag int) (*os.File, error) {
	return openInRoot(root, rel, flag)
}
