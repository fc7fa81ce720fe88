package experiment

// Marks and groups of the HTML report: which result rows and fields each chart draws, the
// sessions charted, and the rows that have no number to draw (said, not drawn as 0).

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// mark identifies the number a drawn element shows: the result row it comes from (kind,
// file, policy, keep) and the row's JSON field (metric). Every bar, point and value label
// of the report carries these as data-* attributes, so the numbers drawn can be checked
// against the embedded JSON.
type mark struct {
	kind   string // snapshot, replay, snapshotTotal, replayTotal
	file   string
	policy string
	keep   int
	metric string
	value  int
	// missing, when set, says why there is no number to draw ("no plan", "no compaction"):
	// the chart writes it instead of a bar of length 0.
	missing string
	// row are further JSON fields that identify the row (summarizer, probeKind, after),
	// written as data-row-NAME attributes.
	row [][2]string
}

func (m mark) attrs() string {
	var b strings.Builder
	fmt.Fprintf(&b, ` data-kind="%s"`, esc(m.kind))
	if m.file != "" {
		fmt.Fprintf(&b, ` data-file="%s"`, esc(m.file))
	}
	for _, kv := range m.row {
		fmt.Fprintf(&b, ` data-row-%s="%s"`, esc(kv[0]), esc(kv[1]))
	}
	fmt.Fprintf(&b, ` data-policy="%s" data-keep="%d" data-metric="%s" data-value="%d"`, esc(m.policy), m.keep, esc(m.metric), m.value)
	return b.String()
}

// bySummarizer is the row attribute of a replay mark.
func bySummarizer(s string) [][2]string { return [][2]string{{"summarizer", s}} }

// settingLabel names a keepRecentTokens setting, and the summarizer when there are several.
func settingLabel(r *Result, keep int, sum string) string {
	if len(r.Summarizers) > 1 && sum != "" {
		return fmt.Sprintf("keep %d · %s", keep, sum)
	}
	return "keep " + strconv.Itoa(keep)
}

type group struct {
	label string
	// labelKeep, when set, is the number in the label (a keepRecentTokens setting).
	labelKeep int
	// category: the label names a probe kind or a milestone (after, its number).
	category bool
	after    int
	marks    []mark
}

func totalGroups(r *Result, kind, metric string) []group {
	var gs []group
	sums := []string{""}
	if kind == "replayTotal" {
		sums = r.Summarizers
	}
	for _, keep := range r.KeepRecentTokens {
		for _, sum := range sums {
			g := group{label: settingLabel(r, keep, sum), labelKeep: keep}
			for _, p := range r.Policies {
				m := mark{kind: kind, policy: p, keep: keep, metric: metric}
				switch kind {
				case "replayTotal":
					m.row = bySummarizer(sum)
					for _, t := range r.ReplayTotals {
						if t.Policy == p && t.KeepRecentTokens == keep && t.Summarizer == sum {
							m.value = fieldInt(t, metric)
						}
					}
				case "snapshotTotal":
					for _, t := range r.SnapshotTotals {
						if t.Policy == p && t.KeepRecentTokens == keep {
							m.value = fieldInt(t, metric)
						}
					}
				}
				g.marks = append(g.marks, m)
			}
			gs = append(gs, g)
		}
	}
	return gs
}

// fieldInt returns the int field of a row whose JSON name is metric (through the same
// JSON encoding the report embeds, so a chart cannot show a field the JSON lacks).
func fieldInt(row any, metric string) int {
	b, _ := json.Marshal(row)
	var m map[string]json.RawMessage
	_ = json.Unmarshal(b, &m)
	n, err := strconv.Atoi(string(m[metric]))
	if err != nil {
		panic(fmt.Sprintf("experiment: chart metric %q is not an int field of %T", metric, row))
	}
	return n
}

func countFiles(r *Result) int {
	seen := map[string]bool{}
	for _, s := range r.Snapshot {
		seen[s.File] = true
	}
	return len(seen)
}

// chartedFiles picks the sessions of the per-session charts: the largest by context
// (the largest tokensBefore over their snapshot rows), at most MaxSessionsCharted, listed
// in file order.
func chartedFiles(r *Result) []string {
	size := map[string]int{}
	for _, s := range r.Snapshot {
		size[s.File] = max(size[s.File], s.TokensBefore)
	}
	files := make([]string, 0, len(size))
	for f := range size {
		files = append(files, f)
	}
	slices.SortFunc(files, func(a, b string) int {
		if size[a] != size[b] {
			return size[b] - size[a]
		}
		return strings.Compare(a, b)
	})
	if len(files) > MaxSessionsCharted {
		files = files[:MaxSessionsCharted]
	}
	slices.Sort(files)
	return files
}

// sessionGroups is one group per charted session, one mark per policy. A snapshot row
// without a plan, and a replay row without a compaction (for the kept-after metrics), are
// marked missing instead of drawn as 0. Sessions with nothing to draw (every mark missing
// or 0) are left out; left counts them.
func sessionGroups(r *Result, files []string, keep int, kind, metric, sum string) (groups []group, left int) {
	for _, f := range files {
		g := group{label: f}
		something := false
		for _, p := range r.Policies {
			m := mark{kind: kind, file: f, policy: p, keep: keep, metric: metric}
			found := false
			if kind == "replay" {
				m.row = bySummarizer(sum)
				for _, row := range r.Replay {
					if row.File == f && row.Policy == p && row.KeepRecentTokens == keep && row.Summarizer == sum {
						m.value, found = fieldInt(row, metric), true
						if row.Compactions == 0 && metric != "summarizerTokens" {
							m.missing = "no compaction"
						}
					}
				}
			} else {
				for _, row := range r.Snapshot {
					if row.File == f && row.Policy == p && row.KeepRecentTokens == keep {
						m.value, found = fieldInt(row, metric), true
						if !row.Prepared {
							m.missing = "no plan"
						}
					}
				}
			}
			if found {
				g.marks = append(g.marks, m)
				something = something || (m.missing == "" && m.value != 0)
			}
		}
		if !something {
			left++
			continue
		}
		groups = append(groups, g)
	}
	return groups, left
}
