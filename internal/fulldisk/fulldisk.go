// Package fulldisk gives tests a real file system they can fill to the last block: a small
// tmpfs mounted for the test on a directory of its own. A full disk cannot be faked
// faithfully (a write into the slack of a file's last page still succeeds, a reservation
// fails before any byte is written), so the tests that promise "nothing torn on a full
// disk" run against the kernel's own accounting.
//
// Mounting needs root (CAP_SYS_ADMIN) on Linux; elsewhere, or without the privilege, Mount
// skips the test and says why.
package fulldisk

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Fill writes a file in dir (on a file system from Mount) until the file system has no
// free block left, checks that it has none, and returns the function that frees the space
// again (it removes the file). The files already there keep the slack of their last page:
// a write into it still succeeds, which is exactly what a full disk does.
func Fill(t testing.TB, dir string) (free func()) {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for {
		// os.File.Write retries after a partial write, so it ends with the error that
		// stopped the kernel: ENOSPC once the last block is taken.
		if _, err = f.Write(chunk); err != nil {
			break
		}
	}
	if cerr := f.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if !isNoSpace(err) {
		t.Fatalf("fulldisk: filling %s stopped with %v, want no space left on device", dir, err)
	}
	if avail, err := freeBytes(dir); err != nil || avail != 0 {
		t.Fatalf("fulldisk: %s has %d bytes free after filling (%v)", dir, avail, err)
	}
	return func() {
		t.Helper()
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
}
