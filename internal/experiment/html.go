package experiment

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// MaxSessionsCharted caps the per-session charts of the HTML report: the largest sessions
// (by context size) are drawn; the embedded JSON always has every row.
const MaxSessionsCharted = 40

var policyColors = []string{"#3b6fb6", "#e07b39", "#3a9a5b", "#b64a8f", "#8a6d3b", "#5a5a5a"}

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

func esc(s string) string { return html.EscapeString(s) }

// WriteHTML writes a self-contained report (inline CSS and SVG, no script runs): policy
// cost versus verbatim context kept, per-policy totals, per-session bars, the totals
// tables, the skipped files, and the result as JSON in <script type="application/json"
// id="data">. Every chart is drawn from r, the same value the JSON holds.
func WriteHTML(w io.Writer, r *Result) error {
	data, err := json.Marshal(r) // escapes <, > and &: safe inside <script>
	if err != nil {
		return fmt.Errorf("experiment: encode json: %w", err)
	}
	var b strings.Builder
	b.WriteString(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>compactor experiment</title>
<style>
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:1000px;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:12px;margin:.5em 0}td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:right}
th{background:#f4f4f4}td.l,th.l{text-align:left}
svg{display:block;margin:.5em 0;font:11px system-ui,sans-serif}
svg text.value{fill:#333}svg text.tick{fill:#777}svg .axis{stroke:#999}svg .grid{stroke:#eee}
.note{color:#666;font-size:12px}code{background:#f4f4f4;padding:0 3px}
</style></head><body>
<h1>Cut-point policy experiment</h1>
`)
	window := "each session's model window from the catalog"
	if r.ContextWindow > 0 {
		window = num(r.ContextWindow) + " tokens (override)"
	}
	fmt.Fprintf(&b, "<p>%d session files, %d read. Counter <code>%s</code>, reserveTokens %s, context window %s, policies %s, keepRecentTokens %s.",
		r.Files, r.Sessions, esc(r.Counter), num(r.ReserveTokens), esc(window), esc(strings.Join(r.Policies, ", ")), esc(joinInts(r.KeepRecentTokens)))
	if r.Replayed {
		fmt.Fprintf(&b, " Replay summarizer: %s.", esc(describeSummarizers(r)))
	}
	b.WriteString("</p>\n")
	b.WriteString(legend(r.Policies))

	if r.Replayed {
		b.WriteString("<h2>Replay: summarizer cost versus verbatim context kept</h2>\n")
		b.WriteString(`<p class="note">One point per policy and keepRecentTokens: x = tokens sent to the summarizer over all sessions (serialized spans plus previous summaries), y = mean verbatim context right after a compaction. Up and to the left is better; both axes start at zero, so distances between points are to scale.</p>` + "\n")
		var pts []point
		for _, t := range r.ReplayTotals {
			sum := ""
			if len(r.Summarizers) > 1 {
				sum = t.Summarizer
			}
			pts = append(pts, point{
				x:   mark{kind: "replayTotal", policy: t.Policy, keep: t.KeepRecentTokens, metric: "summarizerTokens", value: t.SummarizerTokens, row: bySummarizer(t.Summarizer)},
				y:   mark{kind: "replayTotal", policy: t.Policy, keep: t.KeepRecentTokens, metric: "meanKeptTokens", value: t.MeanKeptTokens, row: bySummarizer(t.Summarizer)},
				sum: sum,
			})
		}
		scatter(&b, "cost-vs-kept", "summarizer tokens (all sessions)", "mean verbatim tokens after a compaction", pts, r.Policies)
		for _, metric := range []struct{ name, title string }{
			{"summarizerTokens", "Replay totals: tokens sent to the summarizer"},
			{"compactions", "Replay totals: compactions"},
			{"meanKeptTokens", "Replay totals: mean verbatim tokens after a compaction"},
			{"minKeptTokens", "Replay totals: smallest verbatim context after a compaction"},
		} {
			fmt.Fprintf(&b, "<h2>%s</h2>\n", esc(metric.title))
			barChart(&b, "replay-totals-"+metric.name, totalGroups(r, "replayTotal", metric.name), r.Policies)
		}
		if r.Evaluated {
			writeEvalCharts(&b, r)
		}
	}
	for _, metric := range []struct{ name, title string }{
		{"meanKeptTokens", "Snapshot totals: mean verbatim tokens kept"},
		{"meanAbsDistance", "Snapshot totals: mean distance from keepRecentTokens"},
		{"splitTurns", "Snapshot totals: plans that split a turn"},
		{"violations", "Snapshot totals: invariant violations"},
	} {
		fmt.Fprintf(&b, "<h2>%s</h2>\n", esc(metric.title))
		barChart(&b, "snapshot-totals-"+metric.name, totalGroups(r, "snapshotTotal", metric.name), r.Policies)
	}

	files := chartedFiles(r)
	note := ""
	if n := countFiles(r); n > len(files) {
		note = fmt.Sprintf(" The %d largest of %d sessions are drawn; the JSON below has them all.", len(files), n)
	}
	sessionChart := func(title, id string, keep int, kind, metric, sum string) {
		groups, left := sessionGroups(r, files, keep, kind, metric, sum)
		fmt.Fprintf(&b, "<h2>%s</h2>\n", esc(title))
		n := note
		if left > 0 {
			n += fmt.Sprintf(" %s with nothing to draw here (no plan, no compaction, or zero) %s left out.", plural(left, "session", "sessions"), map[bool]string{true: "is", false: "are"}[left == 1])
		}
		if n != "" {
			fmt.Fprintf(&b, "<p class=\"note\">%s</p>\n", esc(strings.TrimSpace(n)))
		}
		if len(groups) == 0 {
			b.WriteString("<p class=\"note\">Nothing to draw.</p>\n")
			return
		}
		barChart(&b, id, groups, r.Policies)
	}
	for _, keep := range r.KeepRecentTokens {
		if r.Replayed {
			for _, sum := range r.Summarizers {
				of, id := "", ""
				if len(r.Summarizers) > 1 {
					of, id = ", summarizer "+sum, "-"+sum
				}
				sessionChart(fmt.Sprintf("Per session, keepRecentTokens %s%s: replay cost (summarizer tokens)", num(keep), of),
					fmt.Sprintf("replay-sessions-cost-%d%s", keep, id), keep, "replay", "summarizerTokens", sum)
				sessionChart(fmt.Sprintf("Per session, keepRecentTokens %s%s: replay mean verbatim tokens after a compaction", num(keep), of),
					fmt.Sprintf("replay-sessions-kept-%d%s", keep, id), keep, "replay", "meanKeptTokens", sum)
			}
		}
		sessionChart(fmt.Sprintf("Per session, keepRecentTokens %s: snapshot verbatim tokens kept", num(keep)),
			fmt.Sprintf("snapshot-sessions-kept-%d", keep), keep, "snapshot", "keptTokens", "")
	}

	writeTotalsTables(&b, r)
	if len(r.Errors) > 0 {
		fmt.Fprintf(&b, "<h2>Skipped files (%d)</h2>\n<ul>\n", len(r.Errors))
		for _, e := range r.Errors {
			fmt.Fprintf(&b, "<li><code>%s</code>: %s</li>\n", esc(e.File), esc(firstLine(e.Reason)))
		}
		b.WriteString("</ul>\n")
	}
	b.WriteString(`<script type="application/json" id="data">`)
	b.Write(data)
	b.WriteString("</script>\n</body></html>\n")
	_, err = io.WriteString(w, b.String())
	return err
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

func policyColor(policies []string, p string) string {
	i := slices.Index(policies, p)
	if i < 0 {
		i = len(policyColors) - 1
	}
	return policyColors[i%len(policyColors)]
}

func legend(policies []string) string {
	var b strings.Builder
	b.WriteString(`<p>`)
	for _, p := range policies {
		fmt.Fprintf(&b, `<span style="display:inline-block;width:12px;height:12px;background:%s;margin:0 4px 0 12px;vertical-align:middle"></span>%s`, policyColor(policies, p), esc(p))
	}
	b.WriteString("</p>\n")
	return b.String()
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

// writeEvalCharts draws the probe recall: per kind, the first span after later
// compactions, and the summary sizes then, one chart per setting and summarizer.
func writeEvalCharts(b *strings.Builder, r *Result) {
	b.WriteString(`<p class="note">Recall: the probes of each compacted span (files read and modified, commands, failed commands with their error line, the user's requests and constraints, numbers) looked up in the context right after the compaction, summary and kept messages; facts are every kind but the file lists. See docs/quality.md.</p>` + "\n")
	for _, keep := range r.KeepRecentTokens {
		for _, sum := range r.Summarizers {
			label := settingLabel(r, keep, sum)
			var kinds []group
			for _, kind := range ProbeKinds() {
				g := group{label: kind, category: true}
				for _, p := range r.Policies {
					m := mark{kind: "recallTotal", policy: p, keep: keep, metric: "recallPercent", row: [][2]string{{"summarizer", sum}, {"probeKind", kind}}}
					for _, t := range r.RecallTotals {
						if t.Policy == p && t.KeepRecentTokens == keep && t.Summarizer == sum && t.ProbeKind == kind {
							m.value = t.RecallPercent
							if t.Probes == 0 {
								m.missing = "no probes"
							}
						}
					}
					g.marks = append(g.marks, m)
				}
				kinds = append(kinds, g)
			}
			fmt.Fprintf(b, "<h2>Recall per probe kind, %s (%% of probes found right after each compaction)</h2>\n", esc(label))
			barChart(b, fmt.Sprintf("recall-%d-%s", keep, sum), kinds, r.Policies)
			for _, metric := range []struct{ name, title string }{
				{"factsPercent", "the first compacted span's facts still found (%) after the n-th compaction"},
				{"summaryTokensMean", "mean summary tokens after the n-th compaction"},
			} {
				var gs []group
				for _, after := range Milestones {
					g := group{label: fmt.Sprintf("after %d", after), after: after, category: true}
					for _, p := range r.Policies {
						m := mark{kind: "earlyTotal", policy: p, keep: keep, metric: metric.name, row: [][2]string{{"summarizer", sum}, {"after", strconv.Itoa(after)}}}
						for _, e := range r.EarlyTotals {
							if e.Policy == p && e.KeepRecentTokens == keep && e.Summarizer == sum && e.After == after {
								m.value = fieldInt(e, metric.name)
								if e.Sessions == 0 {
									m.missing = "no session got this far"
								} else if metric.name == "factsPercent" && e.FactProbes == 0 {
									m.missing = "no probes"
								}
							}
						}
						g.marks = append(g.marks, m)
					}
					gs = append(gs, g)
				}
				fmt.Fprintf(b, "<h2>%s: %s</h2>\n", esc(label), esc(metric.title))
				barChart(b, fmt.Sprintf("early-%s-%d-%s", metric.name, keep, sum), gs, r.Policies)
			}
		}
	}
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

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// niceSteps are the mantissas of axis maxima and steps.
var niceSteps = []float64{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10}

// niceCeil rounds v up to a round number (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power
// of ten) that splits into four integer ticks (at least 4).
func niceCeil(v int) int {
	if v <= 4 {
		return 4
	}
	p := math.Pow(10, math.Floor(math.Log10(float64(v))))
	for _, m := range niceSteps {
		if n := int(math.Round(m * p)); n >= v && n%4 == 0 {
			return n
		}
	}
	return int(math.Round(10*p)) + (4-int(math.Round(10*p))%4)%4
}

func f2(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

// barChart draws horizontal grouped bars: one group per label, one bar per policy, each
// bar's width proportional to its value on a shared scale, its value written after it.
func barChart(b *strings.Builder, id string, groups []group, policies []string) {
	const left, plotW, barH, gap, groupGap, top = 270.0, 540.0, 12.0, 2.0, 10.0, 20.0
	maxV := 0
	for _, g := range groups {
		for _, m := range g.marks {
			maxV = max(maxV, m.value)
		}
	}
	scaleMax := niceCeil(maxV)
	scale := plotW / float64(scaleMax)
	h := top
	for _, g := range groups {
		h += float64(max(1, len(g.marks)))*(barH+gap) + groupGap
	}
	height := h + 10
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" id="%s" width="%s" height="%s" viewBox="0 0 %s %s" data-scale="%s">`+"\n",
		esc(id), f2(left+plotW+90), f2(height), f2(left+plotW+90), f2(height), strconv.FormatFloat(scale, 'g', -1, 64))
	for i := 0; i <= 4; i++ {
		v := scaleMax * i / 4
		x := left + float64(v)*scale
		fmt.Fprintf(b, `<line class="grid" x1="%s" y1="%s" x2="%s" y2="%s"/>`, f2(x), f2(top-4), f2(x), f2(h))
		fmt.Fprintf(b, `<text class="tick" x="%s" y="%s" text-anchor="middle" data-tick="%d">%s</text>`+"\n", f2(x), f2(top-8), v, num(v))
	}
	y := top
	for _, g := range groups {
		n := float64(max(1, len(g.marks)))
		gy := y + n*(barH+gap)/2 + 4
		switch {
		case g.category:
			fmt.Fprintf(b, `<text class="category" x="%s" y="%s" text-anchor="end" data-after="%d">%s</text>`+"\n", f2(left-6), f2(gy), g.after, esc(g.label))
		case g.labelKeep > 0:
			fmt.Fprintf(b, `<text class="group" x="%s" y="%s" text-anchor="end" data-kind="setting" data-keep="%d">%s</text>`+"\n", f2(left-6), f2(gy), g.labelKeep, esc(g.label))
		default:
			fmt.Fprintf(b, `<text class="group" x="%s" y="%s" text-anchor="end"><title>%s</title>%s</text>`+"\n", f2(left-6), f2(gy), esc(g.label), esc(clip(g.label, 38)))
		}
		for _, m := range g.marks {
			if m.missing != "" {
				fmt.Fprintf(b, `<text class="missing" x="%s" y="%s" data-kind="%s" data-policy="%s" fill="%s">%s (%s)</text>`+"\n",
					f2(left+4), f2(y+barH-2), esc(m.kind), esc(m.policy), policyColor(policies, m.policy), esc(m.missing), esc(m.policy))
				y += barH + gap
				continue
			}
			wd := math.Max(0, float64(m.value)*scale)
			fmt.Fprintf(b, `<rect class="bar" x="%s" y="%s" width="%s" height="%s" fill="%s"%s><title>%s</title></rect>`,
				f2(left), f2(y), f2(wd), f2(barH), policyColor(policies, m.policy), m.attrs(), esc(markTitle(g.label, m)))
			fmt.Fprintf(b, `<text class="value" x="%s" y="%s"%s>%s</text>`+"\n", f2(left+wd+4), f2(y+barH-2), m.attrs(), num(m.value))
			y += barH + gap
		}
		if len(g.marks) == 0 {
			y += barH + gap
		}
		y += groupGap
	}
	fmt.Fprintf(b, `<line class="axis" x1="%s" y1="%s" x2="%s" y2="%s"/>`, f2(left), f2(top-4), f2(left), f2(h))
	b.WriteString("</svg>\n")
}

func markTitle(label string, m mark) string {
	return fmt.Sprintf("%s · %s · keep %d: %s %s", label, m.policy, m.keep, m.metric, num(m.value))
}

// clip shortens a label to n runes by cutting out its middle, so both the start (a
// session's project directory) and the end (its id) stay readable; the full label is the
// element's title.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	head := (n - 1) / 2
	return string(r[:head]) + "…" + string(r[len(r)-(n-1-head):])
}

// point is one scatter point; sum, when set, is added to its label.
type point struct {
	x, y mark
	sum  string
}

// scatter draws one point per (x, y) pair on linear axes from 0, labelled with its policy
// and keepRecentTokens.
func scatter(b *strings.Builder, id, xLabel, yLabel string, pts []point, policies []string) {
	const left, bottomPad, plotW, plotH, top = 80.0, 50.0, 600.0, 320.0, 20.0
	maxX, maxY := 0, 0
	for _, p := range pts {
		maxX, maxY = max(maxX, p.x.value), max(maxY, p.y.value)
	}
	// Both axes start at zero: a close call between policies must look close.
	loX, stepX := 0, niceCeil(maxX)/4
	loY, stepY := 0, niceCeil(maxY)/4
	sx, sy := plotW/float64(4*stepX), plotH/float64(4*stepY)
	width, height := left+plotW+160, top+plotH+bottomPad
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" id="%s" width="%s" height="%s" viewBox="0 0 %s %s" data-scale-x="%s" data-scale-y="%s">`+"\n",
		esc(id), f2(width), f2(height), f2(width), f2(height), strconv.FormatFloat(sx, 'g', -1, 64), strconv.FormatFloat(sy, 'g', -1, 64))
	y0 := top + plotH
	px := func(v int) float64 { return left + float64(v-loX)*sx }
	py := func(v int) float64 { return y0 - float64(v-loY)*sy }
	for i := 0; i <= 4; i++ {
		vx, vy := loX+stepX*i, loY+stepY*i
		x, y := px(vx), py(vy)
		fmt.Fprintf(b, `<line class="grid" x1="%s" y1="%s" x2="%s" y2="%s"/>`, f2(x), f2(top), f2(x), f2(y0))
		fmt.Fprintf(b, `<text class="tick" x="%s" y="%s" text-anchor="middle" data-tick="%d">%s</text>`, f2(x), f2(y0+14), vx, num(vx))
		fmt.Fprintf(b, `<line class="grid" x1="%s" y1="%s" x2="%s" y2="%s"/>`, f2(left), f2(y), f2(left+plotW), f2(y))
		fmt.Fprintf(b, `<text class="tick" x="%s" y="%s" text-anchor="end" data-tick="%d">%s</text>`+"\n", f2(left-4), f2(y+4), vy, num(vy))
	}
	fmt.Fprintf(b, `<line class="axis" x1="%s" y1="%s" x2="%s" y2="%s"/><line class="axis" x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n",
		f2(left), f2(y0), f2(left+plotW), f2(y0), f2(left), f2(top), f2(left), f2(y0))
	fmt.Fprintf(b, `<text x="%s" y="%s" text-anchor="middle">%s</text>`, f2(left+plotW/2), f2(y0+36), esc(xLabel))
	fmt.Fprintf(b, `<text x="12" y="%s" transform="rotate(-90 12 %s)" text-anchor="middle">%s</text>`+"\n", f2(top+plotH/2), f2(top+plotH/2), esc(yLabel))
	var placed [][2]float64 // label anchors already used
	for _, p := range pts {
		cx, cy := px(p.x.value), py(p.y.value)
		fmt.Fprintf(b, `<circle class="point" cx="%s" cy="%s" r="6" fill="%s"%s data-metric2="%s" data-value2="%d"><title>%s · keep %d: %s %s, %s %s</title></circle>`,
			f2(cx), f2(cy), policyColor(policies, p.x.policy), p.x.attrs(), esc(p.y.metric), p.y.value,
			esc(p.x.policy), p.x.keep, esc(p.x.metric), num(p.x.value), esc(p.y.metric), num(p.y.value))
		// Move a label down or up until it does not overlap one already placed.
		lx, ly := cx+9, cy+4
		for _, dy := range []float64{0, 13, -13, 26, -26, 39, -39} {
			free := true
			for _, q := range placed {
				if math.Abs(q[0]-lx) < 110 && math.Abs(q[1]-(cy+4+dy)) < 12 {
					free = false
				}
			}
			if free {
				ly = cy + 4 + dy
				break
			}
		}
		placed = append(placed, [2]float64{lx, ly})
		sum := ""
		if p.sum != "" {
			sum = " · " + p.sum
		}
		fmt.Fprintf(b, `<text class="label" x="%s" y="%s" data-kind="setting" data-policy="%s" data-keep="%d">%s · %d%s</text>`+"\n",
			f2(lx), f2(ly), esc(p.x.policy), p.x.keep, esc(p.x.policy), p.x.keep, esc(sum))
	}
	b.WriteString("</svg>\n")
}

func writeTotalsTables(b *strings.Builder, r *Result) {
	if r.Replayed {
		b.WriteString("<h2>Replay totals</h2>\n<table><tr><th>keep</th><th class=\"l\">policy</th><th class=\"l\">summarizer</th><th>sessions</th><th>compacted</th><th>compactions</th><th>stuck</th><th>still over budget</th><th>lists shortened</th><th>summarizer tokens</th><th>mean kept</th><th>min kept</th><th>max context</th><th>violations</th><th>LLM calls</th><th>LLM input (cached)</th><th>LLM output</th></tr>\n")
		for _, t := range r.ReplayTotals {
			fmt.Fprintf(b, "<tr><td>%d</td><td class=\"l\">%s</td><td class=\"l\">%s</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%d</td><td>%d</td><td>%s (%s)</td><td>%s</td></tr>\n",
				t.KeepRecentTokens, esc(t.Policy), esc(t.Summarizer), t.Sessions, t.Compacted, t.Compactions, t.Stuck, t.StillOverBudget, t.ShortenedLists,
				num(t.SummarizerTokens), num(t.MeanKeptTokens), num(t.MinKeptTokens), num(t.MaxContextTokens), t.Violations,
				t.LLMCalls, num(t.LLMInputTokens), num(t.LLMCachedInputTokens), num(t.LLMOutputTokens))
		}
		b.WriteString("</table>\n")
	}
	if r.Evaluated {
		b.WriteString("<h2>Recall per probe kind</h2>\n<table><tr><th>keep</th><th class=\"l\">policy</th><th class=\"l\">summarizer</th><th>compactions</th><th>mean summary</th><th>of it file lists</th><th>max summary</th>")
		for _, k := range ProbeKinds() {
			fmt.Fprintf(b, "<th>%s</th>", esc(k))
		}
		b.WriteString("<th>facts</th></tr>\n")
		for _, t := range r.ReplayTotals {
			if t.Recall == nil {
				continue
			}
			fmt.Fprintf(b, "<tr><td>%d</td><td class=\"l\">%s</td><td class=\"l\">%s</td><td>%d</td><td>%s</td><td>%s</td><td>%s</td>",
				t.KeepRecentTokens, esc(t.Policy), esc(t.Summarizer), t.Compactions, num(t.SummaryTokensMean), num(t.FileListTokensMean), num(t.SummaryTokensMax))
			for _, k := range ProbeKinds() {
				fmt.Fprintf(b, "<td>%s</td>", esc(recallCell(*t.Recall.Kind(k))))
			}
			fmt.Fprintf(b, "<td>%s</td></tr>\n", esc(recallCell(t.Recall.Facts())))
		}
		b.WriteString("</table>\n<h2>The first compacted span after the n-th compaction</h2>\n<table><tr><th>keep</th><th class=\"l\">policy</th><th class=\"l\">summarizer</th><th>after</th><th>sessions</th><th>mean summary</th><th>facts</th><th>files</th>")
		for _, k := range ProbeKinds()[2:] {
			fmt.Fprintf(b, "<th>%s</th>", esc(k))
		}
		b.WriteString("</tr>\n")
		for _, e := range r.EarlyTotals {
			fmt.Fprintf(b, "<tr><td>%d</td><td class=\"l\">%s</td><td class=\"l\">%s</td><td>%d</td><td>%d</td><td>%s</td><td>%s</td><td>%s</td>",
				e.KeepRecentTokens, esc(e.Policy), esc(e.Summarizer), e.After, e.Sessions, num(e.SummaryTokensMean),
				esc(recallCell(Recall{Probes: e.FactProbes, Found: e.FactsFound})), esc(recallCell(Recall{Probes: e.FileProbes, Found: e.FilesFound})))
			for _, k := range ProbeKinds()[2:] {
				fmt.Fprintf(b, "<td>%s</td>", esc(recallCell(*e.FirstSpan.Kind(k))))
			}
			b.WriteString("</tr>\n")
		}
		b.WriteString("</table>\n")
	}
	b.WriteString("<h2>Snapshot totals</h2>\n<table><tr><th>keep</th><th class=\"l\">policy</th><th>sessions</th><th>prepared</th><th>mean kept</th><th>mean |distance|</th><th>split turns</th><th>summarized</th><th>turn prefix</th><th>violations</th><th>agree with pi</th></tr>\n")
	for _, t := range r.SnapshotTotals {
		fmt.Fprintf(b, "<tr><td>%d</td><td class=\"l\">%s</td><td>%d</td><td>%d</td><td>%s</td><td>%s</td><td>%d</td><td>%s</td><td>%s</td><td>%d</td><td>%d</td></tr>\n",
			t.KeepRecentTokens, esc(t.Policy), t.Sessions, t.Prepared, num(t.MeanKeptTokens), num(t.MeanAbsDistance),
			t.SplitTurns, num(t.SummarizedTokens), num(t.TurnPrefixTokens), t.Violations, t.AgreesWithPi)
	}
	b.WriteString("</table>\n")
}
