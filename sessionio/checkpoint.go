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
// This is sound because Pi only appends to a version 3 file: it rewrites a file in place
// only to migrate a v1/v2 file or to replace an invalid header, which changes the header
// (docs/pi-format.md, "How Pi writes its file"). A checkpoint is used only for the same
// file (device and inode), not shorter than the checkpoint, whose header bytes, last 4 KiB
// before the checkpoint and 16 samples spread over the history hash as they did; a table
// that fails its checksum, or a line it points to that no longer parses as the same entry,
// is ignored. What it cannot see is an edit in place of the history that keeps every
// sampled byte: someone editing a session by hand with a tool that writes in place. Such a
// read stays right up to the checkpoint's lines; remove the checkpoint directory (or set
// COMPACTOR_CHECKPOINTS=off) to read every line again.
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

// checkpointStore is where one file's checkpoint lives (a directory; memory in tests).
type checkpointStore interface {
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

// The checkpoint file: magic, CRC-32C of the rest, then uvarint-framed fields and the
// fixed-size entry records, the blob of their strings and an open-addressed id table.
const checkpointMagic = "cpxckp1\n"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const (
	recordSize           = 40
	samplesPerCheckpoint = 16
	sampleLen            = 256
	tailHashLen          = 4096
	recAssistant         = 1 // record flag: an assistant message
)

// checkpoint is a decoded checkpoint file.
type checkpoint struct {
	id              fileID
	file            string // the session's path, for people reading the file
	lo, at          int64  // the lines [lo, at) are covered
	lines, headLine int    // lines in [lo, at) (blank ones too); the header's line number
	headHash        uint64
	tailHash        uint64
	samples         []checkpointSample
	count           int
	hasAssistant    bool
	nameSet         bool
	name            string
	labels          []checkpointLabel
	diags           []Diagnostic
	orphanParents   []string
	n               int
	recs            []byte // n records of recordSize bytes
	blob            string // the records' strings
	table           []byte // uint32 slots: record index + 1, 0 empty
}

type checkpointSample struct {
	off  int64
	hash uint64
}

type checkpointLabel struct{ target, label string }

// checkpointRecord is one entry of the history.
type checkpointRecord struct {
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

// record decodes the checkpoint's i-th record (file order of the winners).
func (c *checkpoint) record(i int) checkpointRecord {
	b := c.recs[i*recordSize : (i+1)*recordSize]
	le := binary.LittleEndian
	str := func(off, n uint32) string { return c.blob[off : off+n] }
	return checkpointRecord{
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

// putRec writes rc into b, a record's bytes; put places a string in the blob and returns
// its offset.
func putRec(b []byte, rc checkpointRecord, put func(string) uint32) {
	le := binary.LittleEndian
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

// idTable is the id table of the n records in recs (lookup's): at least 8 slots and twice
// as many as records, a power of two.
func idTable(recs, blob []byte, n int) []byte {
	le := binary.LittleEndian
	slots := 8
	for slots < 2*n {
		slots *= 2
	}
	table := make([]byte, slots*4)
	for k := range n {
		off, l := recID(recs[k*recordSize:])
		id := string(blob[off : off+l])
		for s := idHash(id) & uint64(slots-1); ; s = (s + 1) & uint64(slots-1) {
			if le.Uint32(table[s*4:]) == 0 {
				le.PutUint32(table[s*4:], uint32(k+1))
				break
			}
		}
	}
	return table
}

func idHash(s string) uint64 {
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
	for s := idHash(id) & mask; ; s = (s + 1) & mask {
		v := binary.LittleEndian.Uint32(c.table[s*4:])
		if v == 0 {
			return -1
		}
		b := c.recs[int(v-1)*recordSize:]
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
	if h, err := hashRange(ra, max(c.lo, c.at-tailHashLen), c.at); err != nil || h != c.tailHash {
		return "the history changed"
	}
	for _, s := range c.samples {
		if h, err := hashRange(ra, s.off, min(s.off+sampleLen, c.at)); err != nil || h != s.hash {
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
	span := at - tailHashLen - lo
	if span <= sampleLen {
		return nil
	}
	pts := make([]int64, samplesPerCheckpoint)
	for j := range pts {
		pts[j] = lo + (span-sampleLen)*int64(j)/(samplesPerCheckpoint-1)
	}
	return pts
}

// checkpointReader decodes the framed fields.
type checkpointReader struct {
	b   []byte
	bad bool
}

func (r *checkpointReader) uint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *checkpointReader) bytes() []byte {
	n := r.uint()
	if r.bad || n > uint64(len(r.b)) {
		r.bad = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *checkpointReader) str() string { return string(r.bytes()) }

// count is a number of items that follow, each at least one byte.
func (r *checkpointReader) count() uint64 {
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
	if len(data) < len(checkpointMagic)+4 || string(data[:len(checkpointMagic)]) != checkpointMagic || !id.ok {
		return nil
	}
	body := data[len(checkpointMagic)+4:]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(data[len(checkpointMagic):]) {
		return nil
	}
	r := &checkpointReader{b: body}
	c := &checkpoint{}
	c.id = fileID{dev: r.uint(), ino: r.uint(), ok: true}
	c.file = r.str()
	c.lo, c.at = int64(r.uint()), int64(r.uint())
	c.lines, c.headLine = int(r.uint()), int(r.uint())
	c.headHash, c.tailHash = r.uint(), r.uint()
	for range r.count() {
		c.samples = append(c.samples, checkpointSample{off: int64(r.uint()), hash: r.uint()})
	}
	c.count = int(r.uint())
	flags := r.uint()
	c.hasAssistant, c.nameSet = flags&1 != 0, flags&2 != 0
	c.name = r.str()
	for range r.count() {
		c.labels = append(c.labels, checkpointLabel{target: r.str(), label: r.str()})
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
	if r.bad || len(c.recs) != c.n*recordSize || len(c.table)%4 != 0 || c.id != id || c.at <= c.lo ||
		(c.n > 0 && (len(c.table) < 8 || len(c.table)/4&(len(c.table)/4-1) != 0)) {
		return nil
	}
	for i := range c.n { // the strings are in the blob
		b := c.recs[i*recordSize:]
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

// encode is the checkpoint file of c (loadCheckpoint's input).
func (c *checkpoint) encode() []byte {
	w := &checkpointWriter{}
	w.uint(c.id.dev)
	w.uint(c.id.ino)
	w.str(c.file)
	w.uint(uint64(c.lo))
	w.uint(uint64(c.at))
	w.uint(uint64(c.lines))
	w.uint(uint64(c.headLine))
	w.uint(c.headHash)
	w.uint(c.tailHash)
	w.uint(uint64(len(c.samples)))
	for _, s := range c.samples {
		w.uint(uint64(s.off))
		w.uint(s.hash)
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
	w.uint(uint64(len(c.labels)))
	for _, l := range c.labels {
		w.str(l.target)
		w.str(l.label)
	}
	w.uint(uint64(len(c.diags)))
	for _, d := range c.diags {
		w.uint(uint64(d.Line))
		w.str(d.EntryID)
		w.str(d.Kind)
		w.str(d.Message)
	}
	w.uint(uint64(len(c.orphanParents)))
	for _, p := range c.orphanParents {
		w.str(p)
	}
	w.uint(uint64(c.n))
	w.bytes(c.recs)
	w.str(c.blob)
	w.bytes(c.table)
	out := make([]byte, 0, len(checkpointMagic)+4+len(w.b))
	out = append(out, checkpointMagic...)
	out = binary.LittleEndian.AppendUint32(out, crc32.Checksum(w.b, castagnoli))
	return append(out, w.b...)
}

// checkpointWriter frames a checkpoint's fields.
type checkpointWriter struct{ b []byte }

func (w *checkpointWriter) uint(v uint64)  { w.b = binary.AppendUvarint(w.b, v) }
func (w *checkpointWriter) bytes(b []byte) { w.uint(uint64(len(b))); w.b = append(w.b, b...) }
func (w *checkpointWriter) str(s string)   { w.uint(uint64(len(s))); w.b = append(w.b, s...) }
