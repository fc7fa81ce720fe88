package sessionio

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"unsafe"
)

// Checkpoints keep, for each session file read whole, what the read learned about the file's
// history: the file's lines up to the context's first entry (the part a later compaction never
// reaches again) as a table of entries (id, parent, type, timestamp, where the line lies)
// with the whole-file facts of that part (entry count, labels, session name, diagnostics).
// A later read of the same file reads only the lines after the checkpoint, as Pi appends
// them, and takes the rest from the table: `compactor context` and `compactor plan` then cost
// what the live context costs, not what the history does.
//
// This is sound because Pi only appends to a version 3 file (pi-session-format.md §2.4:
// it rewrites a file in place only to migrate a v1/v2 file or to replace an invalid header,
// which changes the header). A checkpoint is used only for the same file (device and inode),
// not shorter than the checkpoint, whose header bytes, last 4 KiB before the checkpoint and
// 16 samples spread over the history hash as they did; a table that fails its checksum, or
// a line it points to that no longer parses as the same entry, is ignored. What it cannot see
// is an edit in place of the history that keeps every sampled byte: someone editing a
// session by hand with a tool that writes in place. Such a read stays right up to the
// checkpoint's lines; remove the checkpoint directory (or set COMPACTOR_CHECKPOINTS=off) to
// read every line again.
//
// Lines after the checkpoint that change the history's meaning (a line reusing an id of the
// history, a parent the history was missing) make the read ignore the checkpoint, as do
// v1/v2 files (never checkpointed: migration renumbers them).
type Checkpoints struct {
	// Dir holds one file per session (named by a hash of its absolute path), written
	// atomically (temporary file, rename); created on the first write.
	Dir string
	// MinGain is how many more bytes of history a new checkpoint must cover than the one
	// there (none: 0) to be written; 0 means DefaultMinGain. Below it, reading the lines
	// is cheaper than writing the table again.
	MinGain int64
}

// DefaultMinGain is Checkpoints.MinGain's default: 2 MiB, a few milliseconds of reading.
const DefaultMinGain = 2 << 20

// DefaultCheckpointDir is where compactor keeps checkpoints: $COMPACTOR_CHECKPOINTS, or
// compactor/checkpoints in the user's cache directory ($XDG_CACHE_HOME or ~/.cache). ""
// (no checkpoints) when COMPACTOR_CHECKPOINTS is "off" or there is no cache directory.
func DefaultCheckpointDir(getenv func(string) string) string {
	switch v := getenv("COMPACTOR_CHECKPOINTS"); v {
	case "off", "0", "false", "none":
		return ""
	case "":
	default:
		return v
	}
	dir := getenv("XDG_CACHE_HOME")
	if dir == "" || !filepath.IsAbs(dir) {
		home := getenv("HOME")
		if home == "" {
			return ""
		}
		dir = filepath.Join(home, ".cache")
	}
	return filepath.Join(dir, "compactor", "checkpoints")
}

// ReadTailWith is ReadTail with options.
func ReadTailWith(path string, need Need, o TailOptions) (*Tail, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &FileError{File: path, Err: err}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, &FileError{File: path, Err: err}
	}
	var t *Tail
	if o.Checkpoints == nil || o.Checkpoints.Dir == "" {
		t, err = readTail(f, st.Size(), path, need, o, defaultSizes)
	} else {
		store := &dirStore{dir: o.Checkpoints.Dir, file: path, id: identify(st)}
		if abs, aerr := filepath.Abs(path); aerr == nil {
			store.file = abs
		}
		t, err = readTailCk(f, st.Size(), path, need, o, defaultSizes, store, o.Checkpoints.MinGain, nil)
	}
	if t != nil {
		t.Info = st
	}
	return t, err
}

// ckStore is where one file's checkpoint lives (a directory; memory in tests).
type ckStore interface {
	identity() fileID
	load() []byte
	save(data []byte) error
}

// fileID identifies a file on disk (device and inode); ok is false where unknown.
type fileID struct {
	dev, ino uint64
	ok       bool
}

type dirStore struct {
	dir, file string
	id        fileID
}

