package sessionio

import (
	"errors"
	"github.com/compactor-dev/compactor/sessionio/internal/checkpoint"
	"io"
)

// One tail read, put together: the header and the leaf from the lines read backwards
// (backward.go), the walk from the leaf over them and a checkpoint's table (walk.go,
// checkpointread.go), the lines the need asks for beyond the walk, then the Tail (and the whole-file
// facts, facts.go).

// tailReader is one tail read.
type tailReader struct {
	file  tailFile
	t     *Tail
	need  Need
	opts  TailOptions
	known known
	p     *tailParser // the read's own (parallel batches have one per worker)

	lines backward
	table *checkpointHistory // nil: no checkpoint
	walk  walker
	facts tailFacts // when the whole-file facts are kept (known.facts: NeedFile, FileLater)

	decoded bool               // the window's content is decoded (DecodeContent)
	id      checkpoint.FileID  // the file's identity, for the next checkpoint
	next    *checkpointKeeping // the next checkpoint is to be written (nil: not, or written already)
}

// checkpointKeeping is where a read keeps its checkpoints, and how it writes the next one once it has
// read the whole file.
type checkpointKeeping struct {
	store    checkpoint.Store
	old      *checkpoint.Checkpoint // the checkpoint the read used (nil: none)
	minGain  int64
	chooseAt func([]*Entry) *Entry // tests: see newCheckpoint
}

func newTailReader(ra io.ReaderAt, size int64, file string, need Need, o TailOptions, sz tailSizes, ck *checkpoint.Checkpoint, id checkpoint.FileID) *tailReader {
	r := &tailReader{file: tailFile{ra: ra, size: size, name: file}, t: &Tail{File: file, Size: size},
		need: need, opts: o, id: id}
	r.known.facts = need&NeedFile != 0 || o.FileLater
	r.p = newTailParser(file, o.LeaveMessagesOnDisk, o.DecodeContent, r.known.facts)
	r.lines = backward{file: &r.file, p: r.p, known: &r.known, far: goesFar(need),
		block: sz.block, maxBlock: sz.maxBlock, batch: sz.batch, maxBatch: sz.maxBatch, workers: sz.workers}
	if r.known.facts {
		r.facts = newTailFacts()
		r.lines.facts = &r.facts
		r.t.Labels = r.facts.labels
	}
	var parts []history
	if ck == nil {
		parts = []history{&r.lines}
	} else {
		r.table = &checkpointHistory{ck: ck, file: &r.file, p: r.p, known: &r.known, lines: &r.lines, earliest: size}
		parts = []history{&r.lines, r.table}
	}
	r.walk = walker{parts: parts, known: &r.known, window: -1}
	return r
}

