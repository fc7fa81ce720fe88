package sessionio

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio/jsonscan"
	"io"
	"runtime"
	"sync"
	"unicode/utf8"
)

// The tail read's source of lines: the file read backwards from its end, in blocks, or in
// parallel batches once the context is behind and the read has far to go. Each line becomes
// an entry (line.go) and is indexed by id; the walk (walk.go) asks for a parent by id, and
// the lines are read back until it is indexed.

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

// tailFile is the file a tail read reads.
type tailFile struct {
	ra   io.ReaderAt
	size int64
	name string
}

// readAt fills b from off; the end of the file is no error (the bytes are there: size says so).
func (f *tailFile) readAt(b []byte, off int64) error {
	if _, err := f.ra.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return &FileError{File: f.name, Err: err}
	}
	return nil
}

// errFallback makes a tail read give up for a full read.
type errFallback struct{ reason string }

func (e *errFallback) Error() string { return e.reason }

// backward reads the lines [start, end) of a session file from the end and indexes the
// entries they hold. It is the walk's newest history: a parent it has not indexed yet is
// read back to.
type backward struct {
	file  *tailFile
	p     *tailParser // the read's own; parallel batches have one per worker
	known *known
	facts *tailFacts // nil unless the whole-file facts are kept
	far   bool       // the read must go far back (NeedRoot, NeedFile, NeedThinking): batches pay

	// Bounds: afterHeader is where the line after the header starts; the lines read are
	// [start, end): from afterHeader, or from the end of a checkpoint's history, to the end
	// without the trailing white space Pi's trim drops.
	headerLine              int
	afterHeader, start, end int64

	// buf holds the unread bytes [pos, cur); the bytes before pos are not read yet. The lines
	// are all read (done) once the line at start is.
	pos, cur        int64
	buf             []byte
	lineEnds        []int // offsets in buf of the '\n's before cur, ascending
	block, maxBlock int
	done            bool

	// Parallel batches (see tailSizes): one parser and buffer per worker; join assembles the
	// lines that cross the workers' parts.
	batch, maxBatch, workers int
	workerParsers            []*tailParser
	workerBufs               [][]byte
	join                     []byte

	// Entries read, newest first; byID keeps the first one met per id, which is the last line
	// with that id in the file: the one Pi keeps.
	entries  []*Entry
	byID     map[string]*Entry
	linesMet int             // lines met so far, counted from the end (blank ones too)
	walked   map[*Entry]bool // entries the walk took: a second time is a parentId cycle
}

// readHeader reads and checks the first line and sets the bounds but start. Anything but a
// plain v3 header on the first line (a v1/v2 file, a BOM-less oddity the full read handles
// with more care, an empty file) is left to the full read.
func (b *backward) readHeader() (h Header, endsWithNewline bool, err error) {
	// The end: Pi trims the whole content, which can shorten the last line.
	size := b.file.size
	n := min(size, 64)
	tail := make([]byte, n)
	if err := b.file.readAt(tail, size-n); err != nil {
		return h, false, err
	}
	endsWithNewline = n > 0 && tail[n-1] == '\n'
	b.end = size
	for {
		if len(tail) == 0 {
			if b.end > 0 { // 64 bytes of white space: let the full read trim them
				return h, endsWithNewline, &errFallback{"the file ends in a long run of white space"}
			}
			break
		}
		c, sz := utf8.DecodeLastRune(tail)
		if !isJSSpace(c) {
			break
		}
		tail = tail[:len(tail)-sz]
		b.end -= int64(sz)
	}
	// The header: the first line, after Pi's trim of the start.
	var head []byte
	for sz := int64(4 << 10); ; sz *= 2 {
		sz = min(sz, size)
		head = make([]byte, sz)
		if err := b.file.readAt(head, 0); err != nil {
			return h, endsWithNewline, err
		}
		if bytes.IndexByte(head, '\n') >= 0 || sz == size {
			break
		}
	}
	trimmed, line := jsTrimStart(head)
	if len(trimmed) == 0 {
		return h, endsWithNewline, &errFallback{"the file is empty or starts with a long run of white space"}
	}
	first := int64(len(head) - len(trimmed))
	lineEnd := int64(len(head))
	if i := bytes.IndexByte(trimmed, '\n'); i >= 0 {
		lineEnd = first + int64(i)
	}
	lineEnd = min(lineEnd, b.end)
	hl := head[first:lineEnd]
	ms, notObject, err := jsonscan.ScanObject(hl, nil)
	if err != nil || notObject {
		return h, endsWithNewline, &errFallback{"the first line is not a JSON object"}
	}
	var f fields
	f.pick(ms)
	h, ok := header(&f, hl)
	if !ok || string(f.typ) != `"session"` {
		return h, endsWithNewline, &errFallback{"the first line is not a session header"}
	}
	if h.Version < 3 {
		return h, endsWithNewline, &errFallback{fmt.Sprintf("a version %d file (migrated in memory by the full read)", h.Version)}
	}
	b.headerLine = line
	b.afterHeader = min(lineEnd+1, b.end)
	return h, endsWithNewline, nil
}

