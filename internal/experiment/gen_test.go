package experiment

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// genSession writes a random, well-formed Pi v3 session as JSONL: user prompts, agent runs
// with parallel tool calls whose results may be interleaved with user, custom and bash
// messages (or never come), errored and aborted assistants with usage, model and thinking
// changes, labels, custom entries, custom messages, branch summaries, branches (the leaf
// jumps back to an earlier entry) and compactions whose firstKeptEntryId is a valid cut
// point on the current path. Sizes vary from a few characters to tens of thousands.
type genSession struct {
	r      *rand.Rand
	buf    bytes.Buffer
	n      int
	clock  int
	leaf   string
	parent map[string]string
	kind   map[string]string // id -> "user", "assistant", "toolResult", "custom_message", ...
	ids    []string
	calls  int
}

func genJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func (g *genSession) ts() (string, int64) {
	g.clock += 1 + g.r.IntN(30)
	ms := int64(1764583200000) + int64(g.clock)*1000
	return fmt.Sprintf("2025-12-01T%02d:%02d:%02d.000Z", 10+(g.clock/3600)%10, (g.clock/60)%60, g.clock%60), ms
}

// add appends an entry; fields are the members after the base ones.
func (g *genSession) add(typ, kind string, fields map[string]any) string {
	g.n++
	id := fmt.Sprintf("%08x", g.n*2654435761%0xffffffff)
	ts, _ := g.ts()
	var parent any
	if g.leaf != "" {
		parent = g.leaf
	}
	fmt.Fprintf(&g.buf, `{"type":%s,"id":%s,"parentId":%s,"timestamp":%s`, genJSON(typ), genJSON(id), genJSON(parent), genJSON(ts))
	for _, k := range sortedKeys(fields) {
		fmt.Fprintf(&g.buf, `,%s:%s`, genJSON(k), genJSON(fields[k]))
	}
	g.buf.WriteString("}\n")
	g.parent[id] = g.leaf
	g.kind[id] = kind
	g.ids = append(g.ids, id)
	g.leaf = id
	return id
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

func (g *genSession) text() string {
	n := g.r.IntN(200)
	if g.r.IntN(15) == 0 {
		n = 1000 + g.r.IntN(6000)
	}
	words := []string{"refactor", "the", "handler", "queue", "test", "fails", "because", "index", "é", "😀", "config", "must", "never", "error"}
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(words[g.r.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.String()
}

func (g *genSession) msg(kind string, m map[string]any) string {
	_, ms := g.ts()
	m["timestamp"] = ms
	return g.add("message", kind, map[string]any{"message": m})
}

func (g *genSession) user() {
	g.msg("user", map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": g.text()}}})
}

func (g *genSession) assistant(blocks []any, stop string) {
	usage := map[string]any{"input": g.r.IntN(50000), "output": g.r.IntN(2000), "cacheRead": 0, "cacheWrite": 0}
	usage["totalTokens"] = usage["input"].(int) + usage["output"].(int)
	g.msg("assistant", map[string]any{"role": "assistant", "content": blocks, "api": "anthropic-messages",
		"provider": "anthropic", "model": "claude-sonnet-4-5", "usage": usage, "stopReason": stop})
}

// run is one agent run: assistant turns with tool calls, then a final answer.
func (g *genSession) run() {
	for turn := g.r.IntN(4); turn >= 0; turn-- {
		var pending []string
		blocks := []any{}
		if g.r.IntN(2) == 0 {
			blocks = append(blocks, map[string]any{"type": "thinking", "thinking": g.text()})
		}
		for k := g.r.IntN(4); k > 0 && turn > 0; k-- {
			g.calls++
			id := fmt.Sprintf("call_%d", g.calls)
			if g.r.IntN(20) == 0 && g.calls > 1 {
				id = fmt.Sprintf("call_%d", g.calls-1) // a reused id
			}
			name := []string{"read", "bash", "edit", "write"}[g.r.IntN(4)]
			blocks = append(blocks, map[string]any{"type": "toolCall", "id": id, "name": name,
				"arguments": map[string]any{"path": fmt.Sprintf("src/f%d.go", g.r.IntN(9)), "command": "go test"}})
			pending = append(pending, id)
		}
		if len(pending) == 0 {
			blocks = append(blocks, map[string]any{"type": "text", "text": g.text()})
			stop := "stop"
			switch g.r.IntN(15) {
			case 0:
				stop = "error"
			case 1:
				stop = "aborted"
			}
			g.assistant(blocks, stop)
			return
		}
		g.assistant(blocks, "toolUse")
		for _, id := range pending {
			switch g.r.IntN(14) {
			case 0:
				g.user() // a steering message between a call and its result
			case 1:
				g.add("custom_message", "custom_message", map[string]any{"customType": "ext", "content": g.text(), "display": true})
			case 2:
				_, ms := g.ts()
				g.msg("bashExecution", map[string]any{"role": "bashExecution", "command": "ls", "output": g.text(), "exitCode": 0,
					"cancelled": false, "truncated": false, "timestamp": ms})
			case 3:
				continue // the result never comes
			}
			g.msg("toolResult", map[string]any{"role": "toolResult", "toolCallId": id, "toolName": "read",
				"content": []any{map[string]any{"type": "text", "text": g.text()}}, "isError": g.r.IntN(8) == 0})
		}
	}
}

// currentPath returns the ids from the root to the leaf.
func (g *genSession) currentPath() []string {
	var p []string
	for id := g.leaf; id != ""; id = g.parent[id] {
		p = append(p, id)
	}
	for i, j := 0, len(p)-1; i < j; i, j = i+1, j-1 {
		p[i], p[j] = p[j], p[i]
	}
	return p
}

func (g *genSession) compaction() {
	path := g.currentPath()
	start := 0
	for i := len(path) - 1; i >= 0; i-- {
		if g.kind[path[i]] == "compaction" {
			start = i + 1
			break
		}
	}
	var cands []string
	for _, id := range path[start:] {
		switch g.kind[id] {
		case "user", "assistant", "custom_message", "bashExecution":
			cands = append(cands, id)
		}
	}
	if len(cands) == 0 {
		return
	}
	g.add("compaction", "compaction", map[string]any{"summary": "Earlier: " + g.text(),
		"firstKeptEntryId": cands[g.r.IntN(len(cands))], "tokensBefore": 50000, "fromHook": g.r.IntN(6) == 0})
}

// generateSession returns one random session.
func generateSession(seed uint64) []byte {
	g := &genSession{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), parent: map[string]string{}, kind: map[string]string{}}
	fmt.Fprintf(&g.buf, `{"type":"session","version":3,"id":"gen-%d","timestamp":"2025-12-01T10:00:00.000Z","cwd":"/work"}`+"\n", seed)
	if g.r.IntN(3) == 0 {
		g.add("model_change", "model_change", map[string]any{"provider": "anthropic", "modelId": "claude-sonnet-4-5"})
	}
	for steps := 3 + g.r.IntN(25); steps > 0; steps-- {
		switch g.r.IntN(20) {
		case 0:
			g.add("thinking_level_change", "thinking_level_change", map[string]any{"thinkingLevel": "high"})
		case 1:
			if len(g.ids) > 0 {
				g.add("label", "label", map[string]any{"targetId": g.ids[g.r.IntN(len(g.ids))], "label": "mark"})
			}
		case 2:
			g.add("custom", "custom", map[string]any{"customType": "state", "data": map[string]any{"k": 1}})
		case 3:
			g.compaction()
		case 4:
			// branch: continue from an earlier user message, sometimes with a summary
			var users []string
			for _, id := range g.ids {
				if g.kind[id] == "user" {
					users = append(users, id)
				}
			}
			if len(users) > 0 {
				from := g.leaf
				g.leaf = g.parent[users[g.r.IntN(len(users))]]
				if g.r.IntN(2) == 0 {
					summary := ""
					if g.r.IntN(4) > 0 {
						summary = "Abandoned branch: " + g.text()
					}
					g.add("branch_summary", "branch_summary", map[string]any{"fromId": from, "summary": summary})
				}
			}
		case 5:
			g.add("custom_message", "custom_message", map[string]any{"customType": "note", "content": g.text(), "display": false})
		}
		g.user()
		g.run()
	}
	return g.buf.Bytes()
}