// read runs r; after a fallback (errFallback) it returns the full read's Tail and no reader.
func (r *tailReader) read() (*Tail, *tailReader, error) {
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

// run reads the header and the leaf, walks from the leaf until the need is met, reads the
// lines the need asks for beyond the walk, and finishes the Tail.
func (r *tailReader) run() error {
	h, nl, err := r.lines.readHeader()
	if err != nil {
		return err
	}
	r.t.Header, r.t.EndsWithNewline = h, nl
	start := r.lines.afterHeader
	if r.table != nil {
		if err := r.table.fits(); err != nil {
			return err
		}
		start = r.table.ck.At
	}
	r.lines.begin(start)
	// The leaf: the last entry line.
	for len(r.lines.entries) == 0 {
		if ok, err := r.lines.readLine(); err != nil {
			return err
		} else if !ok {
			break
		}
	}
	if r.table != nil && len(r.lines.entries) == 0 {
		return &errCheckpoint{"no entry after the checkpoint"}
	}
	if len(r.lines.entries) > 0 && r.lines.entries[0].ID != "" {
		r.walk.start(r.lines.leaf())
		if err := r.walk.walkOn(r.need); err != nil {
			return err
		}
	} else {
		r.walk.root, r.known.model, r.known.thinking = true, true, true // no path: nothing to settle
	}
	if err := r.readRest(); err != nil {
		return err
	}
	return r.finish()
}

// readRest reads the lines the walk did not need but the need (NeedFile) or HasAssistant
// does.
func (r *tailReader) readRest() error {
	for r.need&NeedFile != 0 || !r.known.assistant {
		if ok, err := r.lines.advance(); err != nil {
			return err
		} else if !ok {
			return r.linesRead()
		}
	}
	return nil
}

// linesRead is called once every line is read: the lines after a checkpoint are checked
// against it.
func (r *tailReader) linesRead() error {
	if r.table == nil {
		return nil
	}
	return r.table.boundary()
}

// finish turns the walk into Path, decodes the window's content and, after a whole-file
// read, numbers the diagnostics and checks for cycles as the full read does.
func (r *tailReader) finish() error {
	t := r.t
	t.ReadFrom = r.lines.readFrom()
	if r.lines.done && r.table != nil {
		t.ReadFrom = min(t.ReadFrom, r.table.earliest)
	}
	if len(r.lines.entries) > 0 {
		t.LeafID = r.lines.entries[0].ID
	}
	t.Path = r.walk.rootward()
	t.Complete = r.walk.root
	switch w := &r.walk; {
	case w.window >= 0:
		t.Window = len(w.path) - 1 - w.window
	case w.compaction != nil: // the first kept entry is not on the path: the context starts at the compaction
		for i, e := range t.Path {
			if e == w.compaction {
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
	r.lines.workerBufs, r.lines.join = nil, nil // the workers' buffers: Extend makes new ones if it needs them
	t.HasAssistant = r.known.assistant
	if r.need&NeedFile != 0 && !r.facts.done { // every line is read: the whole-file facts, once
		var hist *checkpoint.Checkpoint
		first := r.lines.headerLine + 1 // the line number of the first line read
		if r.table != nil {
			if err := r.table.boundary(); err != nil {
				return err
			}
			hist = r.table.ck
			first += hist.Lines
			r.facts.addHistory(hist)
		}
		t.Diagnostics = r.facts.number(r.lines.entries, r.lines.byID, r.lines.linesMet, first, r.p.diags, hist)
	}
	if r.known.facts {
		t.EntryCount, t.Name = r.facts.count, r.facts.name
	}
	// A cycle among the entries read is one the full read reports; one through history never
	// read is beyond what this read (and Pi's walk from the leaf) reaches.
	return findCycle(t.File, r.inFileOrder(), func(id string) *Entry { return r.lines.byID[id] })
}

func (r *tailReader) inFileOrder() []*Entry {
	es := r.lines.entries
	out := make([]*Entry, len(es))
	for i, e := range es {
		out[len(es)-1-i] = e
	}
	return out
}

// saveCheckpoint writes the next checkpoint after a whole-file read, once, and says so in
// CheckpointNote.
func (r *tailReader) saveCheckpoint() {
	next := r.next
	r.next = nil
	c := newCheckpoint(r.t, &r.lines, r.id, next.old, next.minGain, next.chooseAt)
	if c == nil {
		return
	}
	what := "written"
	if err := next.store.Save(c.Encode()); err != nil {
		what = err.Error()
	}
	if r.t.CheckpointNote != "" {
		what = r.t.CheckpointNote + "; " + what
	}
	r.t.CheckpointNote = what
}

// readsMore reports whether need asks for more than the read has (Tail.Extend).
func (r *tailReader) readsMore(need Need) bool {
	return need&^r.need != 0 && (!r.walk.root || need&NeedFile != 0)
}

// extend reads on until need is settled too (Tail.Extend).
func (r *tailReader) extend(need Need) error {
	r.need |= need
	r.lines.far = goesFar(r.need)
	err := r.walk.walkOn(r.need)
	if err == nil {
		err = r.readRest()
	}
	if err == nil {
		err = r.finish()
	}
	if err == nil && r.need&NeedFile != 0 && r.next != nil {
		r.saveCheckpoint()
	}
	return err
}

// again is the same read from the start without its checkpoint, with the read sizes as they
// have grown.
func (r *tailReader) again() (*Tail, *tailReader, error) {
	sz := tailSizes{block: r.lines.block, maxBlock: r.lines.maxBlock, batch: r.lines.batch, maxBatch: r.lines.maxBatch, workers: r.lines.workers}
	return newTailReader(r.file.ra, r.file.size, r.file.name, r.need, r.opts, sz, nil, r.id).read()
}

// goesFar reports whether a read with need goes far back (the root, the whole file, a
// thinking level often set at the start): far from the context, batches pay.
func goesFar(need Need) bool { return need&(NeedRoot|NeedFile|NeedThinking) != 0 }
