package sessionio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"sync"
	"unicode/utf8"
)

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
	// or the first kept entry is not on it), so BuildContext(Path).Messages is exact.
	NeedMessages Need = 1 << iota
	// NeedModel: Path holds the latest model_change or assistant message of the path (or is
	// complete), so BuildContext(Path).Model is exact.
	NeedModel
	// NeedThinking: Path holds the latest thinking_level_change of the path (or is
	// complete), so BuildContext(Path).ThinkingLevel is exact. Pi writes the thinking level
	// when a session starts and again only when it changes, so this often means the root.
	NeedThinking
	// NeedRoot: Path is the whole path (pathIds, path indices).
	NeedRoot
	// NeedFile: the whole file is read, for what only the whole file tells: the entry count,
	// labels, the session name, every diagnostic and parentId cycles anywhere.
	NeedFile
	// NeedUsage: Path reaches back to the newest context message whose usage Pi's budget
	// formula takes (an assistant answer neither aborted nor an error), or to the context's
	// first entry when there is none, so that the context's size (the usage plus the count
	// of the messages after it) is exact from Path alone. Path may start inside the
	// context: for a session with no compaction on its way back, usually a few lines from
	// the end. With TailOptions.DecodeContent the messages of Path are decoded.
	NeedUsage

	// NeedContext is what BuildContext needs to give exactly the full read's context.
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
// BuildContext takes from them is decided by later entries. Entries taken from a
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

	r    *tailReader // for Extend
	save func()      // writes a checkpoint once the whole file is read (ReadTailWith)
}

// Version is the format version found on disk.
func (t *Tail) Version() int { return t.Header.Version }

// Context builds the context from Path (exact for what the read's Need settled).
func (t *Tail) Context() *Context { return BuildContext(t.Path) }

// tailSizes are a tail read's read sizes. The first read from the end is block bytes; each
// further read doubles, up to maxBlock, into one reused buffer (small enough for the caches:
// a block is validated right after it is copied in). Past the context, when the read must go
// far (the root, the whole file), the file is read in batches of batch bytes (doubling up to
// maxBatch), each split among workers that validate and decode in parallel; the entries are
// then indexed in order, as a sequential read would. Tests use tiny sizes to split every line.
type tailSizes struct {
	block, maxBlock, batch, maxBatch, workers int
}

var defaultSizes = tailSizes{block: 64 << 10, maxBlock: 512 << 10, batch: 1 << 20, maxBatch: 8 << 20,
	workers: min(runtime.GOMAXPROCS(0), 4)}

// ReadTail reads what need asks for from the end of a session file, backwards, and stops as
// soon as it is settled; it reads the whole file only when need asks for it (NeedFile,
// NeedRoot), when the path leads there (a session without compaction, a thinking level set
// at the start with NeedThinking) or when it falls back to a full read. The result equals
// the full read's (ReadFile + Path + BuildContext) for everything need settled; the tests
// check that on the corpus and on generated trees. One difference is deliberate: a parentId
// cycle is an error (ErrCycle) when it is among the lines read, as in the full read, but one
// wholly in history the read never reached is not seen (the full read rejects any cycle; Pi's
// walk from the leaf never meets that one).
func ReadTail(path string, need Need) (*Tail, error) {
	return ReadTailWith(path, need, TailOptions{})
}

// ParseTail is ReadTail over bytes in memory.
func ParseTail(data []byte, file string, need Need) (*Tail, error) {
	return readTail(bytes.NewReader(data), int64(len(data)), file, need, TailOptions{}, defaultSizes)
}

// errFallback makes a tail read give up for a full read.
type errFallback struct{ reason string }

func (e *errFallback) Error() string { return e.reason }

func readTail(ra io.ReaderAt, size int64, file string, need Need, o TailOptions, sz tailSizes) (*Tail, error) {
	t, _, err := readTailWith(ra, size, file, need, o, sz, nil, fileID{})
	return t, err
}

