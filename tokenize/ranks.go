package tokenize

import (
	"bufio"
	"bytes"
	"fmt"
	"hash/maphash"
	"io"
	"math/bits"
	"unsafe"
)

// rankTable maps a token's bytes to its rank, as tiktoken's vocabulary does. It replaces a
// map[string]int for the two costs a cold `compactor plan` pays: building it (a Go map of
// 200,000 strings takes ~25 ms to fill; this table is filled in a few, see
// BenchmarkLoadVocab) and looking pairs up during byte-pair merges, most of which miss.
//
// Layout: the tokens' bytes one after the other in arena (token i is arena[offs[i]:offs[i+1]]),
// their ranks in ranks, and an open-addressed table of slots (linear probing, at most 3/8
// full) holding i+1 in the low 18 bits and 14 bits of the token's hash above them, so that
// most probes of a missing pair are settled without looking at the arena. Two-byte strings
// have a direct table (pair). (Slots of 64 bits holding the rank and offset too were tried:
// no faster to look up, twice the memory, slower to fill.)
type rankTable struct {
	seed  maphash.Seed
	mask  uint64
	slots []uint32
	offs  []uint32
	ranks []int32 // nil when every token's rank is its position (both vocabularies)
	n     int     // tokens (lines), repeated ones included
	arena string
	// pair[a<<8|b] is 1 + the rank of the two-byte token ab (0: none). A merge starts by
	// looking up every pair of adjacent bytes: a quarter-megabyte table that stays in the
	// cache answers those without hashing.
	pair []int32

	distinct int
}

const (
	slotIndexBits = 18 // up to 262,143 tokens (o200k_base has 200,000)
	slotIndexMask = 1<<slotIndexBits - 1
)

// get returns the rank of the token s.
func (t *rankTable) get(s string) (int, bool) {
	if len(s) == 2 {
		r := t.pair[int(s[0])<<8|int(s[1])]
		return int(r - 1), r != 0
	}
	return t.getHashed(s)
}

// getHashed is get through the hash table.
func (t *rankTable) getHashed(s string) (int, bool) {
	h := maphash.String(t.seed, s)
	tag := uint32(h >> (64 - (32 - slotIndexBits)))
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		v := t.slots[i]
		if v == 0 {
			return 0, false
		}
		if v>>slotIndexBits != tag {
			continue
		}
		k := v&slotIndexMask - 1
		if t.arena[t.offs[k]:t.offs[k+1]] == s {
			return t.rankOf(int(k)), true
		}
	}
}

// rankOf is the rank of token k.
func (t *rankTable) rankOf(k int) int {
	if t.ranks == nil {
		return k
	}
	return int(t.ranks[k])
}

// tokens is the number of distinct tokens.
func (t *rankTable) tokens() int { return t.distinct }

