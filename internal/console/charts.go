package console

import (
	"context"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/operator"
)

// Charts are SVG drawn on the server: no script, no other origin, and presentation
// attributes only (the Content-Security-Policy allows no inline style).

// Series is one line or set of bars of a chart.
type Series struct {
	Name   string    `json:"name"`
	Values []float64 `json:"values"`
	Color  string    `json:"-"`
}

// Chart is a chart's data: series over the same times.
type Chart struct {
	Title  string      `json:"title"`
	Unit   string      `json:"unit"`
	Times  []time.Time `json:"times"`
	Series []Series    `json:"series"`
	Bars   bool        `json:"-"`
}

var palette = []string{"#2f6db5", "#d9822b", "#3a9a5b", "#b53f3f", "#7a5bb5", "#6b6b6b"}

const (
	chartW, chartH             = 640, 180
	padL, padR, padT, padB     = 56, 12, 24, 28
	plotW, plotH               = chartW - padL - padR, chartH - padT - padB
	maxXLabels                 = 4
	legendGap, legendCharWidth = 14, 7
)

// SVG draws the chart.
func (c Chart) SVG() template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s">`, chartW, chartH+16, chartW, chartH+16, template.HTMLEscapeString(c.Title))
	fmt.Fprintf(&b, `<text x="%d" y="14" font-size="13" font-weight="bold" fill="#222">%s</text>`, padL, template.HTMLEscapeString(c.Title))
	top := niceCeil(c.top())
	c.axes(&b, top)
	if n := len(c.Times); n > 0 && top > 0 {
		slot := float64(plotW) / float64(n)
		base := make([]float64, n)
		for si, s := range c.Series {
			if c.Bars {
				c.bars(&b, s, c.color(si), top, slot, base)
				continue
			}
			var pts []string
			for i, v := range s.Values {
				x := padL + slot*(float64(i)+0.5)
				y := padT + plotH - v/top*plotH
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
			}
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`, strings.Join(pts, " "), c.color(si))
		}
	}
	// The legend in one row under the plot, each name placed after the previous one.
	x := padL
	for si, s := range c.Series {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/>`, x, chartH+2, c.color(si))
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11" fill="#222">%s</text>`, x+legendGap, chartH+11, template.HTMLEscapeString(s.Name))
		x += legendGap + legendCharWidth*len(s.Name) + legendGap
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // every text is escaped above
}

// top is the largest value drawn: of any series, or of the stacked sums of stacked bars.
func (c Chart) top() float64 {
	top := 0.0
	for _, s := range c.Series {
		for _, v := range s.Values {
			top = math.Max(top, v)
		}
	}
	if c.Bars && len(c.Series) > 1 { // stacked
		top = 0
		for i := range c.Times {
			sum := 0.0
			for _, s := range c.Series {
				sum += s.Values[i]
			}
			top = math.Max(top, sum)
		}
	}
	return top
}

// axes draws the axes, the value axis's top and unit, and the time labels.
func (c Chart) axes(b *strings.Builder, top float64) {
	n := len(c.Times)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`, padL, padT+plotH, padL+plotW, padT+plotH)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`, padL, padT, padL, padT+plotH)
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="11" text-anchor="end" fill="#444">%s</text>`, padL-4, padT+4, short(top))
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="11" text-anchor="end" fill="#444">0</text>`, padL-4, padT+plotH)
	if c.Unit != "" {
		fmt.Fprintf(b, `<text x="%d" y="%d" font-size="10" text-anchor="end" fill="#666">%s</text>`, padL-4, padT+plotH/2, template.HTMLEscapeString(c.Unit))
	}
	for _, i := range xLabelIndexes(n) {
		x := padL + float64(plotW)*(float64(i)+0.5)/float64(max(n, 1))
		fmt.Fprintf(b, `<text x="%.1f" y="%d" font-size="10" text-anchor="middle" fill="#444">%s</text>`, x, padT+plotH+14, c.Times[i].Local().Format("15:04"))
	}
}

