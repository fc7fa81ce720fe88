package tokenize

import (
	"container/list"
	"crypto/sha256"
	"sync"
	"sync/atomic"

	"github.com/compactor-dev/compactor/sessionio"
)

// DefaultCacheEntries is the capacity NewCache uses for a size of 0 or less: about 100k
// messages (a few hundred sessions of ordinary size) in roughly 15 MB.
const DefaultCacheEntries = 1 << 17

// Cache remembers message token counts, keyed by (counter name, SHA-256 of the entry's raw
// bytes). It is safe for concurrent use and bounded: past its capacity the least recently
// used count is dropped.
//
// Why a content hash and not file+id+line: an entry's line never changes once written, so its
// bytes identify its count completely. The same key is then valid across re-reads of a file
// that grew, across forks and clones that copy entries into another file, and across files
// with colliding 8-hex ids; nothing has to be invalidated, ever. Hashing costs about 1 ms per
// MB, far below counting. For v1/v2 files Raw is the in-memory migrated form, which is
// deterministic except for the fresh ids migration invents, so those entries are simply
// counted again after a re-read.
type Cache struct {
	mu    sync.Mutex
	max   int
	ll    *list.List // front = most recently used; values are *cacheItem
	items map[cacheKey]*list.Element

	hits, misses atomic.Int64
}

type cacheKey struct {
	counter string
	sum     [sha256.Size]byte
}

type cacheItem struct {
	key    cacheKey
	tokens int
}

// NewCache returns a cache holding at most maxEntries counts (DefaultCacheEntries if
// maxEntries <= 0).
func NewCache(maxEntries int) *Cache {
	if maxEntries <= 0 {
		maxEntries = DefaultCacheEntries
	}
	return &Cache{max: maxEntries, ll: list.New(), items: make(map[cacheKey]*list.Element)}
}

// Entry returns counter's count for e's message, from the cache when it has been counted
// before. Only "message" entries count, as in Pi's cut-point walk (findCutPoint adds
// estimateTokens for type "message" only): every other entry type, custom_message and
// branch_summary included, is 0 here. To count what an entry contributes to a built
// context, use Message with picontext.AsMessage(e) instead.
func (c *Cache) Entry(counter Counter, e *sessionio.Entry) int {
	if e == nil || e.Type != sessionio.TypeMessage || e.Message == nil {
		return 0
	}
	return c.count(counter, e.Raw, e.Message)
}

// Message returns counter's count for m, cached under m.Raw (for a message synthesized from
// a custom_message, branch_summary or compaction entry, Raw is the object Pi builds, which
// is as stable as the entry). A message without Raw is counted but not cached.
func (c *Cache) Message(counter Counter, m *sessionio.Message) int {
	if m == nil {
		return 0
	}
	return c.count(counter, m.Raw, m)
}

func (c *Cache) count(counter Counter, raw []byte, m *sessionio.Message) int {
	if len(raw) == 0 {
		c.misses.Add(1)
		return counter.Count(m)
	}
	key := cacheKey{counter: counter.Name(), sum: sha256.Sum256(raw)}
	c.mu.Lock()
	if el, ok := c.items[key]; ok {
		c.ll.MoveToFront(el)
		n := el.Value.(*cacheItem).tokens
		c.mu.Unlock()
		c.hits.Add(1)
		return n
	}
	c.mu.Unlock()
	c.misses.Add(1)

	// Count outside the lock: counting a large message takes milliseconds, and two
	// goroutines counting the same message at once just store the same number.
	n := counter.Count(m)

	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.ll.MoveToFront(el)
		return n
	}
	c.items[key] = c.ll.PushFront(&cacheItem{key: key, tokens: n})
	for c.ll.Len() > c.max {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.items, old.Value.(*cacheItem).key)
	}
	return n
}

// Len is the number of cached counts.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}

// Stats returns how many lookups were answered from the cache and how many were counted.
func (c *Cache) Stats() (hits, misses int64) { return c.hits.Load(), c.misses.Load() }
