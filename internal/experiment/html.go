package experiment

// The HTML report, in three files:
//
//   html.go        the page: WriteHTML, its sections in order, the eval charts and the totals tables
//   html_marks.go  what each chart shows: marks (one number of a result row) and their groups
//   html_svg.go    drawing: the bar chart, the scatter plot and their axes
//
// Every drawn number is a mark that names the JSON row and field it comes from, so the report
// can be checked against the JSON it embeds; building the marks is apart from drawing them.

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"slices"
	"strconv"
	"strings"
)

// MaxSessionsCharted caps the per-session charts of the HTML report: the largest sessions
// (by context size) are drawn; the embedded JSON always has every row.
const MaxSessionsCharted = 40

var policyColors = []string{"#3b6fb6", "#e07b39", "#3a9a5b", "#b64a8f", "#8a6d3b", "#5a5a5a"}

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
	b.WriteString(htmlHead)
	writeIntro(&b, r)
	if r.Replayed {
		writeReplayCharts(&b, r)
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
	writeSessionCharts(&b, r)
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

// htmlHead is the report's head, its style and its title.
const htmlHead = `<!DOCTYPE html>
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
`

// writeIntro writes what the experiment compared, and the policies' legend.
func writeIntro(b *strings.Builder, r *Result) {
	window := "each session's model window from the catalog"
	if r.ContextWindow > 0 {
		window = num(r.ContextWindow) + " tokens (override)"
	}
	fmt.Fprintf(b, "<p>%d session files, %d read. Counter <code>%s</code>, reserveTokens %s, context window %s, policies %s, keepRecentTokens %s.",
		r.Files, r.Sessions, esc(r.Counter), num(r.ReserveTokens), esc(window), esc(strings.Join(r.Policies, ", ")), esc(joinInts(r.KeepRecentTokens)))
	if r.Replayed {
		fmt.Fprintf(b, " Replay summarizer: %s.", esc(describeSummarizers(r)))
	}
	b.WriteString("</p>\n")
	b.WriteString(legend(r.Policies))
}

// writeReplayCharts writes the replay's charts: cost against verbatim context kept, the
// totals, and the evaluation's.
func writeReplayCharts(b *strings.Builder, r *Result) {
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
	scatter(b, "cost-vs-kept", "summarizer tokens (all sessions)", "mean verbatim tokens after a compaction", pts, r.Policies)
	for _, metric := range []struct{ name, title string }{
		{"summarizerTokens", "Replay totals: tokens sent to the summarizer"},
		{"compactions", "Replay totals: compactions"},
		{"meanKeptTokens", "Replay totals: mean verbatim tokens after a compaction"},
		{"minKeptTokens", "Replay totals: smallest verbatim context after a compaction"},
	} {
		fmt.Fprintf(b, "<h2>%s</h2>\n", esc(metric.title))
		barChart(b, "replay-totals-"+metric.name, totalGroups(r, "replayTotal", metric.name), r.Policies)
	}
	if r.Evaluated {
		writeEvalCharts(b, r)
	}
}

// writeSessionCharts writes the per-session charts of every keepRecentTokens setting (and
// summarizer), of the largest sessions.
func writeSessionCharts(b *strings.Builder, r *Result) {
	files := chartedFiles(r)
	note := ""
	if n := countFiles(r); n > len(files) {
		note = fmt.Sprintf(" The %d largest of %d sessions are drawn; the JSON below has them all.", len(files), n)
	}
	chart := func(title, id string, keep int, kind, metric, sum string) {
		sessionChart(b, r, files, note, title, id, keep, kind, metric, sum)
	}
	for _, keep := range r.KeepRecentTokens {
		if r.Replayed {
			for _, sum := range r.Summarizers {
				of, id := "", ""
				if len(r.Summarizers) > 1 {
					of, id = ", summarizer "+sum, "-"+sum
				}
				chart(fmt.Sprintf("Per session, keepRecentTokens %s%s: replay cost (summarizer tokens)", num(keep), of),
					fmt.Sprintf("replay-sessions-cost-%d%s", keep, id), keep, "replay", "summarizerTokens", sum)
				chart(fmt.Sprintf("Per session, keepRecentTokens %s%s: replay mean verbatim tokens after a compaction", num(keep), of),
					fmt.Sprintf("replay-sessions-kept-%d%s", keep, id), keep, "replay", "meanKeptTokens", sum)
			}
		}
		chart(fmt.Sprintf("Per session, keepRecentTokens %s: snapshot verbatim tokens kept", num(keep)),
			fmt.Sprintf("snapshot-sessions-kept-%d", keep), keep, "snapshot", "keptTokens", "")
	}
}

// sessionChart writes one per-session chart of files, with note and what was left out.
func sessionChart(b *strings.Builder, r *Result, files []string, note, title, id string, keep int, kind, metric, sum string) {
	groups, left := sessionGroups(r, files, keep, kind, metric, sum)
	fmt.Fprintf(b, "<h2>%s</h2>\n", esc(title))
	n := note
	if left > 0 {
		n += fmt.Sprintf(" %s with nothing to draw here (no plan, no compaction, or zero) %s left out.", plural(left, "session", "sessions"), map[bool]string{true: "is", false: "are"}[left == 1])
	}
	if n != "" {
		fmt.Fprintf(b, "<p class=\"note\">%s</p>\n", esc(strings.TrimSpace(n)))
	}
	if len(groups) == 0 {
		b.WriteString("<p class=\"note\">Nothing to draw.</p>\n")
		return
	}
	barChart(b, id, groups, r.Policies)
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

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
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