// bars draws one series as bars, stacked on base (the heights drawn so far per slot).
func (c Chart) bars(b *strings.Builder, s Series, color string, top, slot float64, base []float64) {
	w := slot * 0.8
	if len(c.Series) > 1 && !c.stacked() {
		w = slot * 0.8 / float64(len(c.Series))
	}
	for i, v := range s.Values {
		if v <= 0 {
			continue
		}
		h := v / top * plotH
		x := padL + slot*float64(i) + slot*0.1
		y := padT + plotH - h - base[i]/top*plotH
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %s</title></rect>`,
			x, y, w, h, color, template.HTMLEscapeString(s.Name), c.Times[i].Local().Format("15:04"), short(v))
		base[i] += v
	}
}

// color is series si's colour: its own, else the palette's.
func (c Chart) color(si int) string {
	if color := c.Series[si].Color; color != "" {
		return color
	}
	return palette[si%len(palette)]
}

func (c Chart) stacked() bool { return c.Bars }

// xLabelIndexes are the points labelled on the time axis: at most maxXLabels, evenly
// spread, so that labels never overlap.
func xLabelIndexes(n int) []int {
	if n == 0 {
		return nil
	}
	if n <= maxXLabels {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	out := make([]int, 0, maxXLabels)
	for k := range maxXLabels {
		out = append(out, k*(n-1)/(maxXLabels-1))
	}
	return slices.Compact(out)
}

// niceCeil rounds up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 0
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// short writes 1234567 as 1.2M.
func short(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.1fG", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

// ChartsPage is the charts page's data (and /api/charts's).
type ChartsPage struct {
	Store  string   `json:"store"`
	Stores []string `json:"stores"`
	Hours  int      `json:"hours"`
	Charts []Chart  `json:"charts"`
}

const (
	chartHours = 6
	chartBin   = 10 * time.Minute
)

func (c *Console) chartsOf(r *http.Request, v *operator.FleetView) (*ChartsPage, error) {
	snap := v.Snapshot()
	cp := &ChartsPage{Store: r.URL.Query().Get("store"), Hours: chartHours}
	for _, st := range snap.Stores {
		cp.Stores = append(cp.Stores, st.Store)
	}
	stores := cp.Stores
	if cp.Store != "" {
		if !slices.Contains(cp.Stores, cp.Store) {
			return nil, notFound("no store %q in this fleet", cp.Store)
		}
		stores = []string{cp.Store}
	}
	now := time.Now()
	from := now.Add(-chartHours * time.Hour).Truncate(chartBin)
	nb := int(now.Sub(from)/chartBin) + 1
	times := make([]time.Time, nb)
	for i := range times {
		times[i] = from.Add(time.Duration(i) * chartBin)
	}
	bin := func(t time.Time) int { return int(t.Sub(from) / chartBin) }
	comp := make([]float64, nb)
	failed := make([]float64, nb)
	before, after := make([]float64, nb), make([]float64, nb)
	billed := map[string]map[string][]float64{} // model → input/cached/output
	if x := v.Events(); x != nil {
		for _, st := range stores {
			for _, m := range x.MinuteCounts(st, from, now) {
				i := bin(m.At)
				if i < 0 || i >= nb {
					continue
				}
				comp[i] += float64(m.Compactions)
				failed[i] += float64(m.Failed)
				before[i] += float64(m.TokensBefore)
				after[i] += float64(m.TokensAfter)
				for model, t := range m.Billed {
					if billed[model] == nil {
						billed[model] = map[string][]float64{"input": make([]float64, nb), "cached": make([]float64, nb), "output": make([]float64, nb)}
					}
					billed[model]["input"][i] += float64(t.Input - t.Cached)
					billed[model]["cached"][i] += float64(t.Cached)
					billed[model]["output"][i] += float64(t.Output)
				}
			}
		}
	}
	cp.Charts = append(cp.Charts,
		Chart{Title: "Compactions and failed jobs per 10 min", Times: times, Bars: true,
			Series: []Series{{Name: "compactions", Values: comp}, {Name: "failed", Values: failed, Color: "#b53f3f"}}},
		Chart{Title: "Context tokens before and after the compactions", Unit: "tokens", Times: times,
			Series: []Series{{Name: "before", Values: before}, {Name: "after", Values: after}}})
	models := make([]string, 0, len(billed))
	for m := range billed {
		models = append(models, m)
	}
	slices.Sort(models)
	for _, m := range models {
		cp.Charts = append(cp.Charts, Chart{Title: "Tokens billed by " + m, Unit: "tokens", Times: times, Bars: true,
			Series: []Series{{Name: "input (not cached)", Values: billed[m]["input"]}, {Name: "cached input", Values: billed[m]["cached"]},
				{Name: "output", Values: billed[m]["output"]}}})
	}
	depth, age := make([]float64, nb), make([]float64, nb)
	for _, st := range stores {
		for _, s := range v.QueueHistory(st) {
			if i := bin(s.At); i >= 0 && i < nb {
				depth[i] = math.Max(depth[i], float64(s.Pending))
				age[i] = math.Max(age[i], s.AgeS)
			}
		}
	}
	cp.Charts = append(cp.Charts,
		Chart{Title: "Queue depth (jobs waiting or running, the most in each 10 min)", Unit: "jobs", Times: times, Series: []Series{{Name: "depth", Values: depth}}},
		Chart{Title: "Age of the oldest queued job (the most in each 10 min)", Unit: "seconds", Times: times, Series: []Series{{Name: "age", Values: age, Color: "#d9822b"}}})
	return cp, nil
}

func (c *Console) chartsData(ctx context.Context, r *http.Request, v *operator.FleetView, who caller) (string, any, error) {
	cp, err := c.chartsOf(r, v)
	if err != nil {
		return "", nil, err
	}
	return "Charts", cp, nil
}

// tokenChart draws a session's context along its path: the tokens of the entries from the
// root to each entry, each compaction marked where it was appended, and its cut (the first
// entry it kept).
func tokenChart(f *SessionFile) template.HTML {
	n := len(f.PathPoints)
	if n == 0 {
		return ""
	}
	top := 0.0
	for _, p := range f.PathPoints {
		top = math.Max(top, float64(p.Cumulative))
	}
	top = niceCeil(top)
	if top == 0 {
		top = 1
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="tokens along the path">`, chartW, chartH+16, chartW, chartH+16)
	fmt.Fprintf(&b, `<text x="%d" y="14" font-size="13" font-weight="bold" fill="#222">Tokens along the current path (%d entries)</text>`, padL, n)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`, padL, padT+plotH, padL+plotW, padT+plotH)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`, padL, padT, padL, padT+plotH)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11" text-anchor="end" fill="#444">%s</text>`, padL-4, padT+4, short(top))
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11" text-anchor="end" fill="#444">0</text>`, padL-4, padT+plotH)
	xOf := func(i int) float64 { return padL + float64(plotW)*(float64(i)+0.5)/float64(n) }
	var pts []string
	for i, p := range f.PathPoints {
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(i), padT+plotH-float64(p.Cumulative)/top*plotH))
	}
	fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#2f6db5" stroke-width="2"/>`, strings.Join(pts, " "))
	for i, p := range f.PathPoints {
		switch {
		case p.Compaction:
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#b53f3f" stroke-width="2"><title>compaction %s</title></line>`, xOf(i), padT, xOf(i), padT+plotH, template.HTMLEscapeString(p.ID))
		case p.Cut:
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#d9822b" stroke-dasharray="4 3"><title>cut: first kept entry %s</title></line>`, xOf(i), padT, xOf(i), padT+plotH, template.HTMLEscapeString(p.ID))
		}
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="#2f6db5"/><text x="%d" y="%d" font-size="11" fill="#222">context tokens</text>`, padL, chartH+2, padL+14, chartH+11)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="#b53f3f"/><text x="%d" y="%d" font-size="11" fill="#222">compaction</text>`, padL+180, chartH+2, padL+194, chartH+11)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="#d9822b"/><text x="%d" y="%d" font-size="11" fill="#222">cut (first kept entry)</text>`, padL+290, chartH+2, padL+304, chartH+11)
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // ids escaped above
}
