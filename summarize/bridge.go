package summarize

import (
	"context"
	"fmt"
	"strings"

	"github.com/compactor-dev/compactor/sessionio"
)

// A bridge extends a summary that covers a span's beginning so that it also covers the
// messages after it, without a model, in the time Pi's compaction hook allows (a few
// milliseconds). A summary prepared in the background is older than the moment Pi
// compacts: the agent went on working while it was written, so Pi's own cut lies later.
// Handing Pi the prepared summary with its own, older cut would keep more verbatim than Pi
// does, make the context after compaction larger, and so bring every later compaction
// sooner. Bridged, the prepared summary plus the gap's extract covers exactly what Pi
// would summarize, and the compaction keeps exactly what Pi would keep. The next
// preparation sends the compaction's summary (bridge included) to the model as the
// previous summary, so the model rewrites the extract in its own words then.

// DefaultBridgeMaxTokens bounds the text a bridge adds to a summary: about the size of a
// model's notes on a split turn's prefix, which is what the gap usually is.
const DefaultBridgeMaxTokens = 800

// BridgeOutput is a bridged summary text (without file lists).
type BridgeOutput struct {
	Text string
	// Added is how many items the gap contributed, Sections how many sections they went
	// into (merged into an existing one, or appended).
	Added, Sections int
}

// Bridge merges an extract of gap into base. The extract is the extractive summarizer's
// notes on the gap (at most maxTokens, by characters / 4): each of its items is appended
// to the section of base with the same heading ("## Progress" / "### Done" ...), replacing
// a "(none)" placeholder there; a section base lacks is appended at its end. base keeps
// every one of its own lines, in order. With no gap, base is returned unchanged.
func Bridge(ctx context.Context, base string, gap []*sessionio.Message, maxTokens int) (BridgeOutput, error) {
	if len(gap) == 0 {
		return BridgeOutput{Text: base}, nil
	}
	if maxTokens <= 0 {
		maxTokens = DefaultBridgeMaxTokens
	}
	ext, err := NewExtractive().Summarize(ctx, Request{Task: TaskHistory, Messages: gap, MaxTokens: maxTokens})
	if err != nil {
		return BridgeOutput{}, fmt.Errorf("bridge: %w", err)
	}
	doc := splitMarkdown(base)
	out := BridgeOutput{}
	for _, s := range splitMarkdown(ext.Text).sections {
		items := s.listItems()
		if len(items) == 0 {
			continue
		}
		out.Sections++
		out.Added += len(items)
		if t := doc.find(s.heading); t != nil {
			t.add(items, s.numbered())
			continue
		}
		doc.sections = append(doc.sections, &mdSection{heading: s.heading, body: renderItems(items, s.numbered(), 0)})
	}
	out.Text = doc.String()
	return out, nil
}

// mdDoc is a markdown summary cut at its headings: the lines before the first heading,
// then each heading with the lines up to the next one. String gives the text back.
type mdDoc struct {
	preamble []string
	sections []*mdSection
}

type mdSection struct {
	heading string
	body    []string
}

func splitMarkdown(s string) *mdDoc {
	d := &mdDoc{}
	for _, line := range strings.Split(s, "\n") {
		if isHeading(line) {
			d.sections = append(d.sections, &mdSection{heading: line})
			continue
		}
		if len(d.sections) == 0 {
			d.preamble = append(d.preamble, line)
			continue
		}
		cur := d.sections[len(d.sections)-1]
		cur.body = append(cur.body, line)
	}
	return d
}

func isHeading(line string) bool {
	t := strings.TrimSpace(line)
	return strings.HasPrefix(t, "## ") || strings.HasPrefix(t, "### ")
}

// headingKey compares headings by their words: "## Progress", "##  progress:" match.
func headingKey(h string) string {
	t := strings.ToLower(strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(h), "#")))
	return strings.Join(strings.Fields(strings.TrimRight(t, ":")), " ")
}

// find returns the last section with heading h's words (the latest "### Done" of a summary
// that has two, as a split turn's does), or nil.
func (d *mdDoc) find(h string) *mdSection {
	k := headingKey(h)
	for i := len(d.sections) - 1; i >= 0; i-- {
		if headingKey(d.sections[i].heading) == k {
			return d.sections[i]
		}
	}
	return nil
}

func (d *mdDoc) String() string {
	var lines []string
	lines = append(lines, d.preamble...)
	for _, s := range d.sections {
		lines = append(lines, s.heading)
		lines = append(lines, s.body...)
	}
	return strings.Join(lines, "\n")
}

// listItems returns the section's list items without their markers ("- ", "1. "), the
// "(none)" placeholders left out.
func (s *mdSection) listItems() []string {
	var out []string
	for _, l := range s.body {
		t := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(t, "- "):
			t = strings.TrimSpace(t[2:])
		case numberedItem(t) > 0:
			t = strings.TrimSpace(t[numberedItem(t):])
		default:
			continue
		}
		if t != "" && !isNone(t) {
			out = append(out, t)
		}
	}
	return out
}

// numbered reports whether the section is a numbered list.
func (s *mdSection) numbered() bool {
	for _, l := range s.body {
		if numberedItem(strings.TrimSpace(l)) > 0 {
			return true
		}
	}
	return false
}

// numberedItem returns the length of a "12. " marker at the start of t, or 0.
func numberedItem(t string) int {
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 || i+1 >= len(t) || t[i] != '.' || t[i+1] != ' ' {
		return 0
	}
	return i + 2
}

func isNone(t string) bool {
	t = strings.ToLower(strings.Trim(strings.TrimSpace(t), "*_"))
	return t == "(none)" || t == "none" || t == "none."
}

// add appends items after the section's last non-blank line, dropping a "(none)"
// placeholder; a numbered list goes on with its numbering.
func (s *mdSection) add(items []string, numbered bool) {
	var kept []string
	n := 0
	for _, l := range s.body {
		t := strings.TrimSpace(l)
		if isNone(strings.TrimLeft(t, "-* ")) || (numberedItem(t) > 0 && isNone(t[numberedItem(t):])) {
			continue
		}
		if numberedItem(t) > 0 {
			n++
		}
		kept = append(kept, l)
	}
	end := len(kept)
	for end > 0 && strings.TrimSpace(kept[end-1]) == "" {
		end--
	}
	numbered = numbered && (n > 0 || s.numbered())
	body := append([]string{}, kept[:end]...)
	body = append(body, renderItems(items, numbered, n)...)
	s.body = append(body, kept[end:]...)
}

func renderItems(items []string, numbered bool, from int) []string {
	out := make([]string, len(items))
	for i, it := range items {
		if numbered {
			out[i] = fmt.Sprintf("%d. %s", from+i+1, it)
		} else {
			out[i] = "- " + it
		}
	}
	return out
}