func (s *dirStore) identity() fileID { return s.id }

func (s *dirStore) name() string {
	h := sha256.Sum256([]byte(s.file))
	return filepath.Join(s.dir, hex.EncodeToString(h[:16])+".ckpt")
}

func (s *dirStore) load() []byte {
	if !s.id.ok {
		return nil
	}
	b, _ := os.ReadFile(s.name())
	return b
}

func (s *dirStore) save(data []byte) error {
	if !s.id.ok {
		return nil
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	tmp, err := os.CreateTemp(s.dir, ".ckpt-*")
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	_, werr := tmp.Write(data)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), s.name())
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("checkpoint: %w", werr)
	}
	return nil
}

// errCheckpoint makes a read give up its checkpoint and read the file again without one.
type errCheckpoint struct{ reason string }

func (e *errCheckpoint) Error() string { return "checkpoint not usable: " + e.reason }

// readTailCk is readTail with a checkpoint store: it reads with the checkpoint when one is
// there and still matches the file, without it when the file's new lines contradict it, and
// writes a new one after a whole-file read that can cover more history.
//
// chooseAt (tests) picks the entry the checkpoint ends before among the entries read before
// the context's first one (file order), instead of that first one.
func readTailCk(ra io.ReaderAt, size int64, file string, need Need, o TailOptions, sz tailSizes, st ckStore, minGain int64, chooseAt func([]*Entry) *Entry) (*Tail, error) {
	ck := loadCheckpoint(st.load(), st.identity())
	var note string
	if ck != nil {
		if reason := ck.verify(ra, size); reason != "" {
			ck, note = nil, "not used: "+reason
		}
	}
	t, r, err := readTailWith(ra, size, file, need, o, sz, ck, st.identity())
	var ce *errCheckpoint
	if errors.As(err, &ce) {
		ck, note = nil, "not used: "+ce.reason
		t, r, err = readTailWith(ra, size, file, need, o, sz, nil, st.identity())
	}
	if err != nil {
		return nil, err
	}
	if ck != nil && note == "" {
		t.CheckpointAt = ck.at
	}
	t.CheckpointNote = note
	if r == nil || t.Session != nil {
		return t, nil
	}
	if minGain <= 0 {
		minGain = DefaultMinGain
	}
	t.save = func() {
		t.save = nil
		data := r.checkpoint(ck, minGain, chooseAt)
		if data == nil {
			return
		}
		what := "written"
		if err := st.save(data); err != nil {
			what = err.Error()
		}
		if t.CheckpointNote != "" {
			what = t.CheckpointNote + "; " + what
		}
		t.CheckpointNote = what
	}
	if need&NeedFile != 0 {
		t.save()
	}
	return t, nil
}

// The checkpoint file: magic, CRC-32C of the rest, then uvarint-framed fields and the
// fixed-size entry records, the blob of their strings and an open-addressed id table.
const ckMagic = "cpxckp1\n"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const (
	ckRecSize   = 40
	ckSamples   = 16
	ckSampleLen = 256
	ckTailLen   = 4096
	ckAssistant = 1 // record flag: an assistant message
)

// checkpoint is a decoded checkpoint file.
type checkpoint struct {
	id              fileID
	lo, at          int64 // the lines [lo, at) are covered
	lines, headLine int   // lines in [lo, at) (blank ones too); the header's line number
	headHash        uint64
	tailHash        uint64
	samples         []ckSample
	count           int
	hasAssistant    bool
	nameSet         bool
	name            string
	labels          []ckLabel
	diags           []Diagnostic
	orphanParents   []string
	n               int
	recs            []byte // n records of ckRecSize bytes
	blob            string // the records' strings
	table           []byte // uint32 slots: record index + 1, 0 empty
}

type ckSample struct {
	off  int64
	hash uint64
}

type ckLabel struct{ target, label string }

// ckRec is one entry of the history.
type ckRec struct {
	id, parent, typ, ts string
	flags               uint8
	parentIdx           int32 // record index of the parent; -1: no parent; -2: not in the history
	line                int
	off, len            int64
}

