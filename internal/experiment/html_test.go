package experiment

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// node is an element of a parsed SVG.
type node struct {
	name     string
	attrs    map[string]string
	text     string
	children []*node
}

func parseSVG(t *testing.T, src string) *node {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(src))
	var stack []*node
	var root *node
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			n := &node{name: tk.Name.Local, attrs: map[string]string{}}
			for _, a := range tk.Attr {
				n.attrs[a.Name.Local] = a.Value
			}
			if len(stack) > 0 {
				p := stack[len(stack)-1]
				p.children = append(p.children, n)
			} else {
				root = n
			}
			stack = append(stack, n)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				stack[len(stack)-1].text += string(tk)
			}
		}
	}
	if root == nil || len(stack) != 0 {
		t.Fatalf("SVG does not parse as XML: %.200s", src)
	}
	return root
}

func (n *node) walk(f func(*node)) {
	f(n)
	for _, c := range n.children {
		c.walk(f)
	}
}

func (n *node) float(t *testing.T, key string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(n.attrs[key], 64)
	if err != nil {
		t.Fatalf("<%s %s=%q>: %v", n.name, key, n.attrs[key], err)
	}
	return v
}

var svgRe = regexp.MustCompile(`(?s)<svg .*?</svg>`)
var dataRe = regexp.MustCompile(`(?s)<script type="application/json" id="data">(.*?)</script>`)

// TestHTMLNumbersMatchJSON renders the corpus report and checks that every number drawn
// in its SVG charts (bars, points, value labels, titles, setting labels, axis ticks) is the
// number in the embedded JSON, that bar lengths and point positions follow one linear
// scale per chart, and that every total is drawn.
func TestHTMLNumbersMatchJSON(t *testing.T) {
	t.Parallel()
	r := corpusResult(t)
	drawn, numbers, charts, page := checkHTMLNumbers(t, r, 10)
	files := map[string]bool{}
	for _, s := range r.Snapshot {
		files[s.File] = true
	}
	// Per-session charts: a session is drawn when it has a number to show; a snapshot row
	// without a plan is written "no plan", never drawn as a bar of 0.
	wantBars, wantMissing, wantCost := 0, 0, 0
	for _, keep := range r.KeepRecentTokens {
		for f := range files {
			var rows []SnapshotRow
			drawnGroup := false
			for _, row := range r.Snapshot {
				if row.File == f && row.KeepRecentTokens == keep {
					rows = append(rows, row)
					drawnGroup = drawnGroup || (row.Prepared && row.KeptTokens != 0)
				}
			}
			for _, row := range rows {
				switch {
				case !drawnGroup:
				case row.Prepared:
					wantBars++
				default:
					wantMissing++
				}
			}
			var cost []ReplayRow
			drawnCost := false
			for _, row := range r.Replay {
				if row.File == f && row.KeepRecentTokens == keep {
					cost = append(cost, row)
					drawnCost = drawnCost || row.SummarizerTokens != 0
				}
			}
			if drawnCost {
				wantCost += len(cost)
			}
		}
	}
	if wantBars == len(r.Snapshot) {
		t.Fatal("every snapshot row of the corpus result has a plan: the check would prove nothing")
	}
	if drawn["snapshot/missing"] != wantMissing {
		t.Errorf("snapshot rows without a plan written %d times, want %d", drawn["snapshot/missing"], wantMissing)
	}
	if !strings.Contains(page, "with nothing to draw here (no plan, no compaction, or zero)") {
		t.Error("the report does not say that sessions with nothing to draw were left out")
	}
	// Every total is drawn, once per chart of it; an evaluated total without probes (or
	// without a session that got that far) is written, not drawn.
	wantRecall, wantEarly, wantEarlyFacts := 0, 0, 0
	for _, rt := range r.RecallTotals {
		if rt.Probes > 0 {
			wantRecall++
		}
	}
	for _, e := range r.EarlyTotals {
		if e.Sessions > 0 {
			wantEarly++
			if e.FactProbes > 0 {
				wantEarlyFacts++
			}
		}
	}
	if len(r.RecallTotals) == 0 || wantEarly == 0 {
		t.Fatalf("%d recall totals, %d of %d milestones reached: the check would prove little", len(r.RecallTotals), wantEarly, len(r.EarlyTotals))
	}
	for key, want := range map[string]int{
		"recallTotal/recallPercent":    wantRecall,
		"earlyTotal/summaryTokensMean": wantEarly,
		"earlyTotal/factsPercent":      wantEarlyFacts,
		"earlyTotal/missing":           2*len(r.EarlyTotals) - wantEarly - wantEarlyFacts,
		"recallTotal/missing":          len(r.RecallTotals) - wantRecall,
		"replayTotal/point":            len(r.ReplayTotals),
		"replayTotal/summarizerTokens": len(r.ReplayTotals),
		"replayTotal/meanKeptTokens":   len(r.ReplayTotals),
		"snapshotTotal/meanKeptTokens": len(r.SnapshotTotals),
		"snapshotTotal/violations":     len(r.SnapshotTotals),
		"snapshot/keptTokens":          wantBars, // the corpus is under MaxSessionsCharted
		"replay/summarizerTokens":      wantCost,
	} {
		if drawn[key] != want {
			t.Errorf("%s drawn %d times, want %d", key, drawn[key], want)
		}
	}
	t.Logf("%d charts, %d numbers checked", charts, numbers)
}

