package checkpoint

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

// Diagnostic is a sessionio.Diagnostic of the history a checkpoint covers, as it keeps it.
type Diagnostic struct {
	Line    int
	EntryID string
	Kind    string
	Message string
}

// Store is where one file's checkpoint lives (a directory; memory in tests).
type Store interface {
	Identity() FileID
	Load() []byte
	Save(data []byte) error
}

// FileID identifies a file on disk (device and inode); OK is false where unknown.
type FileID struct {
	Dev, Ino uint64
	OK       bool
}

type DirStore struct {
	Dir, File string
	ID        FileID
}

func (s *DirStore) Identity() FileID { return s.ID }

func (s *DirStore) Name() string {
	h := sha256.Sum256([]byte(s.File))
	return filepath.Join(s.Dir, hex.EncodeToString(h[:16])+".ckpt")
}

func (s *DirStore) Load() []byte {
	if !s.ID.OK {
		return nil
	}
	b, _ := os.ReadFile(s.Name())
	return b
}

func (s *DirStore) Save(data []byte) error {
	if !s.ID.OK {
		return nil
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	tmp, err := os.CreateTemp(s.Dir, ".ckpt-*")
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	_, werr := tmp.Write(data)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), s.Name())
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("checkpoint: %w", werr)
	}
	return nil
}

// The checkpoint file: magic, CRC-32C of the rest, then uvarint-framed fields and the
// fixed-size entry records, the blob of their strings and an open-addressed id table.

// Magic starts every checkpoint file (the format's version is in it).
const Magic = "cpxckp1\n"

// Castagnoli is the CRC-32 table of the file's checksum.
var Castagnoli = crc32.MakeTable(crc32.Castagnoli)

// The sizes of the format.
const (
	RecordSize           = 40
	samplesPerCheckpoint = 16
	SampleLen            = 256
	TailHashLen          = 4096
	Assistant            = 1 // record flag: an assistant message
)

// Checkpoint is a decoded checkpoint file.
type Checkpoint struct {
	ID              FileID
	File            string // the session's path, for people reading the file
	Lo, At          int64  // the lines [lo, at) are covered
	Lines, HeadLine int    // lines in [lo, at) (blank ones too); the header's line number
	HeadHash        uint64
	TailHash        uint64
	Samples         []Sample
	Count           int
	HasAssistant    bool
	NameSet         bool
	Name            string
	Labels          []Label
	Diags           []Diagnostic
	OrphanParents   []string
	N               int
	Recs            []byte // N records of RecordSize bytes
	Blob            string // the records' strings
	Table           []byte // uint32 slots: record index + 1, 0 empty
}

// Sample is the hash of SampleLen bytes at Off of the history.
type Sample struct {
	Off  int64
	Hash uint64
}

// Label is the label the history gives its target entry.
type Label struct{ Target, Label string }

// Record is one entry of the history.
type Record struct {
	ID, Parent, Type, Timestamp string
	Flags                       uint8
	ParentIdx                   int32 // record index of the parent; -1: no parent; -2: not in the history
	Line                        int
	Off, Len                    int64
}

// recID is where a record's id lies in the blob.
func recID(b []byte) (off, n uint32) {
	return binary.LittleEndian.Uint32(b[0:]), uint32(binary.LittleEndian.Uint16(b[4:]))
}

// Record decodes the checkpoint's i-th record (file order of the winners).
func (c *Checkpoint) Record(i int) Record {
	b := c.Recs[i*RecordSize : (i+1)*RecordSize]
	le := binary.LittleEndian
	str := func(off, n uint32) string { return c.Blob[off : off+n] }
	return Record{
		ID:        str(recID(b)),
		Parent:    str(le.Uint32(b[8:]), uint32(le.Uint16(b[6:]))),
		Type:      str(le.Uint32(b[12:]), uint32(b[16])),
		Timestamp: str(le.Uint32(b[20:]), uint32(b[17])),
		Flags:     b[18],
		ParentIdx: int32(le.Uint32(b[24:])),
		Line:      int(le.Uint32(b[28:])),
		Off:       int64(le.Uint64(b[32:]) & (1<<40 - 1)),
		Len:       int64(le.Uint64(b[32:]) >> 40),
	}
}

