package experiment

// SVG drawing of the HTML report: axes rounded to numbers that split into four ticks, bars
// to a shared scale, a scatter label moved up or down off the labels already placed.

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

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
	// Every point first, then the labels: a label must keep clear of every point and of the
	// labels placed before it.
	var circles [][2]float64
	for _, p := range pts {
		cx, cy := px(p.x.value), py(p.y.value)
		circles = append(circles, [2]float64{cx, cy})
		fmt.Fprintf(b, `<circle class="point" cx="%s" cy="%s" r="%s" fill="%s"%s data-metric2="%s" data-value2="%d"><title>%s · keep %d: %s %s, %s %s</title></circle>`+"\n",
			f2(cx), f2(cy), f2(pointRadius), policyColor(policies, p.x.policy), p.x.attrs(), esc(p.y.metric), p.y.value,
			esc(p.x.policy), p.x.keep, esc(p.x.metric), num(p.x.value), esc(p.y.metric), num(p.y.value))
	}
	var placed []labelBox
	for i, p := range pts {
		sum := ""
		if p.sum != "" {
			sum = " · " + p.sum
		}
		text := fmt.Sprintf("%s · %d%s", p.x.policy, p.x.keep, sum)
		box := placeLabel(circles[i], labelWidth(text), circles, placed, width, height)
		placed = append(placed, box)
		anchor, tx := "start", box.x0
		if box.left {
			anchor, tx = "end", box.x1
		}
		// A label moved off its point's row is tied to it by a thin line.
		if math.Abs(box.mid()-circles[i][1]) > labelHeight/2 {
			lx := box.x0 - 2
			if box.left {
				lx = box.x1 + 2
			}
			fmt.Fprintf(b, `<line class="leader" x1="%s" y1="%s" x2="%s" y2="%s" stroke="#999" stroke-width="0.75"/>`,
				f2(circles[i][0]), f2(circles[i][1]), f2(lx), f2(box.mid()))
		}
		fmt.Fprintf(b, `<text class="label" x="%s" y="%s" text-anchor="%s" data-kind="setting" data-policy="%s" data-keep="%d" data-box="%s %s %s %s">%s</text>`+"\n",
			f2(tx), f2(box.y1-3), anchor, esc(p.x.policy), p.x.keep, f2(box.x0), f2(box.y0), f2(box.x1), f2(box.y1), esc(text))
	}
	b.WriteString("</svg>\n")
}

// The scatter's label geometry: 11 px text (the report's style), whose width is
// estimated generously per character; a point's radius.
const (
	pointRadius    = 6.0
	labelHeight    = 13.0
	labelCharWidth = 6.8
	labelGap       = 9.0
)

// labelWidth is the width a label's text takes at most.
func labelWidth(text string) float64 { return float64(len([]rune(text))) * labelCharWidth }

// labelBox is where a label is drawn: its box, and whether it is left of its point.
type labelBox struct {
	x0, y0, x1, y1 float64
	left           bool
}

func (l labelBox) mid() float64 { return (l.y0 + l.y1) / 2 }

func (l labelBox) overlaps(o labelBox) bool {
	return l.x0 < o.x1 && o.x0 < l.x1 && l.y0 < o.y1 && o.y0 < l.y1
}

// touchesPoint reports whether the box comes within a point's radius of c.
func (l labelBox) touchesPoint(c [2]float64) bool {
	dx := math.Max(0, math.Max(l.x0-c[0], c[0]-l.x1))
	dy := math.Max(0, math.Max(l.y0-c[1], c[1]-l.y1))
	return dx*dx+dy*dy < (pointRadius+1)*(pointRadius+1)
}

// placeLabel puts a label of width w next to its point at c: on the point's row to its
// right if that is free, else the nearest free row above or below, right or left of the
// point, inside the chart (width × height); free means clear of every point and every
// label already placed.
func placeLabel(c [2]float64, w float64, points [][2]float64, placed []labelBox, width, height float64) labelBox {
	at := func(row int, left bool) labelBox {
		mid := c[1] + float64(row)*labelHeight
		b := labelBox{x0: c[0] + labelGap, x1: c[0] + labelGap + w, y0: mid - labelHeight/2, y1: mid + labelHeight/2, left: left}
		if left {
			b.x0, b.x1 = c[0]-labelGap-w, c[0]-labelGap
		}
		return b
	}
	free := func(b labelBox) bool {
		if b.x0 < 0 || b.x1 > width || b.y0 < 0 || b.y1 > height {
			return false
		}
		for _, q := range placed {
			if b.overlaps(q) {
				return false
			}
		}
		for _, p := range points {
			if b.touchesPoint(p) {
				return false
			}
		}
		return true
	}
	maxRows := int(height/labelHeight) + 1
	for d := 0; d <= maxRows; d++ {
		for _, row := range []int{d, -d} {
			for _, left := range []bool{false, true} {
				if b := at(row, left); free(b) {
					return b
				}
			}
			if d == 0 {
				break
			}
		}
	}
	return at(0, false) // nowhere free: a chart this crowded overlaps
}
