package sessionio

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio/internal/checkpoint"
	"io"
	"os"
	"path/filepath"
)

// The tail read's API: what a caller asks for (Need), how the lines are kept (TailOptions),
// what it gets (Tail), reading on (Extend), and the two fallbacks: a full read when the file
// is not one the tail read reads, and a read without the checkpoint when the file's new lines
// contradict it. How one read is put together: tailread.go.

// Need says what a tail read (ReadTail) must establish before it may stop reading: its goals.
// How the read keeps what it reads is said by TailOptions. A Pi session only grows at its end
// and the leaf is its last line, so the context of a long-lived session depends on its last
// part: the path from the leaf back to the latest compaction and from there to that
// compaction's first kept entry. Everything before is history, which a tail read does not
// touch unless a Need asks for something that lies there.
type Need uint8

const (
	// NeedMessages: Path reaches back to the first entry the context's messages come from
	// (the latest compaction's first kept entry; the root when the path has no compaction
	// or the first kept entry is not on it), so picontext.Build(Path).Messages is exact.
	NeedMessages Need = 1 << iota
	// NeedModel: Path holds the latest model_change or assistant message of the path (or is
	// complete), so picontext.Build(Path).Model is exact.
	NeedModel
	// NeedThinking: Path holds the latest thinking_level_change of the path (or is
	// complete), so picontext.Build(Path).ThinkingLevel is exact. Pi writes the thinking level
	// when a session starts and again only when it changes, so this often means the root.
	NeedThinking
	// NeedRoot: Path is the whole path (pathIds, path indices).
	NeedRoot
	// NeedFile: the whole file is read, for what only the whole file tells: the entry count,
	// labels, the session name, every diagnostic and parentId cycles anywhere.
	NeedFile
	// NeedUsage: Path reaches back to the newest context message whose usage Pi's budget
	// formula takes (an assistant answer neither aborted nor an error, with a usage that is
	// not all zeros and no context edit after it: what both Pi 0.73 and 1.x take), or to the
	// context's first entry when there is none, so that the context's size (the usage plus
	// the count of the messages after it, under either Pi's rules) is exact from Path alone. Path may start inside the
	// context: for a session with no compaction on its way back, usually a few lines from
	// the end. With TailOptions.DecodeContent the messages of Path are decoded.
	NeedUsage

	// NeedContext is what picontext.Build needs to give exactly the full read's context.
	NeedContext = NeedMessages | NeedModel | NeedThinking
)

// TailOptions say how a tail read keeps what it reads (fixed for the read: Extend cannot
// change them) and where its checkpoints are.
type TailOptions struct {
	// DecodeContent: the content of the messages in Path[Window:] is decoded (text, thinking,
	// tool calls); otherwise messages are decoded light (see Options.Light).
	DecodeContent bool
	// LeaveMessagesOnDisk: message entries keep no bytes in memory, not even in the window:
	// Entry.Raw and Message.Raw are nil and Message.At says where the message lies in the
	// file. For a caller that copies messages out (compactor context: its memory then does
	// not grow with the context) or, with DecodeContent, one that only needs their decoded
	// fields (compactor plan: the content is decoded as the line is read, tool-call
	// arguments copied).
	LeaveMessagesOnDisk bool
	// FileLater: the whole-file facts are kept for the lines read, as with NeedFile, so that
	// Extend may ask for NeedFile later (compactor plan reads the context first and the rest
	// of the file while it counts; reading it all lets the read write a checkpoint).
	FileLater bool
	// Checkpoints, if set, are used and written (see Checkpoints; ReadTailWith only).
	Checkpoints *Checkpoints
}