// recID is where a record's id lies in the blob.
func recID(b []byte) (off, n uint32) {
	return binary.LittleEndian.Uint32(b[0:]), uint32(binary.LittleEndian.Uint16(b[4:]))
}

func (c *checkpoint) rec(i int) ckRec {
	b := c.recs[i*ckRecSize : (i+1)*ckRecSize]
	le := binary.LittleEndian
	str := func(off, n uint32) string { return c.blob[off : off+n] }
	return ckRec{
		id:        str(recID(b)),
		parent:    str(le.Uint32(b[8:]), uint32(le.Uint16(b[6:]))),
		typ:       str(le.Uint32(b[12:]), uint32(b[16])),
		ts:        str(le.Uint32(b[20:]), uint32(b[17])),
		flags:     b[18],
		parentIdx: int32(le.Uint32(b[24:])),
		line:      int(le.Uint32(b[28:])),
		off:       int64(le.Uint64(b[32:]) & (1<<40 - 1)),
		len:       int64(le.Uint64(b[32:]) >> 40),
	}
}

func ckHash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// lookup returns the record index of id, or -1.
func (c *checkpoint) lookup(id string) int {
	if len(c.table) == 0 {
		return -1
	}
	mask := uint64(len(c.table)/4 - 1)
	for s := ckHash(id) & mask; ; s = (s + 1) & mask {
		v := binary.LittleEndian.Uint32(c.table[s*4:])
		if v == 0 {
			return -1
		}
		b := c.recs[int(v-1)*ckRecSize:]
		if off, n := recID(b); c.blob[off:off+n] == id {
			return int(v - 1)
		}
	}
}

// verify checks the checkpoint against the file; "" when it may be used.
func (c *checkpoint) verify(ra io.ReaderAt, size int64) string {
	if size < c.at {
		return "the file is shorter than the checkpoint"
	}
	h, err := hashRange(ra, 0, c.lo)
	if err != nil || h != c.headHash {
		return "the header changed"
	}
	if h, err := hashRange(ra, max(c.lo, c.at-ckTailLen), c.at); err != nil || h != c.tailHash {
		return "the history changed"
	}
	for _, s := range c.samples {
		if h, err := hashRange(ra, s.off, min(s.off+ckSampleLen, c.at)); err != nil || h != s.hash {
			return "the history changed"
		}
	}
	return ""
}

func hashRange(ra io.ReaderAt, from, to int64) (uint64, error) {
	if to <= from {
		return 0, nil
	}
	b := make([]byte, to-from)
	if _, err := ra.ReadAt(b, from); err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64(), nil
}

// samplePoints are where the samples of [lo, at) start.
func samplePoints(lo, at int64) []int64 {
	span := at - ckTailLen - lo
	if span <= ckSampleLen {
		return nil
	}
	pts := make([]int64, ckSamples)
	for j := range pts {
		pts[j] = lo + (span-ckSampleLen)*int64(j)/(ckSamples-1)
	}
	return pts
}

// ckReader decodes the framed fields.
type ckReader struct {
	b   []byte
	bad bool
}