// parseRanks reads a .tiktoken file ("<base64 token> <rank>" per line) into a rankTable with
// exactly the tokens and ranks tiktoken-go-loader's parser gives (TestParseRanksMatchesLoader).
// A token listed twice keeps its last rank, as the loader's map does. The file is read in
// chunks through one buffer and each line decoded by hand (a table for base64, a digit loop
// for the rank): the loader's per-line parsing, not the table, was most of the cost.
//
// size is the file's size: it bounds the arena (3/4, base64) and the lines (a line has at
// least 7 bytes), so that every array is allocated once, for good (permanent).
func parseRanks(r io.Reader, size int) (*rankTable, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	t := &rankTable{seed: maphash.MakeSeed()}
	arena := permanent(size * 3 / 4)[:0]
	t.offs = permanentUint32(size/7 + 2)[:1]
	// Ranks are stored only from the first one that is not the token's position (none in
	// tiktoken's files: each line's rank is its number): 800 KB less to write for o200k_base.
	for lineNo := 1; ; lineNo++ {
		line, err := br.ReadSlice('\n')
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("line %d: %w", lineNo, err)
		}
		if n := len(line); n > 0 && line[n-1] == '\n' {
			line = line[:n-1]
		}
		if len(line) > 0 {
			var rank int
			var ok bool
			if arena, rank, ok = parseRankLine(arena, line); !ok {
				return nil, fmt.Errorf("line %d: not \"<base64> <rank>\": %.40q", lineNo, line)
			}
			if t.ranks == nil && rank != t.n {
				t.ranks = make([]int32, t.n, max(2*t.n, 1024))
				for i := range t.ranks {
					t.ranks[i] = int32(i)
				}
			}
			t.offs = append(t.offs, uint32(len(arena)))
			if t.ranks != nil {
				t.ranks = append(t.ranks, int32(rank))
			}
			t.n++
		}
		if err == io.EOF {
			break
		}
	}
	if t.n > slotIndexMask-1 || len(arena) > 1<<32-1 {
		return nil, fmt.Errorf("vocabulary too large: %d tokens, %d bytes", t.n, len(arena))
	}
	t.arena = unsafe.String(unsafe.SliceData(arena), len(arena)) // arena is not written again
	slots := 1 << bits.Len(uint(t.n*8/3))                        // at most 3/8 full
	t.slots = permanentUint32(slots)
	// Write every page before the probes read them: a fresh page read first is mapped to the
	// shared zero page, and the write that follows is a copy-on-write fault that also flushes
	// the other cores' TLBs. Measured: half the time of a cold load went there.
	clear(t.slots)
	t.mask = uint64(slots - 1)
	for k := range t.n {
		s := t.arena[t.offs[k]:t.offs[k+1]]
		h := maphash.String(t.seed, s)
		tag := uint32(h >> (64 - (32 - slotIndexBits)))
		for i := h & t.mask; ; i = (i + 1) & t.mask {
			v := t.slots[i]
			if v == 0 {
				t.slots[i] = tag<<slotIndexBits | uint32(k+1)
				t.distinct++
				break
			}
			if j := v&slotIndexMask - 1; v>>slotIndexBits == tag && t.arena[t.offs[j]:t.offs[j+1]] == s {
				t.slots[i] = tag<<slotIndexBits | uint32(k+1) // a repeated token: the last line wins
				break
			}
		}
	}
	pair := permanentUint32(1 << 16)
	t.pair = unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(pair))), len(pair))
	for k := range t.n {
		if s := t.arena[t.offs[k]:t.offs[k+1]]; len(s) == 2 {
			if r, ok := t.getHashed(s); ok && r == t.rankOf(k) { // the last of a repeated token
				t.pair[int(s[0])<<8|int(s[1])] = int32(r) + 1
			}
		}
	}
	return t, nil
}

// permanentUint32 is permanent for n uint32s.
func permanentUint32(n int) []uint32 {
	b := permanent(4 * n)
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// b64 maps a standard base64 character to its 6 bits, others to 0xff.
var b64 = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i, c := range "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/" {
		t[c] = byte(i)
	}
	return t
}()

// parseRankLine decodes one "<base64> <rank>" line, appending the token's bytes to arena.
// The base64 must be padded, as in tiktoken files (StdEncoding).
func parseRankLine(arena, line []byte) ([]byte, int, bool) {
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 || sp%4 != 0 || sp == len(line)-1 || len(line)-sp > 10 {
		return arena, 0, false
	}
	enc := line[:sp]
	for i := 0; i < len(enc); i += 4 {
		a, b, c, d := b64[enc[i]], b64[enc[i+1]], b64[enc[i+2]], b64[enc[i+3]]
		last := i+4 == len(enc)
		switch {
		case a|b|c|d < 64:
			arena = append(arena, a<<2|b>>4, b<<4|c>>2, c<<6|d)
		case last && enc[i+3] == '=' && enc[i+2] == '=' && a|b < 64: // trailing bits ignored, as StdEncoding does
			arena = append(arena, a<<2|b>>4)
		case last && enc[i+3] == '=' && a|b|c < 64:
			arena = append(arena, a<<2|b>>4, b<<4|c>>2)
		default:
			return arena, 0, false
		}
	}
	rank := 0
	for _, c := range line[sp+1:] {
		if c < '0' || c > '9' {
			return arena, 0, false
		}
		rank = rank*10 + int(c-'0')
	}
	return arena, rank, true
}
