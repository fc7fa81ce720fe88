//go:build linux

package fulldisk

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// Mount mounts a tmpfs of size bytes (rounded up to whole pages by the kernel) on a new
// directory under t.TempDir() and unmounts it when the test ends, before the directory is
// removed. It skips the test when mounting is not permitted (not root, or a container
// without CAP_SYS_ADMIN); any other failure fails it.
func Mount(t testing.TB, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size="+strconv.FormatInt(size, 10)+",mode=0755")
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
		t.Skipf("fulldisk: mounting a tmpfs is not permitted here (%v): this test needs root (CAP_SYS_ADMIN) to fill a real file system", err)
	}
	if err != nil {
		t.Fatalf("fulldisk: mount tmpfs on %s: %v", dir, err)
	}
	// Registered after t.TempDir, so it runs before the directory's removal.
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			// Something still holds a file open (a child process that outlived the test):
			// detach it, so the directory can go, and say so.
			t.Errorf("fulldisk: unmount %s: %v (detached instead)", dir, err)
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	return dir
}

func freeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil
}

func isNoSpace(err error) bool { return errors.Is(err, syscall.ENOSPC) }
