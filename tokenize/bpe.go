package tokenize

import "math"

// smallPiece is the piece length (bytes) up to which the simple quadratic merge is used: it
// allocates nothing and beats the heap on the short pieces ordinary text is made of.
const smallPiece = 32

// pieceTokens returns how many tokens byte-pair encoding makes of one pre-tokenized piece.
// Both merge strategies apply the same merges in the same order (lowest rank first, leftmost
// among equal ranks, tiktoken's rule) and differ only in speed.
func pieceTokens(piece string, ranks *rankTable) int {
	if len(piece) <= 1 {
		return len(piece)
	}
	if _, ok := ranks.get(piece); ok {
		return 1
	}
	if len(piece) <= smallPiece {
		return mergeSmall(piece, ranks)
	}
	return mergeHeap(piece, ranks)
}

const noRank = math.MaxInt

// mergeSmall is tiktoken's reference merge: scan for the lowest-ranked adjacent pair, merge
// it, repeat. O(n²), fine for short pieces.
func mergeSmall(piece string, ranks *rankTable) int {
	var startsBuf, rankBuf [smallPiece + 1]int
	n := len(piece)
	starts := startsBuf[:n+1] // starts[i] = first byte of part i; starts[len-1] = n
	rk := rankBuf[:n+1]       // rk[i] = rank of merging part i with part i+1
	for i := range starts {
		starts[i] = i
	}
	pairRank := func(i int) int {
		if i+2 < len(starts) {
			if r, ok := ranks.get(piece[starts[i]:starts[i+2]]); ok {
				return r
			}
		}
		return noRank
	}
	for i := range rk {
		rk[i] = pairRank(i)
	}
	for len(starts) > 2 {
		best, at := noRank, -1
		for i := 0; i < len(starts)-2; i++ {
			if rk[i] < best {
				best, at = rk[i], i
			}
		}
		if at < 0 {
			break
		}
		starts = append(starts[:at+1], starts[at+2:]...)
		rk = append(rk[:at+1], rk[at+2:]...)
		rk[at] = pairRank(at)
		if at > 0 {
			rk[at-1] = pairRank(at - 1)
		}
	}
	return len(starts) - 1
}

// mergeHeap is the same merge with a doubly linked list of parts and a min-heap of candidate
// pairs ordered by (rank, position): O(n log n) for a piece of n bytes. Heap items made stale
// by a merge are recognised by a per-part version number and skipped.
func mergeHeap(piece string, ranks *rankTable) int {
	n := len(piece)
	next := make([]int32, n) // next[i]: start of the part after the part starting at i (n at the end)
	prev := make([]int32, n) // prev[i]: start of the part before (-1 for the first)
	ver := make([]int32, n)  // bumped whenever the pair starting at i changes or dies
	for i := 0; i < n; i++ {
		next[i] = int32(i + 1)
		prev[i] = int32(i - 1)
	}
	h := make(pairHeap, 0, n)
	pairRank := func(i int32) int {
		j := next[i]
		if int(j) >= n {
			return noRank
		}
		end := n
		if int(j) < n {
			end = int(next[j])
		}
		if r, ok := ranks.get(piece[i:end]); ok {
			return r
		}
		return noRank
	}
	for i := int32(0); int(i) < n-1; i++ {
		if r := pairRank(i); r != noRank {
			h = append(h, pairItem{rank: r, pos: i})
		}
	}
	h.init()
	parts := n
	for len(h) > 0 {
		it := h.pop()
		if it.ver != ver[it.pos] {
			continue // stale: the part merged or its right neighbour changed
		}
		i := it.pos
		j := next[i]
		// Merge part j into part i.
		ver[j]++ // j no longer starts a part
		next[i] = next[j]
		if int(next[j]) < n {
			prev[next[j]] = i
		}
		parts--
		ver[i]++
		if r := pairRank(i); r != noRank {
			h.push(pairItem{rank: r, pos: i, ver: ver[i]})
		}
		if p := prev[i]; p >= 0 {
			ver[p]++
			if r := pairRank(p); r != noRank {
				h.push(pairItem{rank: r, pos: p, ver: ver[p]})
			}
		}
	}
	return parts
}

type pairItem struct {
	rank int
	pos  int32
	ver  int32
}

// pairHeap is a binary min-heap on (rank, pos).
type pairHeap []pairItem

func (h pairHeap) less(a, b int) bool {
	if h[a].rank != h[b].rank {
		return h[a].rank < h[b].rank
	}
	return h[a].pos < h[b].pos
}

func (h pairHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *pairHeap) push(it pairItem) {
	*h = append(*h, it)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *pairHeap) pop() pairItem {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	*h = s[:last]
	if last > 0 {
		h.down(0)
	}
	return top
}

func (h pairHeap) down(i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
