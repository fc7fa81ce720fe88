// Package consoletest holds checks of the web console's answers for tests that hold
// records a store's key wrote (the console's own tests, the red-team suite): whether a
// page could run or load anything such a record put in it, and whether an answer carries
// the headers that keep a browser from taking it for something else.
package consoletest

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/compactor-dev/compactor/internal/visible"
)

// ScriptSrc is the console's one script: the only <script> a page may hold.
const ScriptSrc = "/static/console.js"

// Tag is a start tag of a document: its name and attributes.
type Tag struct {
	Name  string
	Attrs map[string]string
}

var (
	tagRe  = regexp.MustCompile(`<([a-zA-Z][a-zA-Z0-9-]*)((?:\s+[^\s"'>/=]+(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'=<>` + "`" + `]+))?)*)\s*/?>`)
	attrRe = regexp.MustCompile(`([^\s"'>/=]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>` + "`" + `]+)))?`)
)

// Tags are the start tags of a document rendered by html/template (no comment, no raw
// text but the console's own).
func Tags(doc string) []Tag {
	var out []Tag
	for _, m := range tagRe.FindAllStringSubmatch(doc, -1) {
		t := Tag{Name: strings.ToLower(m[1]), Attrs: map[string]string{}}
		for _, a := range attrRe.FindAllStringSubmatch(m[2], -1) {
			t.Attrs[strings.ToLower(a[1])] = a[2] + a[3] + a[4]
		}
		out = append(out, t)
	}
	return out
}

// Inert says what in a page could run or load something a record put there: an element
// of a kind the console never writes (img, iframe, object, embed, base, style), a script
// that is not the console's own, an event handler attribute, a javascript: (or any other
// origin's) URL, an SVG that is not a chart; and a raw control or formatting character.
// Nothing said: the page is inert.
func Inert(doc string) []string {
	var bad []string
	for _, t := range Tags(doc) {
		switch t.Name {
		case "img", "iframe", "object", "embed", "base", "style", "frame", "math", "link", "meta":
			if t.Name == "link" && (t.Attrs["rel"] == "stylesheet" && t.Attrs["href"] == "/static/console.css" || t.Attrs["rel"] == "icon" && t.Attrs["href"] == "data:,") ||
				t.Name == "meta" && (len(t.Attrs) == 1 && t.Attrs["charset"] == "utf-8" || len(t.Attrs) == 2 && t.Attrs["name"] == "viewport") {
				break // the console's own
			}
			bad = append(bad, "a <"+t.Name+"> element")
		case "script":
			if t.Attrs["src"] != ScriptSrc {
				bad = append(bad, fmt.Sprintf("a script %v", t.Attrs))
			}
		case "svg":
			if t.Attrs["class"] != "chart" {
				bad = append(bad, fmt.Sprintf("an svg %v", t.Attrs))
			}
		}
		for k, v := range t.Attrs {
			if strings.HasPrefix(k, "on") || k == "srcdoc" || k == "formaction" {
				bad = append(bad, fmt.Sprintf("<%s %s=%q>", t.Name, k, v))
			}
			if u := strings.ToLower(strings.TrimSpace(v)); (k == "href" || k == "src" || k == "action" || k == "xlink:href") &&
				(!strings.HasPrefix(u, "/") || strings.HasPrefix(u, "//") || strings.HasPrefix(u, `/\`)) && !strings.HasPrefix(u, "?") && u != "data:," {
				bad = append(bad, fmt.Sprintf("<%s %s=%q>: a URL of another kind than this origin's", t.Name, k, v))
			}
		}
	}
	if strings.Count(doc, "<script") != strings.Count(doc, `<script src="`+ScriptSrc+`" defer></script>`) {
		bad = append(bad, "an inline script")
	}
	for i, line := range strings.Split(doc, "\n") {
		if !visible.Clean(strings.NewReplacer("\t", "", "\r", "").Replace(line)) {
			bad = append(bad, fmt.Sprintf("line %d: a raw control or formatting character: %q", i+1, line))
		}
	}
	return bad
}

// Headers says what an answer of the console lacks of the headers that keep a browser
// from running or framing it as something else: the Content-Security-Policy (this origin
// only, Trusted Types), nosniff and, for /api/..., the JSON content type. Nothing said:
// all are there.
func Headers(path string, h http.Header) []string {
	var bad []string
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self';") ||
		!strings.Contains(csp, "require-trusted-types-for 'script'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		bad = append(bad, fmt.Sprintf("%s: Content-Security-Policy %q", path, csp))
	}
	if h.Get("X-Content-Type-Options") != "nosniff" {
		bad = append(bad, fmt.Sprintf("%s: X-Content-Type-Options %q", path, h.Get("X-Content-Type-Options")))
	}
	want := "text/html; charset=utf-8"
	if strings.HasPrefix(path, "/api/") {
		want = "application/json"
	}
	if ct := h.Get("Content-Type"); ct != want {
		bad = append(bad, fmt.Sprintf("%s: Content-Type %q, want %q", path, ct, want))
	}
	return bad
}
