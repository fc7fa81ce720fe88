package summarize

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/compactor-dev/compactor/sessionio/jsjson"
)

// roller summarizes a span that may not fit one request. When the whole prompt fits the
// window (or the window is unknown) it makes one call. Otherwise it walks the serialized
// parts in order, packing as many as fit next to the prompt and the summary so far into
// each request, and carries the summary forward with the update prompt: a 500k-token
// span becomes a sequence of window-sized calls that ends in one summary. A
// context-length error from the endpoint halves the chunk and retries it, so a window
// that is configured too large (or a counter that undercounts) still converges.
type roller struct {
	window int // max prompt tokens (system + user); 0 = unknown
	count  func(string) int
	call   func(ctx context.Context, prompt string) (Result, error)
}

// minChunkTokens is the smallest room for conversation text worth a request; below it
// the prompt and rolling summary alone nearly fill the window and chunking cannot progress.
const minChunkTokens = 64

func (r roller) run(ctx context.Context, req Request) (Result, error) {
	parts := SerializeParts(req.Messages, req.Release)
	full := buildPromptText(req, strings.Join(parts, "\n\n"))
	sys := r.count(SystemPrompt)
	capTokens := 0 // 0 = no cap beyond the window
	if r.window <= 0 || sys+r.count(full) <= r.window {
		res, err := r.call(ctx, full)
		if err == nil || !errors.Is(err, ErrContextLength) || len(parts) == 0 {
			return res, err
		}
		conv := 0
		for _, p := range parts {
			conv += r.count(p) + 1
		}
		capTokens = max(1, conv/2)
	}
	return r.chunked(ctx, req, parts, capTokens)
}

func (r roller) chunked(ctx context.Context, req Request, parts []string, capTokens int) (Result, error) {
	parts = append([]string(nil), parts...) // parts may be shortened below
	tokens := make([]int, len(parts))
	for i, p := range parts {
		tokens[i] = r.count(p)
	}
	sys := r.count(SystemPrompt)
	summary := req.PreviousSummary
	var total Result
	for i := 0; i < len(parts); {
		sub := req
		sub.Messages = nil
		sub.PreviousSummary = summary
		avail := capTokens
		if r.window > 0 {
			room := r.window - sys - r.count(buildPromptText(sub, ""))
			if avail == 0 || room < avail {
				avail = room
			}
		}
		if avail < minChunkTokens {
			return total, &Error{Kind: KindContextLength, cause: ErrContextLength, Message: fmt.Sprintf(
				"the input window (%d tokens) leaves only %d tokens for conversation text next to the prompt and the rolling summary",
				r.window, avail)}
		}
		// Pack parts i..j-1; a single part larger than the room is shortened to fit.
		j, used := i, 0
		for j < len(parts) {
			t := tokens[j] + 1 // +1 for the "\n\n" separator
			if used+t > avail {
				if j == i {
					parts[j] = shrinkText(parts[j], avail-1, r.count)
					tokens[j] = r.count(parts[j])
					used += tokens[j] + 1
					j++
				}
				break
			}
			used += t
			j++
		}
		res, err := r.call(ctx, buildPromptText(sub, strings.Join(parts[i:j], "\n\n")))
		if err != nil {
			if !errors.Is(err, ErrContextLength) {
				return total, err
			}
			// The endpoint counts more than we do: halve the room and try this chunk again.
			next := used / 2
			if next < minChunkTokens {
				return total, err
			}
			capTokens = next
			continue
		}
		summary = res.Text
		total.InputTokens += res.InputTokens
		total.OutputTokens += res.OutputTokens
		total.CachedInputTokens += res.CachedInputTokens
		total.Calls += res.Calls
		total.Truncated = total.Truncated || res.Truncated
		i = j
	}
	total.Text = summary
	return total, nil
}

// shrinkText cuts the middle out of s until count(s) <= target, keeping the head and
// the tail (where a message states its request and its outcome) and saying how much was
// dropped.
func shrinkText(s string, target int, count func(string) int) string {
	if target < 1 {
		target = 1
	}
	for range 30 {
		n := count(s)
		if n <= target {
			return s
		}
		runes := utf8.RuneCountInString(s)
		keep := int(float64(runes) * float64(target) / float64(n) * 0.9)
		if keep < 2 {
			keep = 2
		}
		if keep >= runes {
			keep = runes - 1
		}
		head := keep * 2 / 3
		tail := keep - head
		rs := []rune(s)
		omitted := len(rs) - head - tail
		s = string(rs[:head]) + "\n[... " + strconv.Itoa(omitted) + " characters omitted to fit the summarizer's input window ...]\n" + string(rs[len(rs)-tail:])
		if omitted <= 0 {
			return s
		}
	}
	return s
}

// textCounter returns c.CountText, or Pi's chars/4 estimate (UTF-16 units, rounded up).
func textCounter(c TextCounter) func(string) int {
	if c != nil {
		return c.CountText
	}
	return EstimateText
}

// EstimateText is Pi's chars/4 estimate of a text: its UTF-16 length divided by 4,
// rounded up.
func EstimateText(s string) int { return (jsjson.UTF16Len(s) + 3) / 4 }
