package sessionio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/compactor-dev/compactor/sessionio/jsjson"
)

// Reasons an append is refused. Nothing is written in any of these cases.
var (
	// ErrChanged: the file's size or leaf is not what the caller planned against.
	ErrChanged = errors.New("session changed since it was planned")
	// ErrNotV3: compactor never appends to v1/v2 files (Pi would rewrite them on load).
	ErrNotV3 = errors.New("session is not format version 3")
	// ErrNoAssistant: Pi duplicates the content of a file without an assistant message on
	// its next flush, so compactor leaves such files alone.
	ErrNoAssistant = errors.New("session has no assistant message")
	// ErrAlreadyCompacted: the leaf is already a compaction (Pi: "Already compacted").
	ErrAlreadyCompacted = errors.New("session is already compacted (its leaf is a compaction)")
	// ErrInvalidEntry: the entry to append would not be one Pi can use.
	ErrInvalidEntry = errors.New("invalid entry")
)

// ChangedError details ErrChanged.
type ChangedError struct {
	WantSize, GotSize int64
	WantLeaf, GotLeaf string
}

func (e *ChangedError) Error() string {
	if e.WantSize != e.GotSize {
		return fmt.Sprintf("%v: size %d, planned against %d", ErrChanged, e.GotSize, e.WantSize)
	}
	return fmt.Sprintf("%v: leaf %s, planned against %s", ErrChanged, e.GotLeaf, e.WantLeaf)
}

func (e *ChangedError) Unwrap() error { return ErrChanged }

// Expect is the state of the file the caller planned against. An append happens only if
// the file still has exactly this size and leaf.
type Expect struct {
	Size   int64
	LeafID string
}

// ExpectOf returns the Expect for a session as it was read.
func ExpectOf(s *Session) Expect { return Expect{Size: s.Size, LeafID: s.LeafID()} }

// NewCompaction is a compaction entry to append after the leaf.
type NewCompaction struct {
	Summary          string
	FirstKeptEntryID string
	TokensBefore     int
	ReadFiles        []string
	ModifiedFiles    []string
}

// NewBranchSummary is a branch_summary entry. It hangs off ParentID (the entry the user
// navigated to, or its parent for a user/custom message target; "" for a new root), as
// Pi's branchWithSummary does, and its fromId is ParentID or "root".
type NewBranchSummary struct {
	ParentID      string
	Summary       string
	ReadFiles     []string
	ModifiedFiles []string
}

// Appended describes a line that was written.
type Appended struct {
	ID        string
	ParentID  string
	Timestamp string
	Offset    int64 // where the line starts in the file
	Line      []byte
}

// now and randomID are the clock and the id source for new entries; tests replace them to
// make appended lines reproducible.
var (
	now      = time.Now
	randomID = func() string { return uuid.NewString()[:8] }
)

// AppendCompaction appends a compaction entry to file if the file still matches expect.
func AppendCompaction(ctx context.Context, file string, expect Expect, c NewCompaction) (*Appended, error) {
	return appendEntry(ctx, file, expect, func(s *Session) (parent string, path []*Entry, build func(id, ts string) jsjson.Fields, err error) {
		path, err = s.Path("")
		if err != nil {
			return "", nil, nil, err
		}
		leaf := path[len(path)-1]
		if leaf.Type == TypeCompaction {
			return "", nil, nil, ErrAlreadyCompacted
		}
		if c.Summary == "" {
			return "", nil, nil, fmt.Errorf("%w: empty summary", ErrInvalidEntry)
		}
		var kept *Entry
		for _, e := range path {
			if e.ID == c.FirstKeptEntryID {
				kept = e
			}
		}
		if kept == nil {
			return "", nil, nil, fmt.Errorf("%w: firstKeptEntryId %q is not on the current path", ErrInvalidEntry, c.FirstKeptEntryID)
		}
		if kept.IsMessage(RoleToolResult) {
			return "", nil, nil, fmt.Errorf("%w: firstKeptEntryId %q is a toolResult; keeping it would orphan it", ErrInvalidEntry, c.FirstKeptEntryID)
		}
		return leaf.ID, path, func(id, ts string) jsjson.Fields {
			return jsjson.Fields{
				{Key: "type", Value: TypeCompaction},
				{Key: "id", Value: id},
				{Key: "parentId", Value: leaf.ID},
				{Key: "timestamp", Value: ts},
				{Key: "summary", Value: c.Summary},
				{Key: "firstKeptEntryId", Value: c.FirstKeptEntryID},
				{Key: "tokensBefore", Value: c.TokensBefore},
				{Key: "details", Value: fileDetails(c.ReadFiles, c.ModifiedFiles)},
				{Key: "fromHook", Value: false},
			}
		}, nil
	})
}