// Tail is what a tail read established about a session file.
//
// Path is the end of the leaf's path, root-most first: its part from Window on (the context's
// first entry to the leaf) holds full entries; entries before Window (read only to settle
// the model, the thinking level or the root) carry their ids, types and decoded fields but
// no raw bytes (Raw, Message.Raw, Details, Content and Display are nil), and those read once
// the model was settled (without NeedFile) no message either (Message is nil): what
// picontext.Build takes from them is decided by later entries. Entries taken from a
// checkpoint's history (ReadTailWith) that the context did not need carry their id, parent,
// type, timestamp and line only.
type Tail struct {
	File string
	// Info is the file's stat when ReadTail opened it (nil from ParseTail).
	Info            os.FileInfo
	Header          Header
	Size            int64
	EndsWithNewline bool
	// LeafID is the id of the last entry line ("" if none), as Session.LeafID.
	LeafID string
	// Path ends at the leaf. Complete: Path[0] is the root (a null or missing parent).
	Path     []*Entry
	Complete bool
	// Window is the index in Path of the context's first entry.
	Window int
	// HasAssistant reports whether the file holds an assistant message (always settled: the
	// read goes on until it finds one, or reads the whole file).
	HasAssistant bool

	// With NeedFile only (zero otherwise): as Session's len(Entries), Labels(), Name() and
	// Diagnostics.
	EntryCount  int
	Labels      map[string]string
	Name        string
	Diagnostics []Diagnostic

	// ReadFrom is where the earliest line the read looked at starts: no line before it (but
	// the header) was read.
	ReadFrom int64
	// Session is the full read when the tail read fell back to one, with the reason (a v1 or
	// v2 file, which migration renumbers; a first line that is not a plain header; a parentId
	// cycle on the path).
	Session  *Session
	Fallback string

	// CheckpointAt is where the history taken from a checkpoint ends (ReadTailWith): the
	// lines before it were not read, only those the context needed from there. 0: no
	// checkpoint was used. CheckpointNote says why one was not used, or "written".
	CheckpointAt   int64
	CheckpointNote string

	r   *tailReader // for Extend
	src *File       // the file ReadTail opened (Extend opens it again)
}

// Version is the format version found on disk.
func (t *Tail) Version() int { return t.Header.Version }

// ReadTail reads what need asks for from the end of a session file, backwards, and stops as
// soon as it is settled; it reads the whole file only when need asks for it (NeedFile,
// NeedRoot), when the path leads there (a session without compaction, a thinking level set
// at the start with NeedThinking) or when it falls back to a full read. The result equals
// the full read's (ReadFile + Path + picontext.Build) for everything need settled; the tests
// check that on the corpus and on generated trees. One difference is deliberate: a parentId
// cycle is an error (ErrCycle) when it is among the lines read, as in the full read, but one
// wholly in history the read never reached is not seen (the full read rejects any cycle; Pi's
// walk from the leaf never meets that one).
func ReadTail(path string, need Need) (*Tail, error) {
	return ReadTailWith(path, need, TailOptions{})
}

// ParseTail is ReadTail over bytes in memory.
func ParseTail(data []byte, file string, need Need) (*Tail, error) {
	return readTail(bytes.NewReader(data), int64(len(data)), file, need, TailOptions{}, defaultSizes, nil)
}

// ReadTailWith is ReadTail with options.
func ReadTailWith(path string, need Need, o TailOptions) (*Tail, error) {
	return Named(path).ReadTail(need, o)
}

