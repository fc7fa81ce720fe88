package sessionio

import (
	"errors"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio/internal/checkpoint"
	"github.com/compactor-dev/compactor/sessionio/internal/confine"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// Confinement. A worker reads and appends to session files that a store's agents can
// rename, link and replace while a job runs (docs/security.md, "Files confined to the
// store's root"). A File is the one session file a job works on, from its first read to its
// append:
//
//   - beneath a root (Beneath), every open resolves the path inside the root and follows no
//     symlink (openat2 with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS; where the kernel has no
//     openat2, os.Root, which follows symlinks only inside the root), opens only a regular
//     file and refuses one with more than one hard link (another of its names may be
//     another store's file);
//   - by name (Named: a file a person gives on the command line), it opens as os.OpenFile
//     does;
//   - either way the first open pins the file's device and inode, and every later open (a
//     read again, the write check, the append) must find the same file: one replaced by a
//     rename, or a path redirected to another file, is refused (ReplacedError), never
//     written. The append checks the same things once more, with one fstat of the
//     descriptor it writes through, right before its write.

// ErrUnsafeFile is the cause of a File refused as unsafe: a symlink or an escape on the way
// beneath its root, more than one hard link, not a regular file. Nothing is read or written.
var ErrUnsafeFile = confine.ErrUnsafe

// ConfineMode is how a File beneath a root is opened (package internal/confine).
type ConfineMode = confine.Mode

// The confinements: ConfineOpenat2, openat2 with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS (Linux
// 5.6 and later); ConfineRoot, os.Root (escapes refused, symlinks inside the root followed).
const (
	ConfineOpenat2 = confine.Openat2
	ConfineRoot    = confine.Root
)

// Confinement says how Files beneath a root are opened in this process, and, when it is
// not openat2, why not.
func Confinement() (ConfineMode, string) { return confine.Current() }

// SetConfinement forces a mode for this process (ConfineRoot where openat2 must not be
// used; tests of both modes), and returns the one it replaces. ConfineOpenat2 where the
// probe found none is refused.
func SetConfinement(m ConfineMode) (ConfineMode, error) { return confine.Set(m) }

// ErrChanged: the session is not the one the caller planned against (its size or leaf
// moved, or the file was replaced); nothing was written.
var ErrChanged = errors.New("session changed since it was planned")

// ErrReplaced is what a ReplacedError is (errors.Is).
var ErrReplaced = errors.New("session file replaced")

// ReplacedError is a File that is not the file its first open found: replaced by a rename,
// deleted, or a path now leading to another file. It is an ErrChanged too: the session the
// job planned is not there to append to (the job ends busy and the new file is planned
// afresh later).
type ReplacedError struct {
	Was, Now string // "device:inode"; Now is "deleted" for a file with no name left
}

func (e *ReplacedError) Error() string {
	if e.Now == "deleted" {
		return fmt.Sprintf("%v: the file read (%s) has no name left: deleted or replaced by a rename", ErrChanged, e.Was)
	}
	return fmt.Sprintf("%v: the path now leads to another file (%s, read as %s): replaced by a rename or redirected", ErrChanged, e.Now, e.Was)
}

func (e *ReplacedError) Unwrap() error { return ErrChanged }

// Is makes errors.Is(err, ErrReplaced) true.
func (e *ReplacedError) Is(target error) bool { return target == ErrReplaced }

// File is one session file as a job reads and appends to it (see Confinement above). Its
// methods are safe for concurrent use.
type File struct {
	name      string // the path errors and results name
	root, rel string // beneath root when root is set; rel uses the OS's separators

	mu sync.Mutex
	id checkpoint.FileID // pinned by the first open
}

// Named is the file at name, opened as os.OpenFile opens it: the file a person names.
func Named(name string) *File { return &File{name: name} }

// Beneath is the file at rel beneath the directory root (a store's root, a real path): no
// open ever leaves root or follows a symlink there (see Confinement). rel is a path
// relative to root, with either separator.
func Beneath(root, rel string) *File {
	rel = filepath.Clean(filepath.FromSlash(rel))
	return &File{name: filepath.Join(root, rel), root: root, rel: rel}
}

// Name is the file's path as errors name it.
func (f *File) Name() string { return f.name }

// Confined reports whether the file is opened beneath a root.
func (f *File) Confined() bool { return f.root != "" }

// open opens the file with flag (os.O_RDONLY, or O_WRONLY/O_RDWR with O_APPEND) and admits
// what it opened (admit). Errors are *FileError naming the file.
func (f *File) open(flag int) (*os.File, os.FileInfo, error) {
	var (
		fh  *os.File
		err error
	)
	if f.root == "" {
		fh, err = os.OpenFile(f.name, flag, 0)
	} else {
		fh, err = confine.OpenBeneath(f.root, f.rel, flag)
	}
	if err != nil {
		return nil, nil, &FileError{File: f.name, Err: err}
	}
	st, err := fh.Stat()
	if err == nil {
		err = f.admit(st, flag&(os.O_WRONLY|os.O_RDWR) != 0)
	}
	if err == nil && f.root != "" {
		err = confine.Blocking(fh) // opened non-blocking, so that a FIFO put in its place cannot hang the open
	}
	if err != nil {
		fh.Close()
		return nil, nil, &FileError{File: f.name, Err: err}
	}
	return fh, st, nil
}

// admit checks a stat of the file (from an open, or the fstat right before an append): a
// regular file (beneath a root, or to write), one hard link beneath a root, a name left,
// and the device and inode of the first open, which the first call pins.
func (f *File) admit(st os.FileInfo, write bool) error {
	if (f.root != "" || write) && !st.Mode().IsRegular() {
		return fmt.Errorf("%w: not a regular file", ErrUnsafeFile)
	}
	id := identify(st)
	f.mu.Lock()
	defer f.mu.Unlock()
	switch links := linksOf(st); {
	case links == 0:
		return &ReplacedError{Was: f.id.String(), Now: "deleted"}
	case links > 1 && f.root != "":
		return fmt.Errorf("%w: the file has %d hard links: another of its names may lie outside the store's root or be another store's file (compactor works only on files with one link)", ErrUnsafeFile, links)
	}
	switch {
	case !id.OK:
	case !f.id.OK:
		f.id = id
	case id != f.id:
		return &ReplacedError{Was: f.id.String(), Now: id.String()}
	}
	return nil
}

// OpenAppend opens the file for appending (O_RDWR|O_APPEND: the append reads it back
// through the same descriptor), admitted as a write is. Errors are *FileError naming the
// file.
func (f *File) OpenAppend() (*os.File, error) {
	fh, _, err := f.open(os.O_RDWR | os.O_APPEND)
	return fh, err
}

// AdmitWrite checks st, one fstat of a descriptor OpenAppend returned, right before a
// write through it: a regular file, a name left, one hard link beneath a root, the device
// and inode of the first open.
func (f *File) AdmitWrite(st os.FileInfo) error { return f.admit(st, true) }

// Unnamed is the ReplacedError of a file whose stat st (of a descriptor open on it) shows
// no name left, or nil when it has one.
func Unnamed(st os.FileInfo) error {
	if linksOf(st) != 0 {
		return nil
	}
	return &ReplacedError{Was: identify(st).String(), Now: "deleted"}
}

// Stat opens the file as a read does and returns its stat (pinning it, or checking it is
// the pinned file); a file by name is stat'ed as os.Stat does.
func (f *File) Stat() (os.FileInfo, error) {
	if f.root == "" {
		st, err := os.Stat(f.name)
		if err == nil {
			err = f.admit(st, false)
		}
		if err != nil {
			return nil, &FileError{File: f.name, Err: err}
		}
		return st, nil
	}
	fh, st, err := f.open(os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	fh.Close()
	return st, nil
}

// Open opens the file for reading, as every read of it does; the caller closes it.
func (f *File) Open() (*os.File, error) {
	fh, _, err := f.open(os.O_RDONLY)
	return fh, err
}

// Read reads and indexes the whole session (ReadFileWith for this file).
func (f *File) Read(opts Options) (*Session, error) {
	fh, st, err := f.open(os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	data, err := readAll(fh, st.Size())
	if err != nil {
		return nil, &FileError{File: f.name, Err: err}
	}
	return ParseWith(data, f.name, opts)
}

// readAll reads r to its end, sized for n bytes (the file's size when opened; it may grow).
func readAll(r io.Reader, n int64) ([]byte, error) {
	data := make([]byte, 0, n+512)
	for {
		m, err := r.Read(data[len(data):cap(data)])
		data = data[:len(data)+m]
		if errors.Is(err, io.EOF) {
			return data, nil
		}
		if err != nil {
			return nil, err
		}
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
	}
}

// CheckWritable reports, without writing anything, whether the file can be opened for
// appending (and is still the file read): compactor checks this before it pays for a
// summary.
func (f *File) CheckWritable() error {
	fh, _, err := f.open(os.O_WRONLY | os.O_APPEND)
	if err != nil {
		var fe *FileError
		if errors.As(err, &fe) && fe.File == f.name {
			fe.Err = fmt.Errorf("not writable: %w", fe.Err)
		}
		return err
	}
	return fh.Close()
}

// CheckWritable reports, without writing anything, whether file can be opened for
// appending: compactor checks this before it pays for a summary.
func CheckWritable(file string) error { return Named(file).CheckWritable() }
