package sessionio

import "bytes"

// ParseTailBlocks is ParseTail with blocks of first bytes growing to at most maxBlock, and
// parallel batches of batch bytes (0: none) growing to at most 4*batch, split among workers,
// so that tests can split lines across blocks and parts.
func ParseTailBlocks(data []byte, file string, need Need, first, maxBlock, batch, workers int) (*Tail, error) {
	return readTail(bytesReader(data), int64(len(data)), file, need, tailSizes{block: first, maxBlock: maxBlock,
		batch: batch, maxBatch: 4 * batch, workers: workers})
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
