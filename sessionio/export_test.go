package sessionio

import (
	"bytes"
	"encoding/binary"
	"github.com/compactor-dev/compactor/sessionio/internal/checkpoint"
	"hash/crc32"
)

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// MemCheckpoint is a checkpoint store in memory, for one file. Anywhere, if not 0, writes
// checkpoints at another entry before the context's first one: the one Anywhere-1 parts of
// the way (of 2) from the first entry after the last checkpoint.
type MemCheckpoint struct {
	Data     []byte
	Anywhere uint64
}

func (m *MemCheckpoint) chooseAt() func([]*Entry) *Entry {
	if m.Anywhere == 0 {
		return nil
	}
	return func(es []*Entry) *Entry { return es[int(m.Anywhere-1)*(len(es)-1)/2] }
}

func (m *MemCheckpoint) Identity() checkpoint.FileID {
	return checkpoint.FileID{Dev: 1, Ino: 1, OK: true}
}
func (m *MemCheckpoint) Load() []byte { return m.Data }
func (m *MemCheckpoint) Save(b []byte) error {
	m.Data = append([]byte(nil), b...)
	return nil
}

// ParseTailCheckpointed is ParseTail with options (o.Checkpoints aside), with checkpoints kept
// in st (nil: none), written when they gain minGain bytes, and with blocks of first bytes
// growing to at most maxBlock and parallel batches of batch bytes (0: none) growing to at most
// 4*batch, split among workers, so that tests can split lines across blocks and parts.
func ParseTailCheckpointed(data []byte, file string, need Need, o TailOptions, st *MemCheckpoint, minGain int64, first, maxBlock, batch, workers int) (*Tail, error) {
	sz := tailSizes{block: first, maxBlock: maxBlock, batch: batch, maxBatch: 4 * batch, workers: workers}
	if st == nil {
		return readTail(bytesReader(data), int64(len(data)), file, need, o, sz, nil)
	}
	return readTail(bytesReader(data), int64(len(data)), file, need, o, sz, &checkpointKeeping{store: st, minGain: minGain, chooseAt: st.chooseAt()})
}

// SealCheckpoint recomputes a checkpoint's checksum after a test changed its bytes.
func SealCheckpoint(b []byte) {
	if len(b) >= len(checkpoint.Magic)+4 {
		binary.LittleEndian.PutUint32(b[len(checkpoint.Magic):], crc32.Checksum(b[len(checkpoint.Magic)+4:], checkpoint.Castagnoli))
	}
}