// readTailWith is readTail from a checkpoint (nil: none); it returns the reader too (nil
// after a fallback to the full read), for writing the next checkpoint.
func readTailWith(ra io.ReaderAt, size int64, file string, need Need, o TailOptions, sz tailSizes, ck *checkpoint, id fileID) (*Tail, *tailReader, error) {
	r := &tailReader{ra: ra, size: size, need: need, opts: o, t: &Tail{File: file, Size: size}, block: sz.block, maxBlock: sz.maxBlock,
		batch: sz.batch, maxBatch: sz.maxBatch, workers: sz.workers, ck: ck, ckRead: size, id: id}
	r.p = newTailParser(file, need, o)
	err := r.run()
	var fb *errFallback
	if errors.As(err, &fb) {
		t, err := r.fullRead(fb.reason)
		return t, nil, err
	}
	if err != nil {
		return nil, nil, err
	}
	r.t.r = r
	return r.t, r, nil
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
	if t.r == nil { // a full read: it has everything
		return nil
	}
	allowed := NeedMessages | NeedModel | NeedThinking | NeedRoot
	if t.r.opts.FileLater {
		allowed |= NeedFile
	}
	if extra := need &^ allowed; extra != 0 {
		return fmt.Errorf("sessionio: Extend: need %b can only be asked for at the start", extra)
	}
	r := t.r
	if r == nil || need&^r.need == 0 || r.root && need&NeedFile == 0 {
		return nil
	}
	if t.Info != nil { // ReadTail's file is closed: open it again, the same file
		f, err := os.Open(t.File)
		if err != nil {
			return &FileError{File: t.File, Err: err}
		}
		defer f.Close()
		if st, err := f.Stat(); err != nil || !os.SameFile(st, t.Info) || st.Size() < t.Size {
			return &FileError{File: t.File, Err: errors.New("the file was replaced or shrank while it was read")}
		}
		r.ra = f
		defer func() { r.ra = nil }()
	}
	r.need |= need
	var err error
	if len(r.walk) > 0 {
		err = r.walkFrom(r.walk[len(r.walk)-1])
	}
	for err == nil && r.need&NeedFile != 0 {
		var ok bool
		if ok, err = r.advance(); err == nil && !ok {
			if r.ck != nil {
				err = r.checkBoundary()
			}
			break
		}
	}
	if err == nil {
		err = r.finish()
	}
	if err == nil && r.need&NeedFile != 0 && t.save != nil {
		t.save()
	}
	var ce *errCheckpoint
	if errors.As(err, &ce) { // the history's lines contradict the checkpoint: read again without it
		again, _, err := readTailWith(r.ra, r.size, t.File, r.need, r.opts, tailSizes{block: r.block, maxBlock: r.maxBlock,
			batch: r.batch, maxBatch: r.maxBatch, workers: r.workers}, nil, r.id)
		if err != nil {
			return err
		}
		again.Info, again.CheckpointNote = t.Info, "not used: "+ce.reason
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

// tailReader is one tail read: a backward line reader over [lo, end) of the file, the index
// of every entry line read so far, and the walk from the leaf.
type tailReader struct {
	ra   io.ReaderAt
	size int64
	need Need
	opts TailOptions
	t    *Tail
	p    *tailParser // the reader's own; parallel batches have one per worker

	// Lines: [lo, end) is the part after the header line, without the trailing white space
	// Pi's trim drops. buf holds the unread bytes [pos, cur); bytes before pos are not read
	// yet. While keep is set (until the context's first entry is reached), entry lines are
	// copied out of buf (keepLine) and entries point into the copies; afterwards entries keep
	// no raw bytes.
	lo, end, pos, cur int64
	buf, arena        []byte
	nls               []int // offsets in buf of the '\n's before cur, ascending
	block, maxBlock   int
	keep, done        bool

	// Parallel batches (see tailSizes): one parser and buffer per worker; join assembles the
	// lines that cross the workers' parts.
	batch, maxBatch, workers int
	wp                       []*tailParser
	wbuf                     [][]byte
	join                     []byte

	// Entries read, newest first; the index keeps the first one met per id, which is the
	// last line with that id in the file: the one Pi keeps.
	read  []*Entry
	byID  map[string]*Entry
	later map[string]*Entry // duplicate ids: the nearest later line seen (for their diagnostics)
	k     int               // lines met so far, counted from the end (blank ones too)

	// Whole-file facts (NeedFile): labels and name are decided by the last line about them.
	labelSet map[string]bool
	nameSet  bool
	headLine int // line number of the header

	// The walk, leaf first.
	walk        []*Entry
	onWalk      map[*Entry]bool
	comp        *Entry // the latest compaction on the path, once met
	usage       bool   // a message with valid usage was walked before any compaction (NeedUsage)
	window      int    // index in walk of the context's first entry, -1 until known
	model, thin bool
	root        bool
	decoded     bool // the window's content (DecodeContent)

	// A checkpoint (checkpoint.go): the lines [lo0, ck.at) are its history, not read; lo
	// is ck.at. ckEnt holds the history's entries met (by record), ckRead the earliest line
	// of the history read for its content.
	facts     bool // the whole-file facts are done (NeedFile)
	ck        *checkpoint
	ckChecked bool
	ckEnt     []*Entry
	ckBuf     []byte
	ckSlab    []Entry
	ckRead    int64
	lo0       int64
	id        fileID
}

// tailDiag is a diagnostic whose line numbers are known only once the whole file is read:
// k counts lines from the end, phase orders them as the full read does (line problems,
// then duplicate ids, then orphans), seq keeps their order within a line.
type tailDiag struct {
	d        Diagnostic
	phase, k int
	seq      int
	otherK   int // duplicate ids: the earlier line, as k
}

func (r *tailReader) run() error {
	if err := r.readHeader(); err != nil {
		return err
	}
	r.byID = map[string]*Entry{}
	r.later = map[string]*Entry{}
	r.onWalk = map[*Entry]bool{}
	r.window = -1
	r.keep = true
	if r.need&NeedFile != 0 || r.opts.FileLater {
		r.labelSet = map[string]bool{}
		r.t.Labels = map[string]string{}
	}
	// The leaf: the last entry line.
	for len(r.read) == 0 {
		if ok, err := r.readLine(); err != nil {
			return err
		} else if !ok {
			break
		}
	}
	if r.ck != nil && len(r.read) == 0 {
		return &errCheckpoint{"no entry after the checkpoint"}
	}
	if len(r.read) > 0 && r.read[0].ID != "" {
		if err := r.walkPath(); err != nil {
			return err
		}
	} else {
		r.root, r.model, r.thin = true, true, true // no path: nothing to settle
	}
	// Whatever the walk did not need but need or HasAssistant does.
	for r.need&NeedFile != 0 || !r.t.HasAssistant {
		if ok, err := r.advance(); err != nil {
			return err
		} else if !ok {
			if r.ck != nil {
				if err := r.checkBoundary(); err != nil {
					return err
				}
			}
			break
		}
	}
	return r.finish()
}

// readHeader reads and checks the first line, sets lo, end and the header. Anything but a
// plain v3 header on the first line (a v1/v2 file, a BOM-less oddity the full read handles
// with more care, an empty file) is left to the full read.
func (r *tailReader) readHeader() error {
	// The end: Pi trims the whole content, which can shorten the last line.
	n := min(r.size, 64)
	tail := make([]byte, n)
	if _, err := r.ra.ReadAt(tail, r.size-n); err != nil && !errors.Is(err, io.EOF) {
		return &FileError{File: r.t.File, Err: err}
	}
	r.t.EndsWithNewline = n > 0 && tail[n-1] == '\n'
	r.end = r.size
	for {
		if len(tail) == 0 {
			if r.end > 0 { // 64 bytes of white space: let the full read trim them
				return &errFallback{"the file ends in a long run of white space"}
			}
			break
		}
		c, sz := utf8.DecodeLastRune(tail)
		if !isJSSpace(c) {
			break
		}
		tail = tail[:len(tail)-sz]
		r.end -= int64(sz)
	}
	// The header: the first line, after Pi's trim of the start.
	var head []byte
	for sz := int64(4 << 10); ; sz *= 2 {
		sz = min(sz, r.size)
		head = make([]byte, sz)
		if _, err := r.ra.ReadAt(head, 0); err != nil && !errors.Is(err, io.EOF) {
			return &FileError{File: r.t.File, Err: err}
		}
		if bytes.IndexByte(head, '\n') >= 0 || sz == r.size {
			break
		}
	}
	trimmed, line := jsTrimStart(head)
	if len(trimmed) == 0 {
		return &errFallback{"the file is empty or starts with a long run of white space"}
	}
	start := int64(len(head) - len(trimmed))
	lineEnd := int64(len(head))
	if i := bytes.IndexByte(trimmed, '\n'); i >= 0 {
		lineEnd = start + int64(i)
	}
	lineEnd = min(lineEnd, r.end)
	hl := head[start:lineEnd]
	ms, notObject, err := scanObject(hl, nil)
	if err != nil || notObject {
		return &errFallback{"the first line is not a JSON object"}
	}
	var f fields
	f.pick(ms)
	h, ok := header(&f, hl)
	if !ok || string(f.typ) != `"session"` {
		return &errFallback{"the first line is not a session header"}
	}
	if h.Version < 3 {
		return &errFallback{fmt.Sprintf("a version %d file (migrated in memory by the full read)", h.Version)}
	}
	r.t.Header = h
	r.headLine = line
	r.lo = min(lineEnd+1, r.end)
	r.lo0 = r.lo
	if c := r.ck; c != nil {
		if c.lo != r.lo || c.headLine != r.headLine || c.at >= r.end {
			return &errCheckpoint{"the file's start or end does not match"}
		}
		r.lo = c.at
	}
	r.pos, r.cur = r.end, r.end
	r.done = r.lo >= r.end // the header is the last line
	return nil
}

// fill reads the block before pos into the one reused buffer, keeping the unread bytes
// [pos, cur) after it, and lists the new block's line ends in nls. The unread bytes hold no
// '\n' (else a line would be left to return), so only the new block is searched, forwards
// with IndexByte, which is vectorized (LastIndexByte is a byte loop). A block is at least
// as long as the unread bytes, so that a line longer than the blocks is copied O(log n)
// times, not O(n).
func (r *tailReader) fill() error {
	carry := r.buf[:r.cur-r.pos]
	n := min(int64(max(r.block, len(carry))), r.pos-r.lo)
	if r.block < r.maxBlock {
		r.block = min(2*r.block, r.maxBlock)
	}
	total := int(n) + len(carry)
	if cap(r.buf) < total {
		nb := make([]byte, total, max(total, 2*cap(r.buf)))
		copy(nb[n:], carry)
		r.buf = nb
	} else {
		r.buf = r.buf[:total]
		copy(r.buf[n:], carry) // carry is in buf too: copy is a memmove
	}
	if _, err := r.ra.ReadAt(r.buf[:n], r.pos-n); err != nil && !errors.Is(err, io.EOF) {
		return &FileError{File: r.t.File, Err: err}
	}
	r.pos -= n
	r.nls = r.nls[:0]
	for i := 0; i < int(n); {
		j := bytes.IndexByte(r.buf[i:n], '\n')
		if j < 0 {
			break
		}
		r.nls = append(r.nls, i+j)
		i += j + 1
	}
	return nil
}

// decodeContentNow decodes the content of a message whose line is about to be reused (the
// last "content" member, as the full decoding takes) and copies what points into the line:
// the tool calls' arguments. Problems in the content are not reported, as with light reads.
func decodeContentNow(m *Message, ms []member, msgVal []byte) {
	if !sameBytes(m.Raw, msgVal) || ms == nil {
		ms = trustedMembers(m.Raw, nil)
	}
	for i := len(ms) - 1; i >= 0; i-- {
		if memberKey(ms[i].key) == "content" {
			m.Content, _ = decodeContent(ms[i].val)
			break
		}
	}
	for i := range m.Content.Blocks {
		if b := &m.Content.Blocks[i]; b.Arguments != nil {
			b.Arguments = append(json.RawMessage(nil), b.Arguments...)
		}
	}
}

// moved returns the part of to at the place sub has in from (sub is a sub-slice of from).
func moved(sub, from, to []byte) []byte {
	at := cap(from) - cap(sub)
	return to[at : at+len(sub)]
}

// rebase moves members found in from to the same places in to, a copy of from.
func rebase(ms []member, from, to []byte) {
	for i := range ms {
		ms[i].key = moved(ms[i].key, from, to)
		ms[i].val = moved(ms[i].val, from, to)
	}
}

// keepLine copies a line out of the reused buffer, for an entry that keeps its bytes: small
// lines into shared chunks, large ones on their own, so that what stays in memory is about
// the context's own bytes.
func (r *tailReader) keepLine(line []byte) []byte {
	const chunk, large = 256 << 10, 32 << 10
	if len(line) >= large {
		return append([]byte(nil), line...)
	}
	if cap(r.arena)-len(r.arena) < len(line) {
		r.arena = make([]byte, 0, chunk)
	}
	start := len(r.arena)
	r.arena = append(r.arena, line...)
	return r.arena[start:len(r.arena):len(r.arena)]
}

// nextLine returns the line that ends at cur (without its '\n'), or false when the lines
// are all read.
func (r *tailReader) nextLine() ([]byte, bool, error) {
	for {
		if r.done {
			return nil, false, nil
		}
		if k := len(r.nls); k > 0 {
			i := r.nls[k-1]
			r.nls = r.nls[:k-1]
			line := r.buf[i+1 : r.cur-r.pos]
			r.cur = r.pos + int64(i)
			return line, true, nil
		}
		if r.pos == r.lo { // the first line after the header
			r.done = true
			return r.buf[:r.cur-r.pos], true, nil
		}
		if err := r.fill(); err != nil {
			return nil, false, err
		}
	}
}

// readLine reads one line backwards and indexes it if it is an entry. It returns false
// when there are no more lines.
func (r *tailReader) readLine() (bool, error) {
	line, ok, err := r.nextLine()
	if !ok || err != nil {
		return false, err
	}
	lineAt := r.cur + 1 // the line starts after the '\n' at cur, or at lo
	if r.done {
		lineAt = r.lo
	}
	k := r.k
	r.k++
	var keep func([]byte) []byte
	if r.keep {
		keep = r.keepLine
	}
	r.p.skeleton = r.skeleton()
	if e := r.p.parse(line, k, lineAt, keep); e != nil {
		r.index(e)
	}
	return true, nil
}

// advance reads on: a parallel batch when the context is behind and the read has far to go,
// else one line.
func (r *tailReader) advance() (bool, error) {
	far := r.need&(NeedRoot|NeedFile|NeedThinking) != 0
	// A few megabytes go faster alone: the workers' buffers would be fresh memory, and a
	// command often has the other core busy (compactor plan loads its vocabulary then).
	small := r.pos-r.lo < int64(max(r.workers, 4*r.batch))
	if r.keep || !far || r.workers < 2 || r.batch <= 0 || len(r.nls) > 0 || r.done || small {
		return r.readLine()
	}
	return r.readBatch()
}

// batchPart is one worker's part of a batch: the bytes [lo, lo+len(buf)); the lines wholly
// inside, decoded (entries last line first, their tailK counted from 0 at the part's last
// line); the fragments of lines that cross into the parts around it.
type batchPart struct {
	lo         int64
	buf        []byte
	nl         bool   // holds a '\n' (else it is the middle of one long line)
	head, tail []byte // before its first '\n', after its last
	tailAt     int64  // where tail starts in the file
	entries    []*Entry
	lines      int
	err        error
}

// readBatch reads [pos-batch, pos) in parallel and indexes its lines. buf holds no '\n'
// then: only the end of the line that starts before pos (the carry).
func (r *tailReader) readBatch() (bool, error) {
	size := min(int64(r.batch), r.pos-r.lo)
	r.batch = min(2*r.batch, r.maxBatch)
	a := r.pos - size
	w := r.workers
	for len(r.wp) < w {
		r.wp = append(r.wp, newTailParser(r.t.File, r.need, r.opts))
	}
	for len(r.wbuf) < w {
		r.wbuf = append(r.wbuf, nil)
	}
	parts := make([]batchPart, w)
	skeleton := r.skeleton()
	r.p.skeleton = skeleton
	for _, p := range r.wp {
		p.skeleton = skeleton
	}
	var wg sync.WaitGroup
	for i := range parts {
		pt := &parts[i]
		pt.lo = a + size*int64(i)/int64(w)
		hi := a + size*int64(i+1)/int64(w)
		wg.Go(func() { r.readPart(pt, hi, r.wp[i], &r.wbuf[i]) })
	}
	wg.Wait()
	for i := range parts {
		if parts[i].err != nil {
			return false, parts[i].err
		}
	}
	// Top down: the lines after the last '\n' of a part end in the parts above it.
	segs := [][]byte{r.buf[:r.cur-r.pos]}
	for i := w - 1; i >= 0; i-- {
		pt := &parts[i]
		if !pt.nl {
			segs = append(segs, pt.buf)
			continue
		}
		r.join = append(r.join[:0], pt.tail...)
		for j := len(segs) - 1; j >= 0; j-- {
			r.join = append(r.join, segs[j]...)
		}
		k := r.k
		r.k++
		if e := r.p.parse(r.join, k, pt.tailAt, nil); e != nil {
			r.index(e)
		}
		base := r.k
		for _, e := range pt.entries {
			e.tailK += base
			r.index(e)
		}
		p := r.wp[i]
		for _, d := range p.diags {
			d.k += base
			r.p.diags = append(r.p.diags, d)
		}
		p.diags = p.diags[:0]
		r.k += pt.lines
		segs = append(segs[:0], pt.head)
	}
	// What is left is the start of a line that begins before a: the new carry.
	r.join = r.join[:0]
	for j := len(segs) - 1; j >= 0; j-- {
		r.join = append(r.join, segs[j]...)
	}
	r.buf = append(r.buf[:0], r.join...)
	r.pos, r.cur = a, a+int64(len(r.buf))
	r.nls = r.nls[:0]
	return true, nil
}

// readPart is a worker: it reads [pt.lo, hi) and decodes the lines wholly inside, last first.
func (r *tailReader) readPart(pt *batchPart, hi int64, p *tailParser, buf *[]byte) {
	n := int(hi - pt.lo)
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	pt.buf = (*buf)[:n]
	if _, err := r.ra.ReadAt(pt.buf, pt.lo); err != nil && !errors.Is(err, io.EOF) {
		pt.err = &FileError{File: r.t.File, Err: err}
		return
	}
	first, last := bytes.IndexByte(pt.buf, '\n'), bytes.LastIndexByte(pt.buf, '\n')
	if first < 0 {
		return
	}
	pt.nl = true
	pt.head, pt.tail, pt.tailAt = pt.buf[:first], pt.buf[last+1:], pt.lo+int64(last+1)
	body := pt.buf[first+1 : last+1] // complete lines, each with its '\n'
	var ends []int
	for i := 0; i < len(body); {
		j := bytes.IndexByte(body[i:], '\n')
		ends = append(ends, i+j)
		i += j + 1
	}
	for k := len(ends) - 1; k >= 0; k-- {
		start := 0
		if k > 0 {
			start = ends[k-1] + 1
		}
		if e := p.parse(body[start:ends[k]], len(ends)-1-k, pt.lo+int64(first+1+start), nil); e != nil {
			pt.entries = append(pt.entries, e)
		}
	}
	pt.lines = len(ends)
}

// tailParser is the tail read's lineParser: one per goroutine, with the diagnostics of the
// lines it parsed.
type tailParser struct {
	lineParser
	onDisk   bool // TailOptions.LeaveMessagesOnDisk
	content  bool // TailOptions.DecodeContent
	facts    bool // the whole-file facts are kept: report the lines' problems
	diags    []tailDiag
	k        int  // k of the line being decoded
	skeleton bool // leave messages undecoded (tailReader.skeleton)
	quiet    bool // report nothing (a line of a checkpoint's history, reported already)
}

func newTailParser(file string, need Need, o TailOptions) *tailParser {
	p := &tailParser{onDisk: o.LeaveMessagesOnDisk, content: o.DecodeContent, facts: need&NeedFile != 0 || o.FileLater}
	p.dec = decoder{file: file, light: true, diag: func(d Diagnostic) { p.fileDiag(0, p.k, d) }}
	return p
}

// parse decodes a line read at k (lines counted from the end) that starts at lineAt in the
// file; nil when it is no entry. keep copies a line whose entry keeps its bytes (the
// context's lines); without it the entry keeps none.
func (p *tailParser) parse(line []byte, k int, lineAt int64, keep func([]byte) []byte) *Entry {
	switch kind := p.scan(line); kind {
	case lineBlank:
		return nil
	case lineMalformed, lineNotObject, lineHeader:
		p.fileDiag(0, k, skipped(kind, 0))
		return nil
	}
	onDisk := p.onDisk && string(p.fields.typ) == `"message"`
	if keep != nil && !onDisk { // the entry points into a copy of the line: move what was found there
		kept := keep(line)
		rebase(p.members, line, kept)
		rebase(p.msg, line, kept)
		if p.msgVal != nil {
			p.msgVal = moved(p.msgVal, line, kept)
		}
		line = kept
		p.fields = fields{}
		p.fields.pick(p.members)
	}
	if p.skeleton && keep == nil {
		p.fields.message = nil // a position on the path, no more (see tailReader.skeleton)
	}
	p.k = k
	e := p.entry(line, 0)
	e.tailK = k
	e.at = Span{Off: lineAt, Len: int64(len(line))}
	if onDisk {
		if m := e.Message; m != nil {
			m.At = Span{Off: lineAt + int64(cap(line)-cap(m.Raw)), Len: int64(len(m.Raw))}
			if keep != nil && p.content {
				decodeContentNow(m, p.msg, p.msgVal)
			}
		}
	}
	if keep == nil || onDisk {
		e.Raw, e.Details, e.Content, e.Display = nil, nil, nil, nil
		if e.Message != nil {
			e.Message.Raw = nil
		}
	}
	return e
}

func (p *tailParser) fileDiag(phase, k int, d Diagnostic) {
	if !p.facts || p.quiet {
		return
	}
	seq := 0
	if n := len(p.diags); n > 0 && p.diags[n-1].k == k && p.diags[n-1].phase == phase {
		seq = p.diags[n-1].seq + 1
	}
	p.diags = append(p.diags, tailDiag{d: d, phase: phase, k: k, seq: seq})
}

// index records an entry read backwards (after every entry of the lines after it).
func (r *tailReader) index(e *Entry) {
	r.read = append(r.read, e)
	if winner, dup := r.byID[e.ID]; dup {
		if r.labelSet != nil { // (the facts are kept) reported on the nearest later line with the id
			prev := r.later[e.ID]
			if prev == nil {
				prev = winner
			}
			r.p.diags = append(r.p.diags, tailDiag{d: Diagnostic{EntryID: e.ID, Kind: DiagDuplicateID}, phase: 1, k: prev.tailK, otherK: e.tailK})
			r.later[e.ID] = e
		}
	} else {
		r.byID[e.ID] = e
	}
	if e.IsMessage(RoleAssistant) {
		r.t.HasAssistant = true
	}
	if r.labelSet != nil {
		r.t.EntryCount++
		switch e.Type {
		case TypeLabel:
			if !r.labelSet[e.TargetID] {
				r.labelSet[e.TargetID] = true
				if e.Label != "" {
					r.t.Labels[e.TargetID] = e.Label
				}
			}
		case TypeSessionInfo:
			if !r.nameSet {
				r.nameSet = true
				r.t.Name = trimJSSpace(e.Name)
			}
		}
	}
}

// skeleton reports whether lines from here on are needed for their place on the path only:
// the context's lines are behind, the model is settled (the entry that set it is closer to the
// leaf than any still to read, so BuildContext's answer cannot change), an assistant is known
// to exist and no whole-file fact is asked for. Their messages are then not decoded (a
// quarter of the time of a long history): such entries have a nil Message.
func (r *tailReader) skeleton() bool {
	return !r.keep && r.model && r.t.HasAssistant && r.labelSet == nil
}

// settled reports whether the walk has what need asks for.
func (r *tailReader) settled() bool {
	if r.root {
		return true
	}
	if r.need&NeedRoot != 0 {
		return false
	}
	if r.need&NeedMessages != 0 && r.window < 0 {
		return false
	}
	// The usage settles the size when no compaction was met before it (everything walked is
	// then in the context); past a compaction, the context's start settles it.
	if r.need&NeedUsage != 0 && !r.usage && r.window < 0 {
		return false
	}
	if r.need&NeedModel != 0 && !r.model {
		return false
	}
	if r.need&NeedThinking != 0 && !r.thin {
		return false
	}
	return true
}

// walkPath follows parentIds from the leaf, reading further back whenever a parent is not
// indexed yet, until need is settled or the root is reached.
func (r *tailReader) walkPath() error {
	e := r.read[0]
	if err := r.step(e); err != nil {
		return err
	}
	return r.walkFrom(e)
}

// walkFrom goes on from e, the last entry walked.
func (r *tailReader) walkFrom(e *Entry) error {
	for !r.settled() {
		if e.ParentID == "" {
			r.root = true
			return nil
		}
		var p *Entry
		var err error
		if e.ck != 0 { // in the history: its parent is there too (checkBoundary)
			p, err = r.ckParent(e)
		} else {
			p, err = r.find(e.ParentID)
		}
		if err != nil {
			return err
		}
		if p == nil { // an orphan: Pi's walk stops at a missing parent
			r.root = true
			return nil
		}
		if err := r.step(p); err != nil {
			return err
		}
		e = p
	}
	return nil
}

// step adds e to the walk and notes what it settles.
func (r *tailReader) step(e *Entry) error {
	if e.ck == 0 { // (the history of a checkpoint has no cycle, and no parent outside it)
		if r.onWalk[e] {
			return &errFallback{"a parentId cycle on the path"}
		}
		r.onWalk[e] = true
	}
	r.walk = append(r.walk, e)
	if r.comp == nil && e.Type == TypeMessage && e.Message != nil && e.Message.HasValidUsage() {
		r.usage = true
	}
	switch {
	case e.Type == TypeCompaction && r.comp == nil:
		r.comp = e
	case r.comp != nil && r.window < 0 && e.ID == r.comp.FirstKeptEntryID:
		r.window = len(r.walk) - 1
		r.keep = false // the context's bytes are all read: later lines keep none
	}
	switch e.Type {
	case TypeModelChange:
		r.model = true
	case TypeThinkingLevelChange:
		r.thin = true
	case TypeMessage:
		if e.Message != nil && e.Message.Role == RoleAssistant {
			r.model = true
		}
	}
	return nil
}

// find returns the entry with that id, reading further back until it is indexed; nil if the
// file has none.
func (r *tailReader) find(id string) (*Entry, error) {
	for {
		if e := r.byID[id]; e != nil {
			return e, nil
		}
		ok, err := r.advance()
		if err != nil {
			return nil, err
		}
		if !ok {
			if r.ck != nil {
				return r.fromCheckpoint(id)
			}
			return nil, nil
		}
	}
}

// finish turns the walk into Path, decodes the window's content and, after a whole-file
// read, numbers the diagnostics and checks for cycles as the full read does.
func (r *tailReader) finish() error {
	t := r.t
	t.ReadFrom = r.cur + 1 // the last line read starts after the '\n' at cur
	if r.done {
		t.ReadFrom = min(r.lo, r.ckRead)
	}
	if len(r.read) > 0 {
		t.LeafID = r.read[0].ID
	}
	n := len(r.walk)
	t.Path = make([]*Entry, n)
	for i, e := range r.walk {
		t.Path[n-1-i] = e
	}
	t.Complete = r.root
	switch {
	case r.window >= 0:
		t.Window = n - 1 - r.window
	case r.comp != nil: // the first kept entry is not on the path: the context starts at the compaction
		for i, e := range t.Path {
			if e == r.comp {
				t.Window = i
			}
		}
	}
	if r.opts.DecodeContent && !r.decoded {
		r.decoded = true
		for _, e := range t.Path[t.Window:] {
			if m := e.Message; m != nil && m.Raw != nil { // (left on disk: decoded already)
				raw := m.Raw
				*m = Message{}
				_ = decodeMessageInto(m, raw, nil, false) // problems were reported by the light pass
			}
		}
	}
	r.wbuf, r.join = nil, nil // the workers' buffers: Extend makes new ones if it needs them
	if r.need&NeedFile == 0 || r.facts {
		// A cycle among the entries read is one the full read reports; one through history
		// never read is beyond what this read (and Pi's walk from the leaf) reaches.
		return findCycle(t.File, r.inFileOrder(), func(id string) *Entry { return r.byID[id] })
	}
	r.facts = true // the whole-file facts, once (Extend finishes again)
	// Every line is read: k runs from 0 (the last line) to r.k-1 (the first after the header,
	// or after the checkpoint's history).
	base := r.headLine
	if r.ck != nil {
		if err := r.checkBoundary(); err != nil {
			return err
		}
		base += r.ck.lines
		r.mergeCheckpointFacts()
	}
	lineOf := func(k int) int { return base + r.k - k }
	for _, e := range r.read {
		e.Line = lineOf(e.tailK)
	}
	for i := len(r.read) - 1; i >= 0; i-- { // orphans, in file order
		e := r.read[i]
		if e.ParentID == "" || r.byID[e.ID] != e {
			continue
		}
		if r.byID[e.ParentID] == nil && (r.ck == nil || r.ck.lookup(e.ParentID) < 0) {
			r.p.diags = append(r.p.diags, tailDiag{d: orphan(0, e.ID, e.ParentID), phase: 2, k: e.tailK})
		}
	}
	sort.SliceStable(r.p.diags, func(i, j int) bool {
		a, b := r.p.diags[i], r.p.diags[j]
		if a.phase != b.phase {
			return a.phase < b.phase
		}
		if a.k != b.k {
			return a.k > b.k
		}
		return a.seq < b.seq
	})
	t.Diagnostics = make([]Diagnostic, 0, len(r.p.diags))
	for _, td := range r.p.diags {
		d := td.d
		d.Line = lineOf(td.k)
		if td.phase == 1 {
			d = duplicateID(d.Line, d.EntryID, lineOf(td.otherK))
		}
		t.Diagnostics = append(t.Diagnostics, d)
	}
	if r.ck != nil {
		t.Diagnostics = mergeDiagnostics(r.ck.diags, t.Diagnostics)
	}
	if len(t.Diagnostics) == 0 {
		t.Diagnostics = nil
	}
	return findCycle(t.File, r.inFileOrder(), func(id string) *Entry { return r.byID[id] })
}

func (r *tailReader) inFileOrder() []*Entry {
	out := make([]*Entry, len(r.read))
	for i, e := range r.read {
		out[len(r.read)-1-i] = e
	}
	return out
}

// fullRead is the fallback: the whole file through the full reader, as a Tail.
func (r *tailReader) fullRead(reason string) (*Tail, error) {
	data := make([]byte, r.size)
	if _, err := r.ra.ReadAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, &FileError{File: r.t.File, Err: err}
	}
	s, err := ParseWith(data, r.t.File, Options{Light: !r.opts.DecodeContent})
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