func TestHTMLCapsSessions(t *testing.T) {
	t.Parallel()
	r := &Result{Policies: []string{"pi"}, KeepRecentTokens: []int{100}, Counter: "estimate"}
	for i := range MaxSessionsCharted + 10 {
		r.Snapshot = append(r.Snapshot, SnapshotRow{File: fmt.Sprintf("s%03d.jsonl", i), Policy: "pi", KeepRecentTokens: 100,
			TokensBefore: i, KeptTokens: i, Prepared: true})
	}
	files := chartedFiles(r)
	if len(files) != MaxSessionsCharted || files[0] != "s010.jsonl" {
		t.Fatalf("charted %d files starting with %s; want the %d largest", len(files), files[0], MaxSessionsCharted)
	}
	var b strings.Builder
	if err := WriteHTML(&b, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), fmt.Sprintf("The %d largest of %d sessions", MaxSessionsCharted, MaxSessionsCharted+10)) {
		t.Error("the report does not say that sessions were left out")
	}
}

// A replay that never compacted has no "verbatim after a compaction" to draw: it says so
// instead of drawing 0; a session with nothing to draw is left out and counted; a long
// file name keeps its start and its end.
func TestHTMLMissingValuesAndLabels(t *testing.T) {
	t.Parallel()
	long := "--home-dev-a-very-long-project-name--/2025-11-09T13-00-00-000Z_019a68b3-b880-73de-830f-69583aef2c0c.jsonl"
	r := &Result{Policies: []string{"pi", "turn"}, KeepRecentTokens: []int{100}, Counter: "estimate", Replayed: true, Summarizers: []string{SummarizerExtractive}}
	for _, f := range []string{long, "idle.jsonl"} {
		for _, p := range r.Policies {
			r.Snapshot = append(r.Snapshot, SnapshotRow{File: f, Policy: p, KeepRecentTokens: 100, TokensBefore: 1000, KeptTokens: 100, Prepared: true})
			row := ReplayRow{File: f, Policy: p, KeepRecentTokens: 100, Summarizer: SummarizerExtractive}
			if f == long && p == "pi" {
				row.Compactions, row.MeanKeptTokens, row.SummarizerTokens = 1, 500, 900
			}
			r.Replay = append(r.Replay, row)
		}
	}
	var b strings.Builder
	if err := WriteHTML(&b, r); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	i := strings.Index(page, `id="replay-sessions-kept-100"`)
	if i < 0 {
		t.Fatal("no per-session kept chart")
	}
	chart := page[i : i+strings.Index(page[i:], "</svg>")]
	if !strings.Contains(chart, ">no compaction (turn)</text>") || strings.Contains(chart, `data-policy="turn" data-keep="100" data-metric="meanKeptTokens"`) {
		t.Errorf("the turn replay (no compaction) is drawn as a number:\n%s", chart)
	}
	if strings.Contains(chart, "idle.jsonl") || !strings.Contains(page, "1 session with nothing to draw here") {
		t.Error("the session without compactions is drawn, or its leaving out is not said")
	}
	label := clip(long, 38)
	head, tail, _ := strings.Cut(label, "…")
	if len([]rune(label)) != 38 || !strings.HasPrefix(long, head) || !strings.HasSuffix(long, tail) || !strings.HasPrefix(head, "--home-dev") {
		t.Errorf("clip(%q) = %q", long, label)
	}
	if !strings.Contains(page, "<title>"+long+"</title>") {
		t.Error("the full file name is not the label's title")
	}
}

