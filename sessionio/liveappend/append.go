package liveappend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio/picontext"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/jsjson"
)

// Reasons an append is refused. Nothing is written in any of these cases.
var (
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

// ErrChanged (sessionio.ErrChanged): the file's size or leaf is not what the caller planned
// against, or the file was replaced.
var ErrChanged = sessionio.ErrChanged

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
func ExpectOf(s *sessionio.Session) Expect { return Expect{Size: s.Size, LeafID: s.LeafID()} }

// NewCompaction is a compaction entry to append after the leaf.
type NewCompaction struct {
	Summary          string
	FirstKeptEntryID string
	TokensBefore     int
	ReadFiles        []string
	ModifiedFiles    []string
	// Pi 1.x's fields (nil: left out, as Pi 0.73 writes them): the summary's usage, and the
	// systemMessage checkpoint (CurrentSystemMessage of the context being compacted), which
	// is written with the entry's own time as its timestamp.
	Usage         *sessionio.Usage
	SystemMessage *sessionio.Message
}

// NewBranchSummary is a branch_summary entry. It hangs off ParentID (the entry the user
// navigated to, or its parent for a user/custom message target; "" for a new root), as
// Pi's branchWithSummary does. Its fromId is FromID when set (Pi 1.x: the leaf that was
// left), else ParentID or "root" (Pi 0.73).
type NewBranchSummary struct {
	ParentID      string
	FromID        string
	Summary       string
	ReadFiles     []string
	ModifiedFiles []string
	// Usage is the summary's usage (Pi 1.x; nil: left out).
	Usage *sessionio.Usage
}

// Appended describes an entry that was written and where it landed.
//
// A live Pi may append at any instant without a lock. When its lines land between
// compactor's final check and its write (Intruders), the entry hangs off a leaf that is no
// longer the last entry Pi wrote: it is on a side branch, and Restores lists the entries
// written after it so that the file's leaf is Pi's again (see appendEntry). When Pi's lines
// land after it without descending from it (Followers), Pi had not reloaded the file and
// its next entry made the new one a side branch. Either way the entry is Superseded: it is
// in the file, harmless, and not part of the context Pi loads.
type Appended struct {
	ID        string
	ParentID  string
	Timestamp string
	Offset    int64 // where the line starts in the file
	Line      []byte
	// Intruders are ids of entries another writer appended between the final check and
	// this write, in file order.
	Intruders []string
	// Followers are ids of entries another writer appended after this one without
	// descending from it (seen while verifying the write).
	Followers []string
	// Restores are ids of the entries compactor appended to give the leaf back to the
	// other writer's newest entry.
	Restores []string
}

// Superseded reports whether the entry ended on a side branch: the leaf Pi loads does not
// descend from it.
func (a *Appended) Superseded() bool { return len(a.Intruders) > 0 || len(a.Followers) > 0 }

// now and randomID are the clock and the id source for new entries; tests replace them to
// make appended lines reproducible.
var (
	now      = time.Now
	randomID = func() string { return uuid.NewString()[:8] }
)

// Compaction appends a compaction entry to f, the file of the job's reads, if the file
// still matches expect.
func Compaction(ctx context.Context, f *sessionio.File, expect Expect, c NewCompaction) (*Appended, error) {
	return appendEntry(ctx, f, expect, func(s *sessionio.Session) (parent string, path []*sessionio.Entry, build func(id, ts string) jsjson.Fields, err error) {
		path, err = s.Path("")
		if err != nil {
			return "", nil, nil, err
		}
		leaf := path[len(path)-1]
		if leaf.Type == sessionio.TypeCompaction {
			return "", nil, nil, ErrAlreadyCompacted
		}
		if c.Summary == "" {
			return "", nil, nil, fmt.Errorf("%w: empty summary", ErrInvalidEntry)
		}
		var kept *sessionio.Entry
		for _, e := range path {
			if e.ID == c.FirstKeptEntryID {
				kept = e
			}
		}
		if kept == nil {
			return "", nil, nil, fmt.Errorf("%w: firstKeptEntryId %q is not on the current path", ErrInvalidEntry, c.FirstKeptEntryID)
		}
		if kept.IsMessage(sessionio.RoleToolResult) {
			return "", nil, nil, fmt.Errorf("%w: firstKeptEntryId %q is a toolResult; keeping it would orphan it", ErrInvalidEntry, c.FirstKeptEntryID)
		}
		return leaf.ID, path, func(id, ts string) jsjson.Fields {
			fs := jsjson.Fields{
				{Key: "type", Value: sessionio.TypeCompaction},
				{Key: "id", Value: id},
				{Key: "parentId", Value: leaf.ID},
				{Key: "timestamp", Value: ts},
				{Key: "summary", Value: c.Summary},
				{Key: "firstKeptEntryId", Value: c.FirstKeptEntryID},
				{Key: "tokensBefore", Value: c.TokensBefore},
				{Key: "details", Value: fileDetails(c.ReadFiles, c.ModifiedFiles)},
				{Key: "usage", Value: usageValue(c.Usage)},
				{Key: "fromHook", Value: false},
			}
			if c.SystemMessage != nil {
				t, _ := picontext.ParseJSDate(ts)
				fs = append(fs, jsjson.Field{Key: "systemMessage", Value: picontext.WithTimestamp(c.SystemMessage, t).Raw})
			}
			return fs
		}, nil
	})
}

// BranchSummary appends a branch_summary entry to f, the file of the job's reads, if it
// still matches expect.
func BranchSummary(ctx context.Context, f *sessionio.File, expect Expect, b NewBranchSummary) (*Appended, error) {
	return appendEntry(ctx, f, expect, func(s *sessionio.Session) (string, []*sessionio.Entry, func(id, ts string) jsjson.Fields, error) {
		if b.Summary == "" {
			return "", nil, nil, fmt.Errorf("%w: empty summary", ErrInvalidEntry)
		}
		var path []*sessionio.Entry
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
			if b.FromID != "" {
				fromID = b.FromID
			}
			return jsjson.Fields{
				{Key: "type", Value: sessionio.TypeBranchSummary},
				{Key: "id", Value: id},
				{Key: "parentId", Value: parent},
				{Key: "timestamp", Value: ts},
				{Key: "fromId", Value: fromID},
				{Key: "summary", Value: b.Summary},
				{Key: "details", Value: fileDetails(b.ReadFiles, b.ModifiedFiles)},
				{Key: "usage", Value: usageValue(b.Usage)},
				{Key: "fromHook", Value: false},
			}
		}, nil
	})
}

