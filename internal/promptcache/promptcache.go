// Package promptcache simulates a provider's automatic prompt cache for the fake
// OpenAI-compatible servers of the tests (internal/fakellm, internal/scriptllm), so that
// what compactor reads from usage.prompt_tokens_details.cached_tokens, and what a change
// of prompt layout does to it, is tested against the rule real providers apply.
//
// The rule is OpenAI's automatic caching (and, in substance, DeepSeek's and vLLM's prefix
// caching): the longest prefix of a request that an earlier request also began with is
// served from the cache, counted in whole blocks of BlockTokens, and only once the prompt
// is at least MinTokens long. The prefix is compared over the messages in order (role and
// text), so a request that repeats an earlier one's text and appends to it is cached up to
// where it starts to differ, whether the repeated part is whole messages or the beginning
// of one.
package promptcache

import (
	"strings"
	"sync"
	"unicode/utf16"
)

// Message is one chat message: its role and its text.
type Message struct{ Role, Content string }

// Cache remembers the prompts it has seen. Safe for concurrent use.
type Cache struct {
	// MinTokens is the smallest prompt that can hit the cache (OpenAI: 1024).
	MinTokens int
	// BlockTokens is the granularity of a hit (OpenAI: 128).
	BlockTokens int
	// Keep bounds how many prompts are remembered (0: 512).
	Keep int

	mu      sync.Mutex
	prompts []string
}

// New returns a cache with OpenAI's rule.
func New() *Cache { return &Cache{MinTokens: 1024, BlockTokens: 128} }

// Tokens is the fake servers' token count of a text: UTF-16 code units / 4, rounded up
// (Pi's estimate).
func Tokens(s string) int { return (len(utf16.Encode([]rune(s))) + 3) / 4 }

// Lookup returns how many tokens of the request's prompt are served from the cache, and
// remembers the prompt for the requests after it.
func (c *Cache) Lookup(msgs []Message) int {
	key := render(msgs)
	c.mu.Lock()
	defer c.mu.Unlock()
	best := 0
	for _, p := range c.prompts {
		if n := commonPrefix(p, key); n > best {
			best = n
		}
	}
	keep := c.Keep
	if keep <= 0 {
		keep = 512
	}
	c.prompts = append(c.prompts, key)
	if len(c.prompts) > keep {
		c.prompts = c.prompts[len(c.prompts)-keep:]
	}
	if Tokens(key) < c.MinTokens {
		return 0
	}
	hit := len(utf16.Encode([]rune(key[:best]))) / 4 // whole tokens only
	hit = min(hit, Tokens(key))
	if c.BlockTokens > 1 {
		hit -= hit % c.BlockTokens
	}
	return hit
}

// render joins the messages into one string in which a shared prefix means shared
// messages (role and text) up to that point.
func render(msgs []Message) string {
	var sb strings.Builder
	for _, m := range msgs {
		sb.WriteString(m.Role)
		sb.WriteByte(0)
		sb.WriteString(m.Content)
		sb.WriteByte(1)
	}
	return sb.String()
}

// commonPrefix is the length in bytes of the longest common prefix of a and b, backed up to
// a rune boundary.
func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	for i > 0 && i < len(b) && b[i]&0xC0 == 0x80 {
		i--
	}
	return i
}
