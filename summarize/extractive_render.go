package summarize

// Rendering: the sections as markdown, in the layout of the summaries Pi asks a model for
// (section titles, "- " items, numbered Next Steps, "(none)" for an empty section), so
// that an update reads a model's summary and an extractive one alike (extractive_merge.go).

import (
	"fmt"
	"strings"
)

func render(titles []string, items []item, kept []bool, omitted map[string]map[string]int) string {
	var sb strings.Builder
	for i, t := range titles {
		if i > 0 {
			sb.WriteString("\n\n")
		}
		sb.WriteString(t)
		if t == secProgress {
			continue
		}
		n := 0
		line := func(s string) {
			n++
			sb.WriteString("\n")
			if t == secNext {
				fmt.Fprintf(&sb, "%d. %s", n, s)
			} else {
				sb.WriteString("- " + s)
			}
		}
		if kinds := omitted[t]; len(kinds) > 0 {
			line(omissionText(kinds))
		}
		for k, it := range items {
			if kept[k] && it.sec == t {
				line(it.text)
			}
		}
		if n == 0 {
			line("(none)")
		}
	}
	return sb.String()
}
