package experiment

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The scatter's labels overlap neither each other nor any point, and stay inside the
// chart, however crowded the points: the report's own case (two points almost on top of
// each other), and clusters of 6 to 24 points with long labels (two summarizers).
func TestScatterLabelsDoNotOverlap(t *testing.T) {
	t.Parallel()
	policies := []string{"pi", "turn", "nearest"}
	type shape struct {
		name   string
		points func() []point
	}
	pt := func(policy string, keep, x, y int, sum string) point {
		return point{x: mark{kind: "replayTotal", policy: policy, keep: keep, metric: "summarizerTokens", value: x},
			y: mark{kind: "replayTotal", policy: policy, keep: keep, metric: "meanKeptTokens", value: y}, sum: sum}
	}
	shapes := []shape{
		{"report", func() []point { // docs/experiment-report.html's values
			return []point{pt("pi", 5000, 1048633, 4903, ""), pt("turn", 5000, 1038633, 13843, ""), pt("nearest", 5000, 1048700, 4412, ""),
				pt("pi", 20000, 1050743, 19353, ""), pt("turn", 20000, 1048700, 24193, ""), pt("nearest", 20000, 1057829, 21072, "")}
		}},
		{"one spot", func() []point {
			var out []point
			for _, p := range policies {
				for _, k := range []int{5000, 20000} {
					out = append(out, pt(p, k, 1_000_000, 10_000, ""))
				}
			}
			return out
		}},
		{"cluster of 24, long labels", func() []point {
			var out []point
			i := 0
			for _, s := range []string{"extractive", "openai:some-long-model-name"} {
				for _, p := range policies {
					for _, k := range []int{2000, 5000, 20000, 40000} {
						out = append(out, pt(p, k, 1_000_000+i*700, 10_000+(i%5)*90, s))
						i++
					}
				}
			}
			return out
		}},
		{"corner", func() []point { // at the plot's right and top edge
			var out []point
			for i, p := range policies {
				out = append(out, pt(p, 5000, 4_000_000, 40_000-i*10, "a-summarizer"))
			}
			return out
		}},
	}
	circleRe := regexp.MustCompile(`<circle class="point" cx="([0-9.]+)" cy="([0-9.]+)" r="([0-9.]+)"`)
	labelRe := regexp.MustCompile(`<text class="label" x="([0-9.-]+)" y="([0-9.-]+)"(?: text-anchor="(start|end)")?[^>]*>([^<]*)</text>`)
	sizeRe := regexp.MustCompile(`<svg [^>]*width="([0-9.]+)" height="([0-9.]+)"`)
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			var b strings.Builder
			pts := sh.points()
			scatter(&b, "s", "x", "y", pts, policies)
			svg := b.String()
			size := sizeRe.FindStringSubmatch(svg)
			w, h := atof(size[1]), atof(size[2])
			var circles [][3]float64
			for _, m := range circleRe.FindAllStringSubmatch(svg, -1) {
				circles = append(circles, [3]float64{atof(m[1]), atof(m[2]), atof(m[3])})
			}
			type box struct {
				text           string
				x0, y0, x1, y1 float64
			}
			var boxes []box
			for _, m := range labelRe.FindAllStringSubmatch(svg, -1) {
				x, y := atof(m[1]), atof(m[2])
				text := strings.ReplaceAll(m[4], "&#39;", "'")
				wd := float64(len([]rune(text))) * 6.5 // 11 px system-ui: at most about 6.5 px a character
				bx := box{text: text, x0: x, x1: x + wd, y0: y - 10, y1: y + 2}
				if m[3] == "end" {
					bx.x0, bx.x1 = x-wd, x
				}
				boxes = append(boxes, bx)
			}
			if len(boxes) != len(pts) || len(circles) != len(pts) {
				t.Fatalf("%d labels, %d points drawn for %d points", len(boxes), len(circles), len(pts))
			}
			for i, a := range boxes {
				if a.x0 < 0 || a.x1 > w || a.y0 < 0 || a.y1 > h {
					t.Errorf("label %q (%.0f,%.0f)-(%.0f,%.0f) leaves the %.0f×%.0f chart", a.text, a.x0, a.y0, a.x1, a.y1, w, h)
				}
				for _, c := range boxes[i+1:] {
					if a.x0 < c.x1 && c.x0 < a.x1 && a.y0 < c.y1 && c.y0 < a.y1 {
						t.Errorf("labels %q and %q overlap", a.text, c.text)
					}
				}
				for _, c := range circles {
					dx := math.Max(0, math.Max(a.x0-c[0], c[0]-a.x1))
					dy := math.Max(0, math.Max(a.y0-c[1], c[1]-a.y1))
					if dx*dx+dy*dy < c[2]*c[2] {
						t.Errorf("label %q covers the point at (%.0f,%.0f)", a.text, c[0], c[1])
					}
				}
			}
		})
	}
}

func atof(s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		panic(fmt.Sprint(s, err))
	}
	return v
}