// PutRecord writes rc into b, a record's bytes; put places a string in the blob and returns
// its offset.
func PutRecord(b []byte, rc Record, put func(string) uint32) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], put(rc.ID))
	le.PutUint16(b[4:], uint16(len(rc.ID)))
	le.PutUint16(b[6:], uint16(len(rc.Parent)))
	le.PutUint32(b[8:], put(rc.Parent))
	le.PutUint32(b[12:], put(rc.Type))
	b[16] = uint8(len(rc.Type))
	b[17] = uint8(len(rc.Timestamp))
	b[18] = rc.Flags
	le.PutUint32(b[20:], put(rc.Timestamp))
	le.PutUint32(b[24:], uint32(rc.ParentIdx))
	le.PutUint32(b[28:], uint32(rc.Line))
	le.PutUint64(b[32:], uint64(rc.Off)|uint64(rc.Len)<<40)
}

// IDTable is the id table of the n records in recs (lookup's): at least 8 slots and twice
// as many as records, a power of two.
func IDTable(recs, blob []byte, n int) []byte {
	le := binary.LittleEndian
	slots := 8
	for slots < 2*n {
		slots *= 2
	}
	table := make([]byte, slots*4)
	for k := range n {
		off, l := recID(recs[k*RecordSize:])
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

// Lookup returns the record index of id, or -1.
func (c *Checkpoint) Lookup(id string) int {
	if len(c.Table) == 0 {
		return -1
	}
	mask := uint64(len(c.Table)/4 - 1)
	for s := idHash(id) & mask; ; s = (s + 1) & mask {
		v := binary.LittleEndian.Uint32(c.Table[s*4:])
		if v == 0 {
			return -1
		}
		b := c.Recs[int(v-1)*RecordSize:]
		if off, n := recID(b); c.Blob[off:off+n] == id {
			return int(v - 1)
		}
	}
}

// Verify checks the checkpoint against the file; "" when it may be used.
func (c *Checkpoint) Verify(ra io.ReaderAt, size int64) string {
	if size < c.At {
		return "the file is shorter than the checkpoint"
	}
	h, err := HashRange(ra, 0, c.Lo)
	if err != nil || h != c.HeadHash {
		return "the header changed"
	}
	if h, err := HashRange(ra, max(c.Lo, c.At-TailHashLen), c.At); err != nil || h != c.TailHash {
		return "the history changed"
	}
	for _, s := range c.Samples {
		if h, err := HashRange(ra, s.Off, min(s.Off+SampleLen, c.At)); err != nil || h != s.Hash {
			return "the history changed"
		}
	}
	return ""
}

func HashRange(ra io.ReaderAt, from, to int64) (uint64, error) {
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

// SamplePoints are where the samples of [lo, at) start.
func SamplePoints(lo, at int64) []int64 {
	span := at - TailHashLen - lo
	if span <= SampleLen {
		return nil
	}
	pts := make([]int64, samplesPerCheckpoint)
	for j := range pts {
		pts[j] = lo + (span-SampleLen)*int64(j)/(samplesPerCheckpoint-1)
	}
	return pts
}

// reader decodes the framed fields.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) uint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uint()
	if r.bad || n > uint64(len(r.b)) {
		r.bad = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) str() string { return string(r.bytes()) }

// count is a number of items that follow, each at least one byte.
func (r *reader) count() uint64 {
	n := r.uint()
	if n > uint64(len(r.b)) {
		r.bad = true
		return 0
	}
	return n
}

// Decode decodes data; nil when it is missing, damaged, of another format or of
// another file.
func Decode(data []byte, id FileID) *Checkpoint {
	if len(data) < len(Magic)+4 || string(data[:len(Magic)]) != Magic || !id.OK {
		return nil
	}
	body := data[len(Magic)+4:]
	if crc32.Checksum(body, Castagnoli) != binary.LittleEndian.Uint32(data[len(Magic):]) {
		return nil
	}
	r := &reader{b: body}
	c := &Checkpoint{}
	c.ID = FileID{Dev: r.uint(), Ino: r.uint(), OK: true}
	c.File = r.str()
	c.Lo, c.At = int64(r.uint()), int64(r.uint())
	c.Lines, c.HeadLine = int(r.uint()), int(r.uint())
	c.HeadHash, c.TailHash = r.uint(), r.uint()
	for range r.count() {
		c.Samples = append(c.Samples, Sample{Off: int64(r.uint()), Hash: r.uint()})
	}
	c.Count = int(r.uint())
	flags := r.uint()
	c.HasAssistant, c.NameSet = flags&1 != 0, flags&2 != 0
	c.Name = r.str()
	for range r.count() {
		c.Labels = append(c.Labels, Label{Target: r.str(), Label: r.str()})
	}
	for range r.count() {
		c.Diags = append(c.Diags, Diagnostic{Line: int(r.uint()), EntryID: r.str(), Kind: r.str(), Message: r.str()})
	}
	for range r.count() {
		c.OrphanParents = append(c.OrphanParents, r.str())
	}
	c.N = int(r.uint())
	c.Recs = r.bytes()
	if blob := r.bytes(); len(blob) > 0 {
		// The strings of the records point into data, which is never written to again.
		c.Blob = unsafe.String(&blob[0], len(blob))
	}
	c.Table = r.bytes()
	if r.bad || len(c.Recs) != c.N*RecordSize || len(c.Table)%4 != 0 || c.ID != id || c.At <= c.Lo ||
		(c.N > 0 && (len(c.Table) < 8 || len(c.Table)/4&(len(c.Table)/4-1) != 0)) {
		return nil
	}
	for i := range c.N { // the strings are in the blob
		b := c.Recs[i*RecordSize:]
		le := binary.LittleEndian
		idOff, idLen := recID(b)
		for _, s := range [][2]uint32{{idOff, idLen}, {le.Uint32(b[8:]), uint32(le.Uint16(b[6:]))},
			{le.Uint32(b[12:]), uint32(b[16])}, {le.Uint32(b[20:]), uint32(b[17])}} {
			if uint64(s[0])+uint64(s[1]) > uint64(len(c.Blob)) {
				return nil
			}
		}
		if p := int32(le.Uint32(b[24:])); p < -2 || p >= int32(c.N) {
			return nil
		}
	}
	used := 0 // the id table: indices in range, and free slots (lookups end)
	for i := 0; i < len(c.Table); i += 4 {
		if v := binary.LittleEndian.Uint32(c.Table[i:]); v > uint32(c.N) {
			return nil
		} else if v > 0 {
			used++
		}
	}
	if used != c.N || used >= len(c.Table)/4 {
		return nil
	}
	return c
}

// Encode is the checkpoint file of c (Decode's input).
func (c *Checkpoint) Encode() []byte {
	w := &writer{}
	w.uint(c.ID.Dev)
	w.uint(c.ID.Ino)
	w.str(c.File)
	w.uint(uint64(c.Lo))
	w.uint(uint64(c.At))
	w.uint(uint64(c.Lines))
	w.uint(uint64(c.HeadLine))
	w.uint(c.HeadHash)
	w.uint(c.TailHash)
	w.uint(uint64(len(c.Samples)))
	for _, s := range c.Samples {
		w.uint(uint64(s.Off))
		w.uint(s.Hash)
	}
	w.uint(uint64(c.Count))
	var flags uint64
	if c.HasAssistant {
		flags |= 1
	}
	if c.NameSet {
		flags |= 2
	}
	w.uint(flags)
	w.str(c.Name)
	w.uint(uint64(len(c.Labels)))
	for _, l := range c.Labels {
		w.str(l.Target)
		w.str(l.Label)
	}
	w.uint(uint64(len(c.Diags)))
	for _, d := range c.Diags {
		w.uint(uint64(d.Line))
		w.str(d.EntryID)
		w.str(d.Kind)
		w.str(d.Message)
	}
	w.uint(uint64(len(c.OrphanParents)))
	for _, p := range c.OrphanParents {
		w.str(p)
	}
	w.uint(uint64(c.N))
	w.bytes(c.Recs)
	w.str(c.Blob)
	w.bytes(c.Table)
	out := make([]byte, 0, len(Magic)+4+len(w.b))
	out = append(out, Magic...)
	out = binary.LittleEndian.AppendUint32(out, crc32.Checksum(w.b, Castagnoli))
	return append(out, w.b...)
}

// writer frames a checkpoint's fields.
type writer struct{ b []byte }

func (w *writer) uint(v uint64)  { w.b = binary.AppendUvarint(w.b, v) }
func (w *writer) bytes(b []byte) { w.uint(uint64(len(b))); w.b = append(w.b, b...) }
func (w *writer) str(s string)   { w.uint(uint64(len(s))); w.b = append(w.b, s...) }

// String is "device:inode", or "unknown".
func (id FileID) String() string {
	if !id.OK {
		return "unknown"
	}
	return fmt.Sprintf("%d:%d", id.Dev, id.Ino)
}
