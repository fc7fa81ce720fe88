package confine

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
)

// ErrUnsafe is the cause of a path refused as unsafe: a symlink or an escape on the way
// beneath its root, not a regular file (sessionio.ErrUnsafe).
var ErrUnsafe = errors.New("unsafe session file")

// Mode is how a path beneath a root is opened.
type Mode int

const (
	// Openat2 resolves with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
	// RESOLVE_NO_MAGICLINKS) from the root's descriptor (Linux 5.6 and later): the kernel
	// refuses every symlink and every escape, in one system call.
	Openat2 Mode = iota + 1
	// Root opens through os.Root: escapes are refused (".." above the root, an
	// absolute symlink, a symlink leading out), symlinks that stay inside the root are
	// followed. That a File is still the one first opened (its device and inode) is checked
	// in both modes (sessionio.File).
	Root
)

func (m Mode) String() string {
	switch m {
	case Openat2:
		return "openat2 (RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS)"
	case Root:
		return "os.Root (escapes refused, symlinks inside the root followed)"
	}
	return fmt.Sprintf("ConfineMode(%d)", int(m))
}

var confinement struct {
	once   sync.Once
	mu     sync.Mutex
	mode   Mode
	reason string // why not openat2
}

// Current says how paths beneath a root are opened in this process, and, when it is not
// openat2, why not (the kernel's answer to a probe made once: ENOSYS before Linux 5.6, EPERM
// or ENOSYS under a seccomp filter that does not know the call; not Linux).
func Current() (Mode, string) {
	confinement.once.Do(func() {
		m, reason := probe()
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

// Set forces a mode for this process (Root where openat2 must not be used; tests of both
// modes), and returns the one it replaces. Openat2 where the probe found none is refused.
func Set(m Mode) (Mode, error) {
	old, _ := Current()
	if m == Openat2 {
		if probed, reason := probe(); probed != Openat2 {
			return old, fmt.Errorf("openat2 is not available here: %s", reason)
		}
	}
	confinement.mu.Lock()
	defer confinement.mu.Unlock()
	confinement.mode = m
	if m == Root && confinement.reason == "" {
		confinement.reason = "chosen (SetConfinement)"
	}
	return old, nil
}

// openInRoot opens rel beneath root through os.Root (Root), non-blocking (the caller makes
// a regular file blocking again: Blocking).
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

// rootError says what os.Root refused: an escape from the root is an ErrUnsafe (os has
// no exported error for it: its text is matched); a symlink loop too.
func rootError(err error) error {
	switch {
	case strings.Contains(err.Error(), "escapes from parent"):
		return fmt.Errorf("%w: the path leads out of the store's root (%v)", ErrUnsafe, err)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("%w: a symlink loop on the way (%v)", ErrUnsafe, err)
	case errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENXIO): // a directory; a FIFO or socket opened to write
		return fmt.Errorf("%w: not a regular file (%v)", ErrUnsafe, err)
	}
	return err
}

// Blocking makes a descriptor opened non-blocking blocking again.
func Blocking(f *os.File) error {
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
