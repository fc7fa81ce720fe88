package storepath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/compactor-dev/compactor/sessionio"
)

// ErrUnsafePath is the cause of every refusal by Resolve: the job is dead-lettered with it
// and nothing is written.
var ErrUnsafePath = errors.New("unsafe path")

// ErrNotExist is Resolve's error for a path that does not exist (inside the root): the
// worker then looks for the session elsewhere in the store (Refind).
var ErrNotExist = errors.New("session file not found")

// Resolve maps a job's relative path to an absolute file inside root (a real path, as
// returned by rootOf). Symlinks are followed, and the result must still be inside root,
// be a regular file with one hard link and end in .jsonl. The result names the file by a
// path with no symlink beneath root: from here on the job opens it beneath root and
// follows none (sessionio.Beneath, which the engine uses for every read and the append),
// so a symlink put on the way later is refused, not followed.
func Resolve(root, rel string) (string, error) {
	if rel == "" {
		return "", fmt.Errorf("%w: empty path", ErrUnsafePath)
	}
	if filepath.IsAbs(rel) || strings.HasPrefix(rel, "/") || strings.HasPrefix(rel, `\`) {
		return "", fmt.Errorf("%w: %q is absolute; jobs carry paths relative to the store root", ErrUnsafePath, rel)
	}
	if strings.ContainsRune(rel, 0) {
		return "", fmt.Errorf("%w: %q contains a NUL byte", ErrUnsafePath, rel)
	}
	if !strings.HasSuffix(rel, ".jsonl") {
		return "", fmt.Errorf("%w: %q is not a .jsonl file", ErrUnsafePath, rel)
	}
	joined := filepath.Join(root, filepath.FromSlash(rel))
	if !within(root, joined) {
		return "", fmt.Errorf("%w: %q leaves the store root", ErrUnsafePath, rel)
	}
	real, err := filepath.EvalSymlinks(joined)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("%w: %q does not exist", ErrNotExist, rel)
		}
		return "", fmt.Errorf("%w: %q: %v", ErrUnsafePath, rel, err)
	}
	if !within(root, real) {
		return "", fmt.Errorf("%w: %q resolves outside the store root", ErrUnsafePath, rel)
	}
	if !strings.HasSuffix(real, ".jsonl") {
		return "", fmt.Errorf("%w: %q resolves to %s, not a .jsonl file", ErrUnsafePath, rel, filepath.Base(real))
	}
	fi, err := os.Lstat(real)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrUnsafePath, rel, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%w: %q is not a regular file", ErrUnsafePath, rel)
	}
	// Opened as the job will open it: beneath root, no symlink, one link. (An error of
	// another kind, a file the worker may not read, is the job's to report.)
	under, err := filepath.Rel(root, real)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrUnsafePath, rel, err)
	}
	if _, err := sessionio.Beneath(root, under).Stat(); errors.Is(err, sessionio.ErrUnsafeFile) {
		return "", fmt.Errorf("%w: %q: %v", ErrUnsafePath, rel, err)
	}
	return real, nil
}

// within reports whether p is root or below it (both cleaned absolute paths).
func within(root, p string) bool {
	r, err := filepath.Rel(root, p)
	if err != nil {
		return false
	}
	return r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator)) && !filepath.IsAbs(r)
}

// RelPath returns file's path relative to the store root dir, with forward slashes, after
// resolving symlinks on both; it fails if file is not inside dir. The enqueue client uses it.
func RelPath(dir, file string) (string, error) {
	root, err := Root("store", dir)
	if err != nil {
		return "", err
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", err
	}
	if !within(root, real) {
		return "", fmt.Errorf("%s is not inside the store directory %s", file, dir)
	}
	rel, err := filepath.Rel(root, real)
	if err != nil {
		return "", err
	}
	return filepath.ToSlash(rel), nil
}

// Refind looks in the store under root for the file of a session whose recorded path is
// gone (renamed or moved while its job was queued). Pi names session files
// "<timestamp>_<sessionId>.jsonl"; a candidate must also carry the id in its header line
// and pass resolve. Exactly one file must match: copies of a session are ambiguous. The
// walk follows no symlink (a symlinked directory or file is not looked into), the header is
// read beneath root as the job reads (sessionio.Beneath), and a file of that name with
// more than one hard link refuses the lookup, naming it: another of its names may be
// another store's file, which the job would then write to.
func Refind(root, oldRel, sessionID string) (rel, abs string, err error) {
	if sessionID == "" || strings.ContainsAny(sessionID, `/\`) {
		return "", "", fmt.Errorf("%w: %q does not exist, and its session id cannot name another file", ErrNotExist, oldRel)
	}
	suffix := "_" + sessionID + ".jsonl"
	var found, refused []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() && p != root {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(d.Name(), suffix) {
			return nil
		}
		r, err := filepath.Rel(root, p)
		if err != nil {
			return nil
		}
		id, err := sessionio.Beneath(root, r).HeaderID()
		switch {
		case errors.Is(err, sessionio.ErrUnsafeFile):
			refused = append(refused, fmt.Sprintf("%s (%v)", filepath.ToSlash(r), errors.Unwrap(err)))
		case id == sessionID:
			found = append(found, filepath.ToSlash(r))
		}
		return nil
	})
	if len(refused) > 0 {
		return "", "", fmt.Errorf("%w: %q does not exist, and the files named for session %s are refused: %s", ErrUnsafePath, oldRel, sessionID, strings.Join(refused, "; "))
	}
	switch len(found) {
	case 0:
		return "", "", fmt.Errorf("%w: %q does not exist, and no file in the store holds session %s", ErrNotExist, oldRel, sessionID)
	case 1:
		abs, err := Resolve(root, found[0])
		return found[0], abs, err
	default:
		return "", "", fmt.Errorf("%w: %q does not exist, and %d files hold session %s (%s): copies are ambiguous", ErrUnsafePath, oldRel, len(found), sessionID, strings.Join(found, ", "))
	}
}

// HeaderID is the session id in the header line of the file rel under root, read beneath
// root as a job reads its file ("" when its header line is no session header; an error
// when the file cannot be opened or its header line is too long to read).
func HeaderID(root, rel string) (string, error) {
	id, err := sessionio.Beneath(root, rel).HeaderID()
	if fe := (*sessionio.FileError)(nil); errors.As(err, &fe) {
		named := *fe
		named.File = filepath.ToSlash(rel) // the job's name for it, not the worker's path
		err = &named
	}
	return id, err
}

// Root is the real path of the root dir of store name: absolute, symlinks resolved.
func Root(name, dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("store %s: %w", name, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("store %s: %w", name, err)
	}
	return real, nil
}