func (r *ckReader) uint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *ckReader) bytes() []byte {
	n := r.uint()
	if r.bad || n > uint64(len(r.b)) {
		r.bad = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *ckReader) str() string { return string(r.bytes()) }

// count is a number of items that follow, each at least one byte.
func (r *ckReader) count() uint64 {
	n := r.uint()
	if n > uint64(len(r.b)) {
		r.bad = true
		return 0
	}
	return n
}

// loadCheckpoint decodes data; nil when it is missing, damaged, of another format or of
// another file.
func loadCheckpoint(data []byte, id fileID) *checkpoint {
	if len(data) < len(ckMagic)+4 || string(data[:len(ckMagic)]) != ckMagic || !id.ok {
		return nil
	}
	body := data[len(ckMagic)+4:]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(data[len(ckMagic):]) {
		return nil
	}
	r := &ckReader{b: body}
	c := &checkpoint{}
	c.id = fileID{dev: r.uint(), ino: r.uint(), ok: true}
	_ = r.str() // the session's path, for people reading the file
	c.lo, c.at = int64(r.uint()), int64(r.uint())
	c.lines, c.headLine = int(r.uint()), int(r.uint())
	c.headHash, c.tailHash = r.uint(), r.uint()
	for range r.count() {
		c.samples = append(c.samples, ckSample{off: int64(r.uint()), hash: r.uint()})
	}
	c.count = int(r.uint())
	flags := r.uint()
	c.hasAssistant, c.nameSet = flags&1 != 0, flags&2 != 0
	c.name = r.str()
	for range r.count() {
		c.labels = append(c.labels, ckLabel{target: r.str(), label: r.str()})
	}
	for range r.count() {
		c.diags = append(c.diags, Diagnostic{Line: int(r.uint()), EntryID: r.str(), Kind: r.str(), Message: r.str()})
	}
	for range r.count() {
		c.orphanParents = append(c.orphanParents, r.str())
	}
	c.n = int(r.uint())
	c.recs = r.bytes()
	if blob := r.bytes(); len(blob) > 0 {
		// The strings of the records point into data, which is never written to again.
		c.blob = unsafe.String(&blob[0], len(blob))
	}
	c.table = r.bytes()
	if r.bad || len(c.recs) != c.n*ckRecSize || len(c.table)%4 != 0 || c.id != id || c.at <= c.lo ||
		(c.n > 0 && (len(c.table) < 8 || len(c.table)/4&(len(c.table)/4-1) != 0)) {
		return nil
	}
	for i := range c.n { // the strings are in the blob
		b := c.recs[i*ckRecSize:]
		le := binary.LittleEndian
		idOff, idLen := recID(b)
		for _, s := range [][2]uint32{{idOff, idLen}, {le.Uint32(b[8:]), uint32(le.Uint16(b[6:]))},
			{le.Uint32(b[12:]), uint32(b[16])}, {le.Uint32(b[20:]), uint32(b[17])}} {
			if uint64(s[0])+uint64(s[1]) > uint64(len(c.blob)) {
				return nil
			}
		}
		if p := int32(le.Uint32(b[24:])); p < -2 || p >= int32(c.n) {
			return nil
		}
	}
	used := 0 // the id table: indices in range, and free slots (lookups end)
	for i := 0; i < len(c.table); i += 4 {
		if v := binary.LittleEndian.Uint32(c.table[i:]); v > uint32(c.n) {
			return nil
		} else if v > 0 {
			used++
		}
	}
	if used != c.n || used >= len(c.table)/4 {
		return nil
	}
	return c
}

// ckWriter encodes a checkpoint.
type ckWriter struct{ b []byte }

func (w *ckWriter) uint(v uint64)  { w.b = binary.AppendUvarint(w.b, v) }
func (w *ckWriter) bytes(b []byte) { w.uint(uint64(len(b))); w.b = append(w.b, b...) }
func (w *ckWriter) str(s string)   { w.uint(uint64(len(s))); w.b = append(w.b, s...) }

// checkpoint builds the new checkpoint after a whole-file read (NeedFile), or nil when none
// should be written: the history it would cover (up to the line of the context's first entry)
// is not MinGain longer than the checkpoint the read used, or lines after it would make it
// unusable.
func (r *tailReader) checkpoint(old *checkpoint, minGain int64, chooseAt func([]*Entry) *Entry) []byte {
	t := r.t
	if len(t.Path) == 0 || t.Window >= len(t.Path) || !r.root {
		return nil
	}
	first := t.Path[t.Window]
	if first.ck != 0 || first.at.Len == 0 {
		return nil
	}
	// The entries read before the context's first one, in file order; the checkpoint ends
	// before first (chooseAt, tests: another of them).
	var before []*Entry
	for i := len(r.read) - 1; i >= 0 && r.read[i].at.Off <= first.at.Off; i-- {
		before = append(before, r.read[i])
	}
	if chooseAt != nil {
		first = chooseAt(before)
	}
	at := first.at.Off
	prev := r.lo // the old checkpoint's end, or the first line after the header
	if at-prev < minGain {
		return nil
	}
	// The records in file order: the old checkpoint's, then the lines read before at; and
	// the whole-file facts of the history: the old ones, then the new lines in order.
	var items []ckRec
	var c checkpoint
	labels := map[string]string{}
	var labelOrder []string
	oldN := 0
	if old != nil {
		oldN = old.n
		for i := range old.n {
			items = append(items, old.rec(i))
		}
		c.count, c.hasAssistant, c.nameSet, c.name = old.count, old.hasAssistant, old.nameSet, old.name
		for _, l := range old.labels {
			labels[l.target] = l.label
			labelOrder = append(labelOrder, l.target)
		}
		c.orphanParents = append(c.orphanParents, old.orphanParents...)
	}
	newStart := len(items)
	for _, e := range before {
		if e.at.Off >= at {
			break
		}
		if len(e.ID) > 0xffff || len(e.ParentID) > 0xffff || len(e.Type) > 0xff || len(e.Timestamp) > 0xff || e.at.Len >= 1<<24 || e.at.Off >= 1<<40 {
			return nil // beyond what a record holds (never written by Pi)
		}
		rc := ckRec{id: e.ID, parent: e.ParentID, typ: e.Type, ts: e.Timestamp, line: e.Line, off: e.at.Off, len: e.at.Len}
		c.count++
		if e.IsMessage(RoleAssistant) {
			rc.flags |= ckAssistant
			c.hasAssistant = true
		}
		switch e.Type {
		case TypeLabel:
			if _, ok := labels[e.TargetID]; !ok {
				labelOrder = append(labelOrder, e.TargetID)
			}
			labels[e.TargetID] = e.Label
		case TypeSessionInfo:
			c.nameSet, c.name = true, trimJSSpace(e.Name)
		}
		items = append(items, rc)
	}
	if len(items) == newStart && old != nil {
		return nil
	}
	// Winners (the last line per id), numbered in file order; the old records are winners.
	last := make(map[string]int, len(items)-oldN)
	for i := newStart; i < len(items); i++ {
		last[items[i].id] = i
	}
	index := make(map[string]int32, len(last))
	var winners []int
	for i := range items {
		if i >= newStart && last[items[i].id] != i {
			continue
		}
		if i >= newStart {
			index[items[i].id] = int32(len(winners))
		}
		winners = append(winners, i)
	}
	indexOf := func(id string) int32 {
		if v, ok := index[id]; ok {
			return v
		}
		if old != nil {
			if j := old.lookup(id); j >= 0 {
				return int32(j)
			}
		}
		return -2
	}
	// The records.
	var blob []byte
	strs := map[string]uint32{}
	put := func(s string) uint32 {
		if off, ok := strs[s]; ok {
			return off
		}
		off := uint32(len(blob))
		blob = append(blob, s...)
		if len(s) <= 32 {
			strs[s] = off
		}
		return off
	}
	recs := make([]byte, len(winners)*ckRecSize)
	orphans := map[string]bool{}
	for _, p := range c.orphanParents {
		orphans[p] = true
	}
	le := binary.LittleEndian
	for k, i := range winners {
		rc := items[i] // an old record keeps its parent index: the old records come first, in order
		if i >= newStart {
			rc.parentIdx = -1
			if rc.parent != "" {
				rc.parentIdx = indexOf(rc.parent)
			}
			if rc.parentIdx == -2 && !orphans[rc.parent] {
				orphans[rc.parent] = true
				c.orphanParents = append(c.orphanParents, rc.parent)
			}
		}
		b := recs[k*ckRecSize : (k+1)*ckRecSize]
		le.PutUint32(b[0:], put(rc.id))
		le.PutUint16(b[4:], uint16(len(rc.id)))
		le.PutUint16(b[6:], uint16(len(rc.parent)))
		le.PutUint32(b[8:], put(rc.parent))
		le.PutUint32(b[12:], put(rc.typ))
		b[16] = uint8(len(rc.typ))
		b[17] = uint8(len(rc.ts))
		b[18] = rc.flags
		le.PutUint32(b[20:], put(rc.ts))
		le.PutUint32(b[24:], uint32(rc.parentIdx))
		le.PutUint32(b[28:], uint32(rc.line))
		le.PutUint64(b[32:], uint64(rc.off)|uint64(rc.len)<<40)
	}
	// Lines after at must not change what the history means: no id of the history used
	// again, no missing parent of the history supplied (the reads would all fall back).
	for _, e := range r.read {
		if e.at.Off < at {
			break
		}
		if _, ok := index[e.ID]; ok || orphans[e.ID] || (old != nil && old.lookup(e.ID) >= 0) {
			return nil
		}
	}
	slots := 8
	for slots < 2*len(winners) {
		slots *= 2
	}
	table := make([]byte, slots*4)
	for k := range winners {
		b := recs[k*ckRecSize:]
		off, n := recID(b)
		id := string(blob[off : off+n])
		for s := ckHash(id) & uint64(slots-1); ; s = (s + 1) & uint64(slots-1) {
			if le.Uint32(table[s*4:]) == 0 {
				le.PutUint32(table[s*4:], uint32(k+1))
				break
			}
		}
	}
	lines := first.Line - r.headLine - 1
	w := &ckWriter{}
	id := r.id
	w.uint(id.dev)
	w.uint(id.ino)
	w.str(r.t.File)
	w.uint(uint64(r.lo0))
	w.uint(uint64(at))
	w.uint(uint64(lines))
	w.uint(uint64(r.headLine))
	head, err := hashRange(r.ra, 0, r.lo0)
	if err != nil {
		return nil
	}
	tail, err := hashRange(r.ra, max(r.lo0, at-ckTailLen), at)
	if err != nil {
		return nil
	}
	w.uint(head)
	w.uint(tail)
	pts := samplePoints(r.lo0, at)
	w.uint(uint64(len(pts)))
	for _, p := range pts {
		h, err := hashRange(r.ra, p, min(p+ckSampleLen, at))
		if err != nil {
			return nil
		}
		w.uint(uint64(p))
		w.uint(h)
	}
	w.uint(uint64(c.count))
	var flags uint64
	if c.hasAssistant {
		flags |= 1
	}
	if c.nameSet {
		flags |= 2
	}
	w.uint(flags)
	w.str(c.name)
	w.uint(uint64(len(labelOrder)))
	for _, tg := range labelOrder {
		w.str(tg)
		w.str(labels[tg])
	}
	var diags []Diagnostic
	for _, d := range t.Diagnostics {
		if d.Line <= r.headLine+lines {
			diags = append(diags, d)
		}
	}
	w.uint(uint64(len(diags)))
	for _, d := range diags {
		w.uint(uint64(d.Line))
		w.str(d.EntryID)
		w.str(d.Kind)
		w.str(d.Message)
	}
	w.uint(uint64(len(c.orphanParents)))
	for _, p := range c.orphanParents {
		w.str(p)
	}
	w.uint(uint64(len(winners)))
	w.bytes(recs)
	w.bytes(blob)
	w.bytes(table)
	out := make([]byte, 0, len(ckMagic)+4+len(w.b))
	out = append(out, ckMagic...)
	out = binary.LittleEndian.AppendUint32(out, crc32.Checksum(w.b, castagnoli))
	return append(out, w.b...)
}

// fromCheckpoint is find for an id that no line after the checkpoint has.
func (r *tailReader) fromCheckpoint(id string) (*Entry, error) {
	if err := r.checkBoundary(); err != nil {
		return nil, err
	}
	i := r.ck.lookup(id)
	if i < 0 {
		return nil, nil
	}
	return r.materialize(i)
}

// checkBoundary runs once every line after the checkpoint is read: the lines must leave the
// history's meaning as it was (else the read starts again without the checkpoint), and the
// history's facts join the read's.
func (r *tailReader) checkBoundary() error {
	if r.ckChecked {
		return nil
	}
	r.ckChecked = true
	for _, e := range r.read {
		if r.ck.lookup(e.ID) >= 0 {
			return &errCheckpoint{fmt.Sprintf("line %s reuses an id of the history", e.ID)}
		}
	}
	for _, p := range r.ck.orphanParents {
		if r.byID[p] != nil {
			return &errCheckpoint{fmt.Sprintf("entry %s, missing from the history, was appended", p)}
		}
	}
	if r.ck.hasAssistant {
		r.t.HasAssistant = true
	}
	r.ckEnt = make([]*Entry, r.ck.n)
	return nil
}

// materialize is the entry of record i: from its line when the read still needs its
// content (the context reaches back into the history, or the model or thinking level is
// not settled and this entry may settle it), else from the record alone (id, parent, type,
// timestamp, line: a place on the path).
func (r *tailReader) materialize(i int) (*Entry, error) {
	if e := r.ckEnt[i]; e != nil {
		return e, nil
	}
	rc := r.ck.rec(i)
	content := r.keep ||
		!r.model && (rc.typ == TypeModelChange || rc.flags&ckAssistant != 0) ||
		!r.thin && rc.typ == TypeThinkingLevelChange
	var e *Entry
	if !content {
		if len(r.ckSlab) == 0 { // stubs by the hundred: one allocation each
			r.ckSlab = make([]Entry, min(256, r.ck.n))
		}
		e, r.ckSlab = &r.ckSlab[0], r.ckSlab[1:]
		e.Type, e.ID, e.ParentID, e.Timestamp = rc.typ, rc.id, rc.parent, rc.ts
	} else {
		if cap(r.ckBuf) < int(rc.len) {
			r.ckBuf = make([]byte, rc.len)
		}
		line := r.ckBuf[:rc.len]
		if _, err := r.ra.ReadAt(line, rc.off); err != nil && !errors.Is(err, io.EOF) {
			return nil, &FileError{File: r.t.File, Err: err}
		}
		var keep func([]byte) []byte
		if r.keep {
			keep = r.keepLine
		}
		r.p.skeleton = r.skeleton()
		r.p.quiet = true
		e = r.p.parse(line, 0, rc.off, keep)
		r.p.quiet = false
		if e == nil || e.ID != rc.id || e.ParentID != rc.parent || e.Type != rc.typ {
			return nil, &errCheckpoint{fmt.Sprintf("line %d no longer holds entry %s", rc.line, rc.id)}
		}
		r.ckRead = min(r.ckRead, rc.off)
	}
	e.Line = rc.line
	e.at = Span{Off: rc.off, Len: rc.len}
	e.ck = int32(i + 1)
	r.ckEnt[i] = e
	return e, nil
}

// ckParent is the parent of e, an entry of the history: its record's parent index.
func (r *tailReader) ckParent(e *Entry) (*Entry, error) {
	p := int(r.ck.rec(int(e.ck - 1)).parentIdx)
	if p < 0 {
		return nil, nil
	}
	if len(r.walk) > r.ck.n+len(r.read) { // a history with a cycle: not one this package wrote
		return nil, &errCheckpoint{"its history has a parentId cycle"}
	}
	return r.materialize(p)
}

// mergeCheckpointFacts adds the history's whole-file facts to a read of the lines after it.
func (r *tailReader) mergeCheckpointFacts() {
	c, t := r.ck, r.t
	t.EntryCount += c.count
	for _, l := range c.labels {
		if !r.labelSet[l.target] && l.label != "" {
			t.Labels[l.target] = l.label
		}
	}
	if !r.nameSet && c.nameSet {
		t.Name = c.name
	}
}

// diagPhase orders diagnostics as the full read does: line problems, duplicate ids, orphans.
func diagPhase(d Diagnostic) int {
	switch d.Kind {
	case DiagDuplicateID:
		return 1
	case DiagOrphan:
		return 2
	}
	return 0
}

// mergeDiagnostics puts the history's diagnostics (all before the new lines') with the new
// ones, phase by phase.
func mergeDiagnostics(hist, cur []Diagnostic) []Diagnostic {
	if len(hist) == 0 {
		return cur
	}
	out := make([]Diagnostic, 0, len(hist)+len(cur))
	for ph := range 3 {
		for _, d := range hist {
			if diagPhase(d) == ph {
				out = append(out, d)
			}
		}
		for _, d := range cur {
			if diagPhase(d) == ph {
				out = append(out, d)
			}
		}
	}
	return out
}