// AppendBranchSummary appends a branch_summary entry to file if it still matches expect.
func AppendBranchSummary(ctx context.Context, file string, expect Expect, b NewBranchSummary) (*Appended, error) {
	return appendEntry(ctx, file, expect, func(s *Session) (string, []*Entry, func(id, ts string) jsjson.Fields, error) {
		if b.Summary == "" {
			return "", nil, nil, fmt.Errorf("%w: empty summary", ErrInvalidEntry)
		}
		var path []*Entry
		if b.ParentID != "" {
			if s.Get(b.ParentID) == nil {
				return "", nil, nil, fmt.Errorf("%w: parent %q is not in the file", ErrInvalidEntry, b.ParentID)
			}
			var err error
			if path, err = s.Path(b.ParentID); err != nil {
				return "", nil, nil, err
			}
		}
		return b.ParentID, path, func(id, ts string) jsjson.Fields {
			var parent any
			fromID := "root"
			if b.ParentID != "" {
				parent, fromID = b.ParentID, b.ParentID
			}
			return jsjson.Fields{
				{Key: "type", Value: TypeBranchSummary},
				{Key: "id", Value: id},
				{Key: "parentId", Value: parent},
				{Key: "timestamp", Value: ts},
				{Key: "fromId", Value: fromID},
				{Key: "summary", Value: b.Summary},
				{Key: "details", Value: fileDetails(b.ReadFiles, b.ModifiedFiles)},
				{Key: "fromHook", Value: false},
			}
		}, nil
	})
}

func fileDetails(read, modified []string) jsjson.Fields {
	if read == nil {
		read = []string{}
	}
	if modified == nil {
		modified = []string{}
	}
	return jsjson.Fields{{Key: "readFiles", Value: read}, {Key: "modifiedFiles", Value: modified}}
}

type planFunc func(s *Session) (parent string, path []*Entry, build func(id, ts string) jsjson.Fields, err error)

// appendEntry is the conditional append: under an exclusive advisory lock it re-reads the
// file through the same descriptor, checks it against expect and the general rules, then
// writes one line (preceded by "\n" if the file lacks a final newline) with a single write
// on an O_APPEND descriptor and fsyncs it.
func appendEntry(ctx context.Context, file string, expect Expect, plan planFunc) (*Appended, error) {
	fail := func(err error) (*Appended, error) {
		return nil, &FileError{File: file, Err: fmt.Errorf("append: %w", err)}
	}
	f, err := os.OpenFile(file, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	if !st.Mode().IsRegular() {
		return fail(errors.New("not a regular file"))
	}
	if err := lockFile(ctx, f); err != nil {
		return fail(err)
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing releases it anyway

	if st, err = f.Stat(); err != nil {
		return fail(err)
	}
	if st.Size() != expect.Size {
		return fail(&ChangedError{WantSize: expect.Size, GotSize: st.Size(), WantLeaf: expect.LeafID})
	}
	data := make([]byte, st.Size())
	if _, err := f.ReadAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
		return fail(err)
	}
	// Light: the checks below need ids, parents, types, roles and timestamps, not content.
	s, err := ParseWith(data, file, Options{Light: true})
	if err != nil {
		return nil, err
	}
	if s.LeafID() != expect.LeafID {
		return fail(&ChangedError{WantSize: expect.Size, GotSize: st.Size(), WantLeaf: expect.LeafID, GotLeaf: s.LeafID()})
	}
	if s.Version() != 3 {
		return fail(fmt.Errorf("%w (it is v%d; Pi would migrate and rewrite it)", ErrNotV3, s.Version()))
	}
	if !s.HasAssistant() {
		return fail(ErrNoAssistant)
	}
	parent, path, build, err := plan(s)
	if err != nil {
		return fail(err)
	}
	id := s.newID()
	ts := timestampAfter(path)
	line, err := jsjson.Marshal(build(id, ts))
	if err != nil {
		return fail(err)
	}
	buf := make([]byte, 0, len(line)+2)
	offset := st.Size()
	if !s.EndsWithNewline && st.Size() > 0 {
		buf = append(buf, '\n')
		offset++
	}
	buf = append(buf, line...)
	buf = append(buf, '\n')
	n, err := f.Write(buf)
	if err != nil {
		return fail(fmt.Errorf("write (%d of %d bytes written): %w", n, len(buf), err))
	}
	if err := f.Sync(); err != nil {
		return fail(fmt.Errorf("fsync: %w", err))
	}
	return &Appended{ID: id, ParentID: parent, Timestamp: ts, Offset: offset, Line: line}, nil
}

// lockFile takes an exclusive advisory lock, waiting until ctx is done. Pi takes no lock;
// this serializes compactor processes (and anything else that honours flock).
func lockFile(ctx context.Context, f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return fmt.Errorf("lock: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lock: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// newID returns 8 lowercase hex characters not used in the file, as Pi does (random, with
// up to 100 tries, then a full UUID).
func (s *Session) newID() string {
	for range 100 {
		id := randomID()
		if s.byID[id] == nil {
			return id
		}
	}
	return uuid.NewString()
}

// timestampAfter returns now as an ISO-8601 UTC string with milliseconds, moved forward if
// needed so that it is not earlier than any entry or message timestamp on the path: Pi
// ignores usage from assistant messages newer than the latest compaction, so an early
// timestamp would make it compact again at once.
func timestampAfter(path []*Entry) string {
	t := now().UTC().Truncate(time.Millisecond)
	latest := float64(t.UnixMilli())
	for _, e := range path {
		if ms, ok := ParseJSDate(e.Timestamp); ok && ms > latest {
			latest = ms
		}
		if e.Message != nil && e.Message.Timestamp > latest {
			latest = e.Message.Timestamp
		}
	}
	return time.UnixMilli(int64(latest)).UTC().Format("2006-01-02T15:04:05.000Z")
}