// usageValue is u as Pi writes it (pi-ai's Usage: the token counts, then cost, all of whose
// figures are 0 here), or jsjson.Omit{} for none.
func usageValue(u *sessionio.Usage) any {
	if u == nil {
		return jsjson.Omit{}
	}
	return jsjson.Fields{
		{Key: "input", Value: u.Input},
		{Key: "output", Value: u.Output},
		{Key: "cacheRead", Value: u.CacheRead},
		{Key: "cacheWrite", Value: u.CacheWrite},
		{Key: "totalTokens", Value: u.TotalTokens},
		{Key: "cost", Value: jsjson.Fields{
			{Key: "input", Value: 0}, {Key: "output", Value: 0}, {Key: "cacheRead", Value: 0},
			{Key: "cacheWrite", Value: 0}, {Key: "total", Value: 0},
		}},
	}
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

type planFunc func(s *sessionio.Session) (parent string, path []*sessionio.Entry, build func(id, ts string) jsjson.Fields, err error)

// testHooks maps a file to a function a test wants called at the named points of
// appendEntry on that file ("check": after the reservation, just before the final check;
// "write": after the final check, just before the write;
// "verify": after the write, before it is verified; "restore": just before a restore entry
// is written), so a test can append a line exactly where a live Pi could.
var testHooks sync.Map // string → func(point string)

// testLineFiles maps a file to the lineFile a test wants its lines written through (no
// reservation, as on a file system without fallocate; or a write made to stop short).
var testLineFiles sync.Map // string → func(*os.File) lineFile

func lineFileOf(name string, f *os.File) lineFile {
	if w, ok := testLineFiles.Load(name); ok {
		return w.(func(*os.File) lineFile)(f)
	}
	return osLineFile{File: f}
}

func hook(file, point string) {
	if h, ok := testHooks.Load(file); ok {
		h.(func(string))(point)
	}
}

// appendEntry is the conditional append. It is correct next to a writer that takes no
// lock and may append at any instant (a live Pi: one write per line, each hanging off its
// own in-memory leaf):
//
//  1. The file is opened as every read of it was (File.open: beneath its store's root, no
//     symlink, one hard link; the device and inode of the job's first read). Under an
//     exclusive advisory lock (which serializes compactor processes; Pi ignores it) it is
//     read through the descriptor, checked against expect and the general rules, and the
//     line is encoded. Everything that takes time happens here.
//  2. The line's blocks are reserved (fallocate, keep size: a full disk fails here, before
//     any byte is written). Then the final check is one fstat of the descriptor: the size
//     must still be expect.Size, and the file still the one read (the device and inode
//     pinned, a name left, one link beneath a root). Pi only ever appends, so an unchanged
//     size means an unchanged file.
//     Nothing is read or parsed between this check and the write, which follows at once: a
//     single write(2) of the whole line (preceded by "\n" if the file lacks its final
//     newline) on an O_APPEND descriptor, then fsync. A write that still stops short is
//     taken back when nothing of Pi's came after it, or reported with where its bytes are
//     (appendLine, which every line compactor writes goes through).
//  3. The write lands at the end of the file whatever happened since the check (O_APPEND),
//     but a Pi line may have landed between the check and the write. The region after the
//     planned size is read back to find where the line landed. Lines before it are
//     intruders: Pi's newest entry is now one our entry does not descend from. If our line
//     is then the file's last entry, Pi would load our entry as its leaf and lose its own
//     newest entries from the path; so a restore entry (a "custom" entry, which never
//     enters the context) is appended whose parent is the last entry Pi wrote. The leaf is
//     Pi's again and our entry is a harmless side branch. The restore is verified the same
//     way and repeated if Pi wrote again meanwhile.
//
// The invariant after appendEntry returns: if nobody else wrote after the final check, our
// entry is the file's last entry line, as planned (a compaction hangs off the planned
// leaf; a branch summary moves the leaf to another branch, as Pi's /tree does). Otherwise
// the last entry line is one another writer wrote, or a restore entry whose parent is the
// newest entry another writer wrote: every entry on the other writer's branch is on the
// path Pi loads.
func appendEntry(ctx context.Context, src *sessionio.File, expect Expect, plan planFunc) (*Appended, error) {
	file := src.Name()
	f, err := src.OpenAppend()
	if err != nil {
		var fe *sessionio.FileError
		if errors.As(err, &fe) && fe.File == file {
			err = fe.Err
		}
		return nil, appendError(file, err)
	}
	defer f.Close()
	if err := lockFile(ctx, f); err != nil {
		return nil, appendError(file, err)
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing releases it anyway

	data, s, err := readExpected(f, file, expect)
	if err != nil {
		return nil, err
	}
	ap, buf, err := planLine(s, data, plan)
	if err != nil {
		return nil, appendError(file, err)
	}
	// The verification scan starts at the beginning of the file's last (possibly torn)
	// line, so that a Pi line glued onto a torn tail is seen as the one line it becomes.
	scanFrom := int64(bytes.LastIndexByte(data, '\n') + 1)

	// The line's space is reserved, then the final check, then the write, with nothing in
	// between (appendLine).
	if err := appendLine(lineFileOf(file, f), expect.Size, buf, finalCheck(src, f, expect)); err != nil {
		return nil, appendError(file, err)
	}
	// A rename over the file in the instant between the final check and the write sent the
	// line to a file with no name left: say so rather than report an entry nobody will read.
	if st, err := f.Stat(); err == nil {
		if err := sessionio.Unnamed(st); err != nil {
			return nil, appendError(file, fmt.Errorf("the entry was written to the file read, but that file has no name left (replaced by a rename or deleted as it was written): the session does not hold it: %w", err))
		}
	}
	if err := settle(ctx, src, f, scanFrom, expect, s, ap); err != nil {
		return nil, appendError(file, err)
	}
	return ap, nil
}

// appendError is err of an append to file, as appendEntry reports it.
func appendError(file string, err error) error {
	return &sessionio.FileError{File: file, Err: fmt.Errorf("append: %w", err)}
}

// readExpected reads the locked file f and checks it against expect and the general rules
// (version 3, an assistant message). Everything that takes time happens here, before the
// final check.
func readExpected(f *os.File, file string, expect Expect) ([]byte, *sessionio.Session, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, nil, appendError(file, err)
	}
	if st.Size() != expect.Size {
		return nil, nil, appendError(file, &ChangedError{WantSize: expect.Size, GotSize: st.Size(), WantLeaf: expect.LeafID})
	}
	data := make([]byte, st.Size())
	if _, err := f.ReadAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, appendError(file, err)
	}
	// Light: the checks below need ids, parents, types, roles and timestamps, not content.
	s, err := sessionio.ParseWith(data, file, sessionio.Options{Light: true})
	if err != nil {
		return nil, nil, err
	}
	if s.LeafID() != expect.LeafID {
		return nil, nil, appendError(file, &ChangedError{WantSize: expect.Size, GotSize: st.Size(), WantLeaf: expect.LeafID, GotLeaf: s.LeafID()})
	}
	if s.Version() != 3 {
		return nil, nil, appendError(file, fmt.Errorf("%w (it is v%d; Pi would migrate and rewrite it)", ErrNotV3, s.Version()))
	}
	if !s.HasAssistant() {
		return nil, nil, appendError(file, ErrNoAssistant)
	}
	return data, s, nil
}