// checkHTMLNumbers renders r and checks every number the report draws against the JSON it
// embeds (the row a mark names, its metric), the scales, ticks and labels; it returns how
// many marks of each kind/metric were drawn, the numbers checked, the charts and the page.
func checkHTMLNumbers(t *testing.T, r *Result, minCharts int) (map[string]int, int, int, string) {
	t.Helper()
	var b strings.Builder
	if err := WriteHTML(&b, r); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if strings.Contains(page, "<link") || strings.Contains(page, "src=") || strings.Contains(page, "http://") && !strings.Contains(page, `xmlns="http://www.w3.org/2000/svg"`) {
		t.Error("the report refers to external assets")
	}
	m := dataRe.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no embedded JSON")
	}
	var data map[string]any
	if err := json.Unmarshal([]byte(m[1]), &data); err != nil {
		t.Fatalf("embedded JSON: %v", err)
	}
	// The embedded JSON is the result.
	var want strings.Builder
	if err := WriteJSON(&want, r); err != nil {
		t.Fatal(err)
	}
	var wantData map[string]any
	_ = json.Unmarshal([]byte(want.String()), &wantData)
	if fmt.Sprint(wantData) != fmt.Sprint(data) {
		t.Fatal("embedded JSON differs from the result")
	}

	rows := func(kind string) []map[string]any {
		key := map[string]string{"snapshot": "snapshot", "replay": "replay", "snapshotTotal": "snapshotTotals", "replayTotal": "replayTotals",
			"recallTotal": "recallTotals", "earlyTotal": "earlyTotals"}[kind]
		var out []map[string]any
		for _, v := range data[key].([]any) {
			out = append(out, v.(map[string]any))
		}
		return out
	}
	find := func(n *node) map[string]any {
		kind := n.attrs["data-kind"]
		var hit map[string]any
		for _, row := range rows(kind) {
			if row["policy"] != n.attrs["data-policy"] || fmt.Sprint(row["keepRecentTokens"]) != n.attrs["data-keep"] {
				continue
			}
			if f, ok := n.attrs["data-file"]; ok && row["file"] != f {
				continue
			}
			// Further identifying fields: data-row-summarizer, -probeKind, -after.
			other := false
			for k, v := range n.attrs {
				if field, ok := strings.CutPrefix(k, "data-row-"); ok && fmt.Sprint(row[field]) != v {
					other = true
				}
			}
			if other {
				continue
			}
			if hit != nil {
				t.Errorf("%v matches two %s rows", n.attrs, kind)
			}
			hit = row
		}
		if hit == nil {
			t.Fatalf("%v matches no %s row", n.attrs, kind)
		}
		return hit
	}
	checkValue := func(n *node, metricKey, valueKey string) {
		row := find(n)
		got, ok := row[n.attrs[metricKey]].(float64)
		if !ok {
			t.Fatalf("%v: JSON row has no number %q", n.attrs, n.attrs[metricKey])
		}
		if strconv.Itoa(int(got)) != n.attrs[valueKey] {
			t.Errorf("%v: drawn %s = %s, JSON %v", n.attrs, n.attrs[metricKey], n.attrs[valueKey], got)
		}
	}
	noCommas := func(s string) string { return strings.ReplaceAll(s, ",", "") }
	keeps := map[string]bool{}
	for _, k := range r.KeepRecentTokens {
		keeps[strconv.Itoa(k)] = true
	}
	files := map[string]bool{}
	for _, s := range r.Snapshot {
		files[s.File] = true
	}

	svgs := svgRe.FindAllString(page, -1)
	if len(svgs) < minCharts {
		t.Fatalf("%d charts", len(svgs))
	}
	drawn := map[string]int{} // kind/metric -> marks
	numbers := 0
	for _, src := range svgs {
		svg := parseSVG(t, src)
		var scale, sx, sy float64
		if _, ok := svg.attrs["data-scale"]; ok {
			scale = svg.float(t, "data-scale")
		} else {
			sx, sy = svg.float(t, "data-scale-x"), svg.float(t, "data-scale-y")
		}
		barLeft := math.NaN()
		var originX, originY []float64
		var ticks []*node
		svg.walk(func(n *node) {
			switch {
			case n.name == "rect" && n.attrs["class"] == "bar":
				checkValue(n, "data-metric", "data-value")
				numbers++
				v := n.float(t, "data-value")
				if w := n.float(t, "width"); math.Abs(w-v*scale) > 0.01 {
					t.Errorf("%v: width %v, want %v x %v", n.attrs, w, v, scale)
				}
				if x := n.float(t, "x"); math.IsNaN(barLeft) {
					barLeft = x
				} else if x != barLeft {
					t.Errorf("bars start at %v and %v", barLeft, x)
				}
				drawn[n.attrs["data-kind"]+"/"+n.attrs["data-metric"]]++
				title := noCommas(n.children[0].text)
				if !strings.HasSuffix(title, n.attrs["data-metric"]+" "+n.attrs["data-value"]) {
					t.Errorf("title %q does not end with %s %s", title, n.attrs["data-metric"], n.attrs["data-value"])
				}
			case n.name == "circle":
				checkValue(n, "data-metric", "data-value")
				checkValue(n, "data-metric2", "data-value2")
				numbers += 2
				originX = append(originX, n.float(t, "cx")-n.float(t, "data-value")*sx)
				originY = append(originY, n.float(t, "cy")+n.float(t, "data-value2")*sy)
				drawn[n.attrs["data-kind"]+"/point"]++
				title := noCommas(n.children[0].text)
				for _, k := range []string{"data-metric", "data-metric2"} {
					v := map[string]string{"data-metric": "data-value", "data-metric2": "data-value2"}[k]
					if !strings.Contains(title, n.attrs[k]+" "+n.attrs[v]) {
						t.Errorf("title %q lacks %s %s", title, n.attrs[k], n.attrs[v])
					}
				}
			case n.name == "text" && n.attrs["class"] == "value":
				checkValue(n, "data-metric", "data-value")
				numbers++
				if noCommas(n.text) != n.attrs["data-value"] {
					t.Errorf("value label %q, data-value %s", n.text, n.attrs["data-value"])
				}
			case n.name == "text" && n.attrs["class"] == "tick":
				ticks = append(ticks, n)
				if noCommas(n.text) != n.attrs["data-tick"] {
					t.Errorf("tick label %q, data-tick %s", n.text, n.attrs["data-tick"])
				}
			case n.name == "text" && n.attrs["data-kind"] == "setting":
				if !keeps[n.attrs["data-keep"]] || !strings.Contains(n.text, n.attrs["data-keep"]) {
					t.Errorf("setting label %q (keep %s) is not a keepRecentTokens of the result", n.text, n.attrs["data-keep"])
				}
				if p, ok := n.attrs["data-policy"]; ok && !slices.Contains(r.Policies, p) {
					t.Errorf("label names policy %q", p)
				}
			case n.name == "text" && n.attrs["class"] == "group":
				// A long label loses its middle, never its start or its end; the title
				// holds it whole.
				head, tail, _ := strings.Cut(n.text, "…")
				full := ""
				if len(n.children) > 0 {
					full = n.children[0].text
				}
				if !files[full] || !strings.HasPrefix(full, head) || !strings.HasSuffix(full, tail) {
					t.Errorf("group label %q (title %q) is not a session file", n.text, full)
				}
			case n.name == "text" && n.attrs["class"] == "missing":
				drawn[n.attrs["data-kind"]+"/missing"]++
				if !strings.HasPrefix(n.text, "no plan") && !strings.HasPrefix(n.text, "no compaction") &&
					!strings.HasPrefix(n.text, "no session got this far") && !strings.HasPrefix(n.text, "no probes") {
					t.Errorf("missing-value label %q", n.text)
				}
			case n.name == "text" && n.attrs["class"] == "category":
				// A probe kind, or "after N" for the N-th compaction.
				if after := n.attrs["data-after"]; after != "0" {
					if n.text != "after "+after {
						t.Errorf("category label %q, data-after %s", n.text, after)
					}
				} else if !slices.Contains(ProbeKinds(), n.text) {
					t.Errorf("category label %q is not a probe kind", n.text)
				}
			case n.name == "text" && regexp.MustCompile(`[0-9]`).MatchString(n.text):
				t.Errorf("unchecked number drawn: <text %v>%s", n.attrs, n.text)
			}
		})
		// Ticks sit on the same scale as the data.
		for _, tk := range ticks {
			if scale > 0 && !math.IsNaN(barLeft) {
				if x := tk.float(t, "x"); math.Abs(x-(barLeft+tk.float(t, "data-tick")*scale)) > 0.01 {
					t.Errorf("tick %s at x=%v, want %v", tk.attrs["data-tick"], x, barLeft+tk.float(t, "data-tick")*scale)
				}
			}
		}
		for i := range originX {
			if math.Abs(originX[i]-originX[0]) > 0.01 || math.Abs(originY[i]-originY[0]) > 0.01 {
				t.Errorf("scatter points are not on one linear scale: origins %v, %v", originX, originY)
				break
			}
		}
		// Scatter axes start at zero (no zoom that makes a 1% difference look large).
		if sx > 0 {
			zeros := 0
			for _, tk := range ticks {
				if tk.attrs["data-tick"] == "0" {
					zeros++
				}
			}
			if zeros != 2 {
				t.Errorf("scatter %s: %d zero ticks, want both axes from 0", svg.attrs["id"], zeros)
			}
		}
	}
	return drawn, numbers, len(svgs), page
}

