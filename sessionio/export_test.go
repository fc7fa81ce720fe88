package sessionio

import "bytes"

// ParseTailBlocks is ParseTail with blocks of first bytes growing to at most maxBlock, so
// that tests can split lines across blocks.
func ParseTailBlocks(data []byte, file string, need Need, first, maxBlock int) (*Tail, error) {
	return readTail(bytesReader(data), int64(len(data)), file, need, first, maxBlock)
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