// ReadTail is ReadTailWith for this file.
func (file *File) ReadTail(need Need, o TailOptions) (*Tail, error) {
	path := file.Name()
	f, st, err := file.open(os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var cks *checkpointKeeping
	if o.Checkpoints != nil && o.Checkpoints.Dir != "" {
		store := &checkpoint.DirStore{Dir: o.Checkpoints.Dir, File: path, ID: identify(st)}
		if abs, aerr := filepath.Abs(path); aerr == nil {
			store.File = abs
		}
		cks = &checkpointKeeping{store: store, minGain: o.Checkpoints.MinGain}
	}
	t, err := readTail(f, st.Size(), path, need, o, defaultSizes, cks)
	if t != nil {
		t.Info, t.src = st, file
	}
	return t, err
}

// readTail reads a tail with the checkpoints kept in cks (nil: none): with the checkpoint
// when one is there and still matches the file, without it when the file's new lines
// contradict it; after a whole-file read that can cover more history it writes a new one.
func readTail(ra io.ReaderAt, size int64, file string, need Need, o TailOptions, sz tailSizes, cks *checkpointKeeping) (*Tail, error) {
	if cks == nil {
		t, _, err := newTailReader(ra, size, file, need, o, sz, nil, checkpoint.FileID{}).read()
		return t, err
	}
	ck := checkpoint.Decode(cks.store.Load(), cks.store.Identity())
	var note string
	if ck != nil {
		if reason := ck.Verify(ra, size); reason != "" {
			ck, note = nil, "not used: "+reason
		}
	}
	t, r, err := newTailReader(ra, size, file, need, o, sz, ck, cks.store.Identity()).read()
	var ce *errCheckpoint
	if errors.As(err, &ce) {
		ck, note = nil, "not used: "+ce.reason
		t, r, err = newTailReader(ra, size, file, need, o, sz, nil, cks.store.Identity()).read()
	}
	if err != nil {
		return nil, err
	}
	if ck != nil && note == "" {
		t.CheckpointAt = ck.At
	}
	t.CheckpointNote = note
	if r == nil || t.Session != nil {
		return t, nil
	}
	next := *cks
	next.old = ck
	if next.minGain <= 0 {
		next.minGain = DefaultMinGain
	}
	r.next = &next
	if need&NeedFile != 0 {
		r.saveCheckpoint()
	}
	return t, nil
}

// Extend reads on from where the read stopped until need is settled too, as if it had been
// asked for from the start; a caller can start with what it needs first (the context) and
// read the rest of the path (NeedRoot) while it works on that. It may add NeedMessages,
// NeedModel, NeedThinking, NeedRoot and, for a read with TailOptions.FileLater, NeedFile; it
// refuses NeedUsage, and NeedFile for a read without FileLater. Entries of the Path seen
// before stay as they were; Path, Complete and ReadFrom are updated. A Tail of a full read is
// complete already. Extend must not run concurrently with other uses of t (the entries of
// its earlier Path may be used meanwhile).
func (t *Tail) Extend(need Need) error {
	r := t.r
	if r == nil { // a full read: it has everything
		return nil
	}
	allowed := NeedMessages | NeedModel | NeedThinking | NeedRoot
	if r.opts.FileLater {
		allowed |= NeedFile
	}
	if extra := need &^ allowed; extra != 0 {
		return fmt.Errorf("sessionio: Extend: need %b can only be asked for at the start", extra)
	}
	if !r.readsMore(need) {
		return nil
	}
	if t.Info != nil { // ReadTail's file is closed: open it again, the same file
		src := t.src
		if src == nil {
			src = Named(t.File)
		}
		f, st, err := src.open(os.O_RDONLY)
		if err != nil {
			return err
		}
		defer f.Close()
		if !os.SameFile(st, t.Info) || st.Size() < t.Size {
			return &FileError{File: t.File, Err: errors.New("the file was replaced or shrank while it was read")}
		}
		r.file.ra = f
		defer func() { r.file.ra = nil }()
	}
	err := r.extend(need)
	var ce *errCheckpoint
	if errors.As(err, &ce) { // the history's lines contradict the checkpoint: read again without it
		again, _, err := r.again()
		if err != nil {
			return err
		}
		again.Info, again.src, again.CheckpointNote = t.Info, t.src, "not used: "+ce.reason
		*t = *again
		if t.r != nil {
			t.r.t = t // the reader fills in t from now on (a later Extend)
		}
		return nil
	}
	var fb *errFallback
	if errors.As(err, &fb) {
		full, err := r.fullRead(fb.reason)
		if err != nil {
			return err
		}
		*t = *full
		return nil
	}
	return err
}

// fullRead is the fallback: the whole file through the full reader, as a Tail.
func (r *tailReader) fullRead(reason string) (*Tail, error) {
	data := make([]byte, r.file.size)
	if err := r.file.readAt(data, 0); err != nil {
		return nil, err
	}
	s, err := ParseWith(data, r.file.name, Options{Light: !r.opts.DecodeContent})
	if err != nil {
		return nil, err
	}
	return TailOf(s, reason)
}

// TailOf is the Tail of a full read: the whole path, every whole-file fact.
func TailOf(s *Session, reason string) (*Tail, error) {
	path, err := s.Path("")
	if err != nil {
		return nil, err
	}
	t := &Tail{File: s.File, Header: s.Header, Size: s.Size, EndsWithNewline: s.EndsWithNewline,
		LeafID: s.LeafID(), Path: path, Complete: true, HasAssistant: s.HasAssistant(),
		EntryCount: len(s.Entries), Labels: s.Labels(), Name: s.Name(), Diagnostics: s.Diagnostics,
		Session: s, Fallback: reason}
	t.Window = ContextStart(path)
	return t, nil
}

// ContextStart is the index in path of the first entry the context's messages come from:
// the latest compaction's first kept entry, the compaction itself when that entry is not on
// the path, 0 without a compaction. Nothing before it is summarized again by a compaction.
func ContextStart(path []*Entry) int {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i].Type != TypeCompaction {
			continue
		}
		for j := 0; j < i; j++ {
			if path[j].ID == path[i].FirstKeptEntryID {
				return j
			}
		}
		return i
	}
	return 0
}
