package cutpoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"pgregory.net/rapid"

	"github.com/compactor-dev/compactor/pi"
)

// sessionGen writes a random but well-formed Pi v3 session as JSONL bytes: a tree with
// branches, parallel tool calls whose results may be interleaved with user, custom and
// bash messages (or never arrive), errored and aborted assistants, settings changes,
// labels, names, custom entries, branch summaries and repeated compactions whose
// firstKeptEntryId is a valid cut point of the path.
type sessionGen struct {
	t       *rapid.T
	buf     bytes.Buffer
	n       int // entries written
	clock   int // seconds since the start
	leaf    string
	parent  map[string]string
	kind    map[string]string // id -> entry kind ("user", "assistant", "toolResult", "model_change", ...)
	pending []pendingCall     // tool calls without a result yet, on the current branch
	calls   int
}

type pendingCall struct{ id, name string }

func (g *sessionGen) nextID() string {
	g.n++
	return fmt.Sprintf("e%07x", g.n)
}

func (g *sessionGen) ts() string {
	g.clock++
	return fmt.Sprintf("2026-01-01T%02d:%02d:%02d.000Z", (g.clock/3600)%24, (g.clock/60)%60, g.clock%60)
}

func js(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// entry appends one line (fields is the JSON after the base keys, without braces).
func (g *sessionGen) entry(typ, kind, fields string) string {
	id := g.nextID()
	parent := "null"
	if g.leaf != "" {
		parent = js(g.leaf)
	}
	fmt.Fprintf(&g.buf, `{"type":%s,"id":%s,"parentId":%s,"timestamp":%s`, js(typ), js(id), parent, js(g.ts()))
	if fields != "" {
		g.buf.WriteString("," + fields)
	}
	g.buf.WriteString("}\n")
	g.parent[id] = g.leaf
	g.kind[id] = kind
	g.leaf = id
	return id
}

func (g *sessionGen) text(label string) string {
	n := rapid.IntRange(0, 60).Draw(g.t, label)
	if rapid.IntRange(0, 9).Draw(g.t, label+"-big") == 0 {
		n *= 40 // an occasional large message
	}
	s := strings.Repeat("word é ", n)
	if n%7 == 3 {
		s += "😀<&>\u2028"
	}
	return s
}

func (g *sessionGen) message(kind, msg string) string {
	return g.entry("message", kind, `"message":`+msg)
}

func (g *sessionGen) user() {
	g.message("user", fmt.Sprintf(`{"role":"user","content":[{"type":"text","text":%s}],"timestamp":1}`, js(g.text("user"))))
}

var toolNames = []string{"read", "write", "edit", "bash", "grep"}

func (g *sessionGen) assistant() {
	k := rapid.IntRange(0, 3).Draw(g.t, "toolCalls")
	blocks := []string{fmt.Sprintf(`{"type":"text","text":%s}`, js(g.text("assistant")))}
	var calls []pendingCall
	for i := 0; i < k; i++ {
		g.calls++
		c := pendingCall{id: fmt.Sprintf("call_%d", g.calls), name: rapid.SampledFrom(toolNames).Draw(g.t, "tool")}
		if rapid.IntRange(0, 15).Draw(g.t, "reuseId") == 0 && g.calls > 1 {
			c.id = fmt.Sprintf("call_%d", g.calls-1) // providers that reuse ids
		}
		path := fmt.Sprintf("src/f%d.go", rapid.IntRange(0, 8).Draw(g.t, "file"))
		blocks = append(blocks, fmt.Sprintf(`{"type":"toolCall","id":%s,"name":%s,"arguments":{"path":%s}}`, js(c.id), js(c.name), js(path)))
		calls = append(calls, c)
	}
	stop := "stop"
	if k > 0 {
		stop = "toolUse"
	}
	switch rapid.IntRange(0, 12).Draw(g.t, "stopReason") {
	case 0:
		stop = "error"
	case 1:
		stop = "aborted"
	}
	total := rapid.IntRange(0, 50000).Draw(g.t, "usage")
	g.message("assistant", fmt.Sprintf(`{"role":"assistant","content":[%s],"api":"x","provider":"anthropic","model":%s,"usage":{"input":1,"output":2,"cacheRead":3,"cacheWrite":4,"totalTokens":%d},"stopReason":%s,"timestamp":1}`,
		strings.Join(blocks, ","), js(rapid.SampledFrom([]string{"claude-sonnet-4-5", "gpt-4o"}).Draw(g.t, "model")), total, js(stop)))
	g.pending = append(g.pending, calls...)
}

func (g *sessionGen) toolResult() {
	i := rapid.IntRange(0, len(g.pending)-1).Draw(g.t, "result")
	c := g.pending[i]
	g.pending = append(g.pending[:i], g.pending[i+1:]...)
	content := fmt.Sprintf(`{"type":"text","text":%s}`, js(g.text("result")))
	if rapid.IntRange(0, 9).Draw(g.t, "image") == 0 {
		content += `,{"type":"image","data":"aGVsbG8=","mimeType":"image/png"}`
	}
	g.message("toolResult", fmt.Sprintf(`{"role":"toolResult","toolCallId":%s,"toolName":%s,"content":[%s],"isError":false,"timestamp":1}`, js(c.id), js(c.name), content))
}

// pathIDs returns the current path, root first.
func (g *sessionGen) pathIDs() []string {
	var rev []string
	for id := g.leaf; id != ""; id = g.parent[id] {
		rev = append(rev, id)
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}

var validCutKinds = map[string]bool{"user": true, "assistant": true, "bashExecution": true, "custom_message": true, "branch_summary": true}

func (g *sessionGen) compaction() {
	if g.leaf == "" || g.kind[g.leaf] == "compaction" {
		return
	}
	path := g.pathIDs()
	// Candidates: valid cut points after the previous compaction's start.
	lo := 0
	for i := len(path) - 1; i >= 0; i-- {
		if g.kind[path[i]] == "compaction" {
			lo = i + 1
			break
		}
	}
	var cands []string
	for _, id := range path[lo:] {
		if validCutKinds[g.kind[id]] {
			cands = append(cands, id)
		}
	}
	if len(cands) == 0 {
		return
	}
	first := rapid.SampledFrom(cands).Draw(g.t, "firstKept")
	details := `"details":{"readFiles":["src/f1.go","src/zz.go"],"modifiedFiles":["src/f2.go"]},"fromHook":false`
	if rapid.IntRange(0, 4).Draw(g.t, "fromHook") == 0 {
		details = `"details":{"readFiles":["hook.go"]},"fromHook":true`
	}
	g.entry("compaction", "compaction", fmt.Sprintf(`"summary":%s,"firstKeptEntryId":%s,"tokensBefore":%d,%s`,
		js("summary "+g.text("summary")), js(first), rapid.IntRange(0, 90000).Draw(g.t, "tokensBefore"), details))
}

func (g *sessionGen) branch() {
	path := g.pathIDs()
	if len(path) < 2 {
		return
	}
	to := path[rapid.IntRange(0, len(path)-2).Draw(g.t, "branchTo")]
	g.leaf = to
	g.pending = nil // results of the abandoned branch never arrive here
	if rapid.Bool().Draw(g.t, "withSummary") {
		summary := ""
		if rapid.IntRange(0, 4).Draw(g.t, "emptySummary") != 0 {
			summary = "branch " + g.text("branchSummary")
		}
		g.entry("branch_summary", "branch_summary", fmt.Sprintf(`"fromId":%s,"summary":%s,"details":{"readFiles":["src/b.go"],"modifiedFiles":[]},"fromHook":false`, js(to), js(summary)))
	}
}

// system writes a Pi 1.x system message: a full one, or a patch of sections and tools.
func (g *sessionGen) system() {
	if rapid.Bool().Draw(g.t, "fullSystem") {
		g.message("system", fmt.Sprintf(`{"role":"system","content":%s,"sections":{"rules":%s,"env":"cwd=/tmp/p"},"toolsAdded":[{"name":"read","description":"Read a file","parameters":{"type":"object"}},{"name":"bash","description":"Run"}],"timestamp":1}`,
			js("You are an agent. "+g.text("systemPrompt")), js(g.text("rules"))))
		return
	}
	g.message("system", fmt.Sprintf(`{"role":"system","content":"","sections":{"env":null,"mode":%s},"toolsAdded":[{"name":"edit","description":"Edit"}],"toolsRemoved":[{"name":"bash"}],"timestamp":2}`, js(g.text("mode"))))
}

// contextEdit writes a Pi 1.x context edit of an earlier entry of the path that puts a
// message into the context: omitted (null) or replaced.
func (g *sessionGen) contextEdit() {
	var targets []string
	for _, id := range g.pathIDs() {
		switch g.kind[id] {
		case "user", "assistant", "toolResult", "custom_message", "custom":
			targets = append(targets, id)
		}
	}
	if len(targets) == 0 {
		return
	}
	target := rapid.SampledFrom(targets).Draw(g.t, "editTarget")
	replacement := "null"
	if rapid.Bool().Draw(g.t, "replace") {
		replacement = fmt.Sprintf(`{"content":%s}`, js("replaced "+g.text("replacement")))
	}
	g.entry("context_edit", "context_edit", fmt.Sprintf(`"targetId":%s,"replacement":%s`, js(target), replacement))
}

// retainNone writes a Pi 1.x compaction that keeps nothing: its firstKeptEntryId is its own id.
func (g *sessionGen) retainNone() {
	if g.leaf == "" || g.kind[g.leaf] == "compaction" {
		return
	}
	id := fmt.Sprintf("e%07x", g.n+1)
	g.entry("compaction", "compaction", fmt.Sprintf(`"summary":%s,"firstKeptEntryId":%s,"tokensBefore":%d,"details":{"readFiles":[],"modifiedFiles":[]},"fromHook":false`,
		js("all of it "+g.text("summary")), js(id), rapid.IntRange(0, 90000).Draw(g.t, "tokensBefore")))
}

// genSession draws a session file as Pi d could have written it: system messages, usage
// entries and user images only from 0.86 (SystemMessages), context edits and retain-none
// compactions only from 0.87 (ContextEdits): older releases never write them, and compactor
// refuses to append to a file that has them under their rules.
func genSession(t *rapid.T, d pi.Release) []byte {
	g := &sessionGen{t: t, parent: map[string]string{}, kind: map[string]string{}}
	g.buf.WriteString(`{"type":"session","version":3,"id":"019ad9b0-0000-7000-8000-000000000001","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/tmp/p"}` + "\n")
	if rapid.Bool().Draw(t, "startSettings") {
		g.entry("model_change", "model_change", `"provider":"anthropic","modelId":"claude-sonnet-4-5"`)
		g.entry("thinking_level_change", "thinking_level_change", `"thinkingLevel":"medium"`)
	}
	steps := rapid.IntRange(1, 60).Draw(t, "steps")
	for i := 0; i < steps; i++ {
		if len(g.pending) > 0 && rapid.IntRange(0, 2).Draw(t, "resultNow") != 0 {
			g.toolResult()
			continue
		}
		maxOp := 19
		if d.Has(pi.SystemMessages) {
			maxOp = 25
		}
		op := rapid.IntRange(0, maxOp).Draw(t, "op")
		if !d.Has(pi.ContextEdits) && (op == 21 || op == 22 || op == 25) {
			op = 0 // Pi 0.86 writes no context edit and no retain-none compaction
		}
		switch op {
		case 0, 1, 2, 3:
			g.user()
		case 4, 5, 6, 7, 8, 9:
			g.assistant()
		case 10:
			g.message("bashExecution", fmt.Sprintf(`{"role":"bashExecution","command":"ls","output":%s,"exitCode":0,"cancelled":false,"truncated":false,"timestamp":1}`, js(g.text("bash"))))
		case 11:
			g.entry("custom_message", "custom_message", fmt.Sprintf(`"customType":"note","content":%s,"display":true`, js(g.text("custom"))))
		case 12:
			g.entry("custom", "custom", `"customType":"state","data":{"x":1}`)
		case 13:
			g.entry("model_change", "model_change", `"provider":"openai","modelId":"gpt-4o"`)
		case 14:
			g.entry("thinking_level_change", "thinking_level_change", `"thinkingLevel":"high"`)
		case 15:
			if g.leaf != "" {
				g.entry("label", "label", fmt.Sprintf(`"targetId":%s,"label":"mark"`, js(g.leaf)))
			}
		case 16:
			g.entry("session_info", "session_info", `"name":"a session"`)
		case 17:
			g.compaction()
		case 18:
			g.branch()
		case 19:
			g.message("custom", fmt.Sprintf(`{"role":"custom","customType":"hook","content":%s,"display":false,"timestamp":1}`, js(g.text("customRole"))))
		// What Pi 1.x writes (Pi 0.73 reads it as well: unknown types, an unknown role).
		case 20:
			g.system()
		case 21, 22:
			g.contextEdit()
		case 23:
			g.entry("usage", "usage", `"kind":"cache_warm","provider":"anthropic","model":"claude-sonnet-4-5","usage":{"input":10,"output":0,"cacheRead":900,"cacheWrite":0,"totalTokens":910}`)
		case 24:
			g.message("user", fmt.Sprintf(`{"role":"user","content":[{"type":"text","text":%s},{"type":"image","data":"aGVsbG8=","mimeType":"image/png"}],"timestamp":1}`, js(g.text("userImage"))))
		case 25:
			g.retainNone()
		}
	}
	if g.n == 0 {
		g.user()
	}
	return g.buf.Bytes()
}