// begin makes start (afterHeader, or a checkpoint's end) the first line to read.
func (b *backward) begin(start int64) {
	b.start = start
	b.pos, b.cur = b.end, b.end
	b.done = b.start >= b.end // the header is the last line
	b.byID = map[string]*Entry{}
	b.walked = map[*Entry]bool{}
}

// fill reads the block before pos into the one reused buffer, keeping the unread bytes
// [pos, cur) after it, and lists the new block's line ends. The unread bytes hold no '\n'
// (else a line would be left to return), so only the new block is searched, forwards with
// IndexByte, which is vectorized (LastIndexByte is a byte loop). A block is at least as long
// as the unread bytes, so that a line longer than the blocks is copied O(log n) times, not
// O(n).
func (b *backward) fill() error {
	carry := b.buf[:b.cur-b.pos]
	n := min(int64(max(b.block, len(carry))), b.pos-b.start)
	if b.block < b.maxBlock {
		b.block = min(2*b.block, b.maxBlock)
	}
	total := int(n) + len(carry)
	if cap(b.buf) < total {
		nb := make([]byte, total, max(total, 2*cap(b.buf)))
		copy(nb[n:], carry)
		b.buf = nb
	} else {
		b.buf = b.buf[:total]
		copy(b.buf[n:], carry) // carry is in buf too: copy is a memmove
	}
	if err := b.file.readAt(b.buf[:n], b.pos-n); err != nil {
		return err
	}
	b.pos -= n
	b.lineEnds = b.lineEnds[:0]
	for i := 0; i < int(n); {
		j := bytes.IndexByte(b.buf[i:n], '\n')
		if j < 0 {
			break
		}
		b.lineEnds = append(b.lineEnds, i+j)
		i += j + 1
	}
	return nil
}

// nextLine returns the line that ends at cur (without its '\n'), or false when the lines
// are all read.
func (b *backward) nextLine() ([]byte, bool, error) {
	for {
		if b.done {
			return nil, false, nil
		}
		if k := len(b.lineEnds); k > 0 {
			i := b.lineEnds[k-1]
			b.lineEnds = b.lineEnds[:k-1]
			line := b.buf[i+1 : b.cur-b.pos]
			b.cur = b.pos + int64(i)
			return line, true, nil
		}
		if b.pos == b.start { // the first line after the header
			b.done = true
			return b.buf[:b.cur-b.pos], true, nil
		}
		if err := b.fill(); err != nil {
			return nil, false, err
		}
	}
}

// readLine reads one line backwards and indexes it if it is an entry. It returns false
// when there are no more lines.
func (b *backward) readLine() (bool, error) {
	line, ok, err := b.nextLine()
	if !ok || err != nil {
		return false, err
	}
	lineAt := b.cur + 1 // the line starts after the '\n' at cur, or at start
	if b.done {
		lineAt = b.start
	}
	fromEnd := b.linesMet
	b.linesMet++
	b.p.skeleton = b.known.skeleton()
	if e := b.p.parse(line, fromEnd, lineAt, !b.known.context); e != nil {
		b.index(e)
	}
	return true, nil
}

// advance reads on: a parallel batch when the context is behind and the read has far to go,
// else one line.
func (b *backward) advance() (bool, error) {
	// A few megabytes go faster alone: the workers' buffers would be fresh memory, and a
	// command often has the other core busy (compactor plan loads its vocabulary then).
	small := b.pos-b.start < int64(max(b.workers, 4*b.batch))
	if !b.known.context || !b.far || b.workers < 2 || b.batch <= 0 || len(b.lineEnds) > 0 || b.done || small {
		return b.readLine()
	}
	return b.readBatch()
}

// readFrom is where the earliest line read starts.
func (b *backward) readFrom() int64 {
	if b.done {
		return b.start
	}
	return b.cur + 1 // the last line read starts after the '\n' at cur
}

