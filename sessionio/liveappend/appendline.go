package liveappend

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// lineFile is what appendLine needs of a session file opened with O_APPEND. *os.File serves
// it through osLineFile; tests substitute a write that stops short. Its errors are
// *os.PathError, as os.File's are (callers tell an I/O failure from bad input by them).
type lineFile interface {
	Name() string
	Stat() (os.FileInfo, error)
	ReadAt(b []byte, off int64) (int, error)
	Truncate(size int64) error
	Sync() error
	// Reserve allocates the blocks of [off, off+n) without changing the file's size;
	// errors.ErrUnsupported when the file system cannot.
	Reserve(off, n int64) error
	// WriteOnce is one write(2) at the end of the file: it may stop short, and it is never
	// followed by a second write for the rest (which could land after another writer's line).
	WriteOnce(b []byte) (int, error)
}

// osLineFile is a session file's descriptor as a lineFile. noReserve turns the
// reservation off, as on a file system without fallocate (tests, and the benchmark's
// baseline).
type osLineFile struct {
	*os.File
	noReserve bool
}

func (f osLineFile) Reserve(off, n int64) error {
	if f.noReserve {
		return errors.ErrUnsupported
	}
	return reserve(f.File, off, n)
}

func (f osLineFile) WriteOnce(b []byte) (n int, err error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	if cerr := rc.Write(func(fd uintptr) bool {
		for {
			n, err = syscall.Write(int(fd), b)
			if !errors.Is(err, syscall.EINTR) { // EINTR: nothing was written
				return true
			}
		}
	}); cerr != nil {
		return 0, cerr
	}
	if err != nil {
		err = &os.PathError{Op: "write", Path: f.Name(), Err: err}
	}
	return max(n, 0), err
}

// TornError is a write that put part of a line into the file which could not be taken
// back: another writer's bytes followed them, or the truncation failed. Offset and Len say
// where the torn bytes are (Offset is -1 if they were not found after the planned size).
// Pi skips a line that is not JSON, but the next line appended after torn bytes is glued to
// them and lost with them: the file needs a person.
type TornError struct {
	Offset, Len int64
	Want        int // the line's length
	Err         error
	Why         string
}

func (e *TornError) Error() string {
	where := fmt.Sprintf("at offset %d", e.Offset)
	if e.Offset < 0 {
		where = "somewhere after the planned end"
	}
	return fmt.Sprintf("write (%d of %d bytes written): %v; the %d torn bytes %s are still in the file without a newline: %s",
		e.Len, e.Want, e.Err, e.Len, where, e.Why)
}

func (e *TornError) Unwrap() error { return e.Err }

// appendLine writes b, whole lines ending in "\n", at the end of f, whose size was planned
// when the caller decided what to write. It is the one way compactor puts bytes into a
// session file: either all of b lands, in one write(2), and is fsynced, or the file is left
// as it was, or the error says where the torn bytes are.
//
//  1. The line's blocks are reserved first (fallocate with keep-size at planned, for
//     len(b): the "\n" a file without its final newline gets is part of b). The file's size
//     does not change, so Pi and compactor's own size checks see nothing; a full disk or a
//     quota fails here, before any byte is written. A file system without fallocate
//     (EOPNOTSUPP, ENOSYS) goes on to the write unreserved. Blocks reserved for a line that
//     is then not written stay beyond the end and serve the next appends (they are never
//     punched out: Pi may have written into them meanwhile).
//  2. final, if any, is the caller's last check, run after the reservation so that nothing
//     but the write follows it.
//  3. One write(2) on the O_APPEND descriptor. Complete: fsync, done. Nothing written: the
//     file is as it was. Short (an I/O error, a file system without fallocate, or a Pi line
//     that landed between the check and the write and used the reserved blocks): the n
//     bytes written are removed again by truncating the file to planned, but only if one
//     fstat right before the truncation finds the size exactly planned+n. Pi only appends
//     and compactor processes hold the flock, so that size means no byte but ours came
//     after planned. Any other size means another writer's bytes are before or after ours:
//     nothing is truncated and TornError says where ours are.
//
// The truncation has a window like the append's final check: a Pi line written between
// that fstat and the truncation would be cut, and unlike a line landing after the final
// check it could not be repaired. It is reached only after a short write, when the disk is
// full or failing and Pi's own write at that instant would most likely fail too; with a
// reservation in place a full disk never gets that far.
func appendLine(f lineFile, planned int64, b []byte, final func() error) error {
	if err := f.Reserve(planned, int64(len(b))); err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("reserve %d bytes at offset %d (nothing written): %w", len(b), planned, err)
	}
	if final != nil {
		if err := final(); err != nil {
			return err
		}
	}
	n, err := f.WriteOnce(b)
	switch {
	case n == len(b) && err == nil:
		if err := f.Sync(); err != nil {
			return fmt.Errorf("fsync: %w", err)
		}
		return nil
	case err == nil: // stopped short without saying why (the disk is full, usually)
		err = &os.PathError{Op: "write", Path: f.Name(), Err: io.ErrShortWrite}
	}
	if n == 0 {
		return fmt.Errorf("write (nothing written): %w", err)
	}
	return takeBack(f, planned, b, n, err)
}

// takeBack removes the n bytes of b a short write left at the end of f, if nothing came
// after planned but them (see appendLine), or reports where they are.
func takeBack(f lineFile, planned int64, b []byte, n int, werr error) error {
	torn := &TornError{Offset: -1, Len: int64(n), Want: len(b), Err: werr}
	st, err := f.Stat()
	if err != nil {
		torn.Why = "fstat before taking them back: " + err.Error()
		return torn
	}
	if st.Size() == planned+int64(n) {
		if err := f.Truncate(planned); err != nil {
			torn.Offset, torn.Why = planned, "truncate: "+err.Error()
			return torn
		}
		_ = f.Sync() // the torn bytes were never synced either; the file is as it was
		return fmt.Errorf("write (%d of %d bytes written, taken back: the file is as it was): %w", n, len(b), werr)
	}
	torn.Why = fmt.Sprintf("the file is %d bytes, not %d: another writer appended too, so nothing was truncated", st.Size(), planned+int64(n))
	if st.Size() > planned {
		region := make([]byte, st.Size()-planned)
		if _, err := f.ReadAt(region, planned); err == nil || errors.Is(err, io.EOF) {
			if i := bytes.Index(region, b[:n]); i >= 0 {
				torn.Offset = planned + int64(i)
			}
		}
	}
	return torn
}
