package sessionio

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
)

// ConfineMode is how a File beneath a root is opened.
type ConfineMode int

const (
	// ConfineOpenat2 resolves with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
	// RESOLVE_NO_MAGICLINKS) from the root's descriptor (Linux 5.6 and later): the kernel
	// refuses every symlink and every escape, in one system call.
	ConfineOpenat2 ConfineMode = iota + 1
	// ConfineRoot opens through os.Root: escapes are refused (".." above the root, an
	// absolute symlink, a symlink leading out), symlinks that stay inside the root are
	// followed. That a File is still the one first opened (its device and inode) is checked
	// in both modes.
	ConfineRoot
)

func (m ConfineMode) String() string {
	switch m {
	case ConfineOpenat2:
		return "openat2 (RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS)"
	case ConfineRoot:
		return "os.Root (escapes refused, symlinks inside the root followed)"
	}
	return fmt.Sprintf("ConfineMode(%d)", int(m))
}

var confinement struct {
	once   sync.Once
	mu     sync.Mutex
	mode   ConfineMode
	reason string // why not openat2
}

// Confinement says how Files beneath a root are opened in this process, and, when it is
// not openat2, why not (the kernel's answer to a probe made once: ENOSYS before Linux 5.6,
// EPERM or ENOSYS under a seccomp filter that does not know the call; not Linux).
func Confinement() (ConfineMode, string) {
	confinement.once.Do(func() {
		m, reason := probeConfinement()
		confinement.mu.Lock()
		if confinement.mode == 0 {
			confinement.mode, confinement.reason = m, reason
		}
		confinement.mu.Unlock()
	})
	confinement.mu.Lock()
	defer confinement.mu.Unlock()
	return confinement.mode, confinement.reason
}

// SetConfinement forces a mode for this process (ConfineRoot where openat2 must not be
// used; tests of both modes), and returns the one it replaces. ConfineOpenat2 where the
// probe found none is refused.
func SetConfinement(m ConfineMode) (ConfineMode, error) {
	old, _ := Confinement()
	if m == ConfineOpenat2 {
		if probed, reason := probeConfinement(); probed != ConfineOpenat2 {
			return old, fmt.Errorf("openat2 is not available here: %s", reason)
		}
	}
	confinement.mu.Lock()
	defer confinement.mu.Unlock()
	confinement.mode = m
	if m == ConfineRoot && confinement.reason == "" {
		confinement.reason = "chosen (SetConfinement)"
	}
	return old, nil
}

// openInRoot opens rel beneath root through os.Root (ConfineRoot), non-blocking (File.open
// makes a regular file blocking again).
func openInRoot(root, rel string, flag int) (*os.File, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	f, err := r.OpenFile(rel, flag|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, rootError(err)
	}
	return f, nil
}

// rootError says what os.Root refused: an escape from the root is an ErrUnsafeFile (os has
// no exported error for it: its text is matched); a symlink loop too.
func rootError(err error) error {
	switch {
	case strings.Contains(err.Error(), "escapes from parent"):
		return fmt.Errorf("%w: the path leads out of the store's root (%v)", ErrUnsafeFile, err)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("%w: a symlink loop on the way (%v)", ErrUnsafeFile, err)
	case errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENXIO): // a directory; a FIFO or socket opened to write
		return fmt.Errorf("%w: not a regular file (%v)", ErrUnsafeFile, err)
	}
	return err
}

// blocking makes a descriptor opened non-blocking blocking again.
func blocking(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.SetNonblock(int(fd), false) }); err != nil {
		return err
	}
	return serr
}