// index records an entry read backwards (after every entry of the lines after it).
func (b *backward) index(e *Entry) {
	b.entries = append(b.entries, e)
	winner := b.byID[e.ID]
	if winner == nil {
		b.byID[e.ID] = e
	}
	if e.IsMessage(RoleAssistant) {
		b.known.assistant = true
	}
	if b.facts != nil {
		b.facts.add(e, winner)
	}
}

// leaf is the walk's first entry: the last entry line.
func (b *backward) leaf() *Entry {
	e := b.entries[0]
	b.walked[e] = true
	return e
}

// parent returns e's parent, reading back until it is indexed; nil when no line has it.
func (b *backward) parent(e *Entry, _ int) (*Entry, error) {
	for {
		if p := b.byID[e.ParentID]; p != nil {
			if b.walked[p] {
				return nil, &errFallback{"a parentId cycle on the path"}
			}
			b.walked[p] = true
			return p, nil
		}
		ok, err := b.advance()
		if err != nil || !ok {
			return nil, err
		}
	}
}

// batchPart is one worker's part of a batch: the bytes [lo, lo+len(buf)); the lines wholly
// inside, decoded (entries last line first, their fromEnd counted from 0 at the part's last
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

// readBatch reads [pos-batch, pos) in parallel and indexes its lines. lineEnds is empty
// then: buf holds only the end of the line that starts before pos (the carry).
func (b *backward) readBatch() (bool, error) {
	size := min(int64(b.batch), b.pos-b.start)
	b.batch = min(2*b.batch, b.maxBatch)
	a := b.pos - size
	w := b.workers
	for len(b.workerParsers) < w {
		b.workerParsers = append(b.workerParsers, b.p.another())
	}
	for len(b.workerBufs) < w {
		b.workerBufs = append(b.workerBufs, nil)
	}
	parts := make([]batchPart, w)
	skeleton := b.known.skeleton()
	b.p.skeleton = skeleton
	for _, p := range b.workerParsers {
		p.skeleton = skeleton
	}
	var wg sync.WaitGroup
	for i := range parts {
		pt := &parts[i]
		pt.lo = a + size*int64(i)/int64(w)
		hi := a + size*int64(i+1)/int64(w)
		wg.Go(func() { b.readPart(pt, hi, b.workerParsers[i], &b.workerBufs[i]) })
	}
	wg.Wait()
	for i := range parts {
		if parts[i].err != nil {
			return false, parts[i].err
		}
	}
	// Top down: the lines after the last '\n' of a part end in the parts above it.
	segs := [][]byte{b.buf[:b.cur-b.pos]}
	for i := w - 1; i >= 0; i-- {
		pt := &parts[i]
		if !pt.nl {
			segs = append(segs, pt.buf)
			continue
		}
		b.join = append(b.join[:0], pt.tail...)
		for j := len(segs) - 1; j >= 0; j-- {
			b.join = append(b.join, segs[j]...)
		}
		fromEnd := b.linesMet
		b.linesMet++
		if e := b.p.parse(b.join, fromEnd, pt.tailAt, false); e != nil {
			b.index(e)
		}
		base := b.linesMet
		for _, e := range pt.entries {
			e.fromEnd += base
			b.index(e)
		}
		p := b.workerParsers[i]
		for _, d := range p.diags {
			d.fromEnd += base
			b.p.diags = append(b.p.diags, d)
		}
		p.diags = p.diags[:0]
		b.linesMet += pt.lines
		segs = append(segs[:0], pt.head)
	}
	// What is left is the start of a line that begins before a: the new carry.
	b.join = b.join[:0]
	for j := len(segs) - 1; j >= 0; j-- {
		b.join = append(b.join, segs[j]...)
	}
	b.buf = append(b.buf[:0], b.join...)
	b.pos, b.cur = a, a+int64(len(b.buf))
	b.lineEnds = b.lineEnds[:0]
	return true, nil
}

// readPart is a worker: it reads [pt.lo, hi) and decodes the lines wholly inside, last first.
func (b *backward) readPart(pt *batchPart, hi int64, p *tailParser, buf *[]byte) {
	n := int(hi - pt.lo)
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	pt.buf = (*buf)[:n]
	if pt.err = b.file.readAt(pt.buf, pt.lo); pt.err != nil {
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
		if e := p.parse(body[start:ends[k]], len(ends)-1-k, pt.lo+int64(first+1+start), false); e != nil {
			pt.entries = append(pt.entries, e)
		}
	}
	pt.lines = len(ends)
}
