package confine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// probe asks the kernel for openat2.
func probe() (Mode, string) {
	fd, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC})
	if err != nil {
		return Root, fmt.Sprintf("openat2: %v (Linux before 5.6, or a seccomp filter that does not allow it)", err)
	}
	unix.Close(fd)
	return Openat2, ""
}

// OpenBeneath opens rel beneath root as the process's mode says, non-blocking (Blocking
// makes it blocking again once it is known to be a regular file).
func OpenBeneath(root, rel string, flag int) (*os.File, error) {
	if m, _ := Current(); m != Openat2 {
		return openInRoot(root, rel, flag)
	}
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(dir)
	how := &unix.OpenHow{Flags: uint64(flag) | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	var fd int
	for try := 0; ; try++ {
		fd, err = unix.Openat2(dir, rel, how)
		// EAGAIN: a rename or a mount raced the resolution (the kernel asks to try again).
		if (!errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR)) || try == 16 {
			break
		}
	}
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("%w: a symlink on the way, which compactor does not follow beneath a store's root (openat2: %v)", ErrUnsafe, err)
	case errors.Is(err, unix.EXDEV):
		return nil, fmt.Errorf("%w: the path leads out of the store's root (openat2: %v)", ErrUnsafe, err)
	case errors.Is(err, unix.EISDIR), errors.Is(err, unix.ENXIO): // a directory; a FIFO or socket opened to write
		return nil, fmt.Errorf("%w: not a regular file (openat2: %v)", ErrUnsafe, err)
	case err != nil:
		return nil, &os.PathError{Op: "openat2", Path: filepath.Join(root, rel), Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(root, rel)), nil
}