// With two summarizers, every replay chart and total is drawn per summarizer; a
// milestone no session reached is written, not drawn as 0.
func TestHTMLSummarizersAndMilestones(t *testing.T) {
	t.Parallel()
	r := &Result{Policies: []string{"nearest"}, KeepRecentTokens: []int{100}, Counter: "estimate", Replayed: true, Evaluated: true,
		Summarizers: []string{SummarizerExtractive, SummarizerLLM}}
	r.Snapshot = []SnapshotRow{{File: "a.jsonl", Policy: "nearest", KeepRecentTokens: 100, TokensBefore: 1000, KeptTokens: 100, Prepared: true}}
	for i, sum := range r.Summarizers {
		row := ReplayRow{File: "a.jsonl", Policy: "nearest", KeepRecentTokens: 100, Summarizer: sum, Compactions: 2, SummarizerTokens: 900 + i, MeanKeptTokens: 500}
		row.Eval = &ReplayEval{Recall: ProbeRecall{Request: Recall{Probes: 10, Found: 9 - 5*i}}, SummaryTokensSum: 400, SummaryTokensMean: 200, SummaryTokensMax: 300}
		for k, after := range Milestones {
			row.Eval.Milestones[k] = Milestone{After: after, Reached: after <= 2, SummaryTokens: 100 * after, FirstSpan: ProbeRecall{Request: Recall{Probes: 4, Found: 4 - after}}}
		}
		r.Replay = append(r.Replay, row)
	}
	r.SnapshotTotals = snapshotTotals(r.Snapshot, r.Policies, r.KeepRecentTokens)
	r.ReplayTotals = replayTotals(r.Replay, r.Policies, r.KeepRecentTokens, r.Summarizers)
	r.RecallTotals, r.EarlyTotals = evalTotals(r.ReplayTotals)
	var b strings.Builder
	if err := WriteHTML(&b, r); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{`id="replay-sessions-cost-100-llm"`, `id="recall-100-extractive"`, `id="early-factsPercent-100-llm"`,
		`data-kind="recallTotal" data-row-summarizer="llm" data-row-probeKind="request" data-policy="nearest" data-keep="100" data-metric="recallPercent" data-value="40"`,
		`>keep 100 · llm</text>`, ">no session got this far (nearest)</text>", ">no probes (nearest)</text>"} {
		if !strings.Contains(page, want) {
			t.Errorf("the report lacks %s", want)
		}
	}
	drawn, numbers, charts, _ := checkHTMLNumbers(t, r, 10)
	if drawn["replayTotal/point"] != 2 || drawn["replay/summarizerTokens"] != 2 || drawn["earlyTotal/missing"] != 8 {
		t.Errorf("drawn %v", drawn)
	}
	t.Logf("%d charts, %d numbers checked", charts, numbers)
}