// planLine plans the entry on s (read from data) and encodes its line: the entry as it will
// be appended, and the bytes to write (with the newline the file lacks, if it does).
func planLine(s *sessionio.Session, data []byte, plan planFunc) (*Appended, []byte, error) {
	parent, path, build, err := plan(s)
	if err != nil {
		return nil, nil, err
	}
	id := newID(s)
	ts := timestampAfter(path)
	line, err := jsjson.Marshal(build(id, ts))
	if err != nil {
		return nil, nil, err
	}
	buf := make([]byte, 0, len(line)+2)
	if !s.EndsWithNewline && len(data) > 0 {
		buf = append(buf, '\n')
	}
	buf = append(buf, line...)
	buf = append(buf, '\n')
	return &Appended{ID: id, ParentID: parent, Timestamp: ts, Line: line}, buf, nil
}

// finalCheck is the check appendLine makes between the reservation and the write: one
// fstat of f, which must still be the file read, under its name, of expect.Size.
func finalCheck(src *sessionio.File, f *os.File, expect Expect) func() error {
	return func() error {
		hook(src.Name(), "check")
		st, err := f.Stat()
		if err != nil {
			return err
		}
		if err := src.AdmitWrite(st); err != nil {
			return err
		}
		if st.Size() != expect.Size {
			return &ChangedError{WantSize: expect.Size, GotSize: st.Size(), WantLeaf: expect.LeafID}
		}
		hook(src.Name(), "write")
		return nil
	}
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
func newID(s *sessionio.Session) string {
	for range 100 {
		id := randomID()
		if s.Get(id) == nil {
			return id
		}
	}
	return uuid.NewString()
}

// timestampAfter returns now as an ISO-8601 UTC string with milliseconds, moved forward if
// needed so that it is not earlier than any entry or message timestamp on the path: Pi
// ignores usage from assistant messages newer than the latest compaction, so an early
// timestamp would make it compact again at once.
func timestampAfter(path []*sessionio.Entry) string {
	t := now().UTC().Truncate(time.Millisecond)
	latest := float64(t.UnixMilli())
	for _, e := range path {
		if ms, ok := picontext.ParseJSDate(e.Timestamp); ok && ms > latest {
			latest = ms
		}
		if e.Message != nil && e.Message.Timestamp > latest {
			latest = e.Message.Timestamp
		}
	}
	return time.UnixMilli(int64(latest)).UTC().Format("2006-01-02T15:04:05.000Z")
}
