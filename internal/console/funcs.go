package console

import (
	"fmt"
	"html/template"
	"net/url"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/operator"
)

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"ago":     ago,
	"age":     age,
	"clock":   func(t time.Time) string { return t.Local().Format("2006-01-02 15:04:05") },
	"ms":      func(ms int64) string { return fmt.Sprintf("%.1f s", float64(ms)/1000) },
	"msf":     func(ms float64) string { return fmt.Sprintf("%.0f ms", ms) },
	"num":     func(n any) string { return fmt.Sprint(n) },
	"query":   url.QueryEscape,
	"path":    url.PathEscape,
	"short":   func(n int) string { return short(float64(n)) },
	"svg":     func(c Chart) template.HTML { return c.SVG() },
	"kinds":   kinds,
	"trunc":   trunc,
	"inputs":  func(w *operator.WindowCounts) int { return w.InputTokens() },
	"elapsed": func(t time.Time) string { return time.Since(t).Round(time.Second).String() },
	"first": func(n int, list []operator.DeadLetterRecord) []operator.DeadLetterRecord {
		return list[:min(n, len(list))]
	},
	"mean": func(total float64, n int) string {
		if n == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f ms", total/float64(n))
	},
	"dur": func(d fleetops.Duration) string { return time.Duration(d).String() },
	"add": func(a, b int) int { return a + b },
	"sub": func(a, b int) int { return a - b },
}

// ago is how long ago t was, in whole seconds ("3s", "2m5s").
func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return time.Since(t).Round(time.Second).String() + " ago"
}

// age is how old t is in whole seconds ("" for zero: nothing).
func age(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return time.Since(t).Round(time.Second).String()
}

// kinds writes a queue's kinds as "compact 3 (oldest 12s)".
func kinds(q operator.StoreQueue) string {
	if len(q.Kinds) == 0 {
		return "-"
	}
	s := ""
	for i, k := range q.Kinds {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %d (oldest %s)", k.Kind, k.Jobs, age(k.Oldest))
	}
	return s
}

func trunc(n int, s string) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
