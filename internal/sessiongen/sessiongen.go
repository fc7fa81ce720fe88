// Package sessiongen writes synthetic Pi v3 sessions for tests: long agent runs that read and
// edit many files, the shape whose file lists outgrow a small context window
// (docs/quality.md, "No compaction leaves a session over budget").
// The output is deterministic: the same Wide writes the same bytes.
package sessiongen

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/sessionio"
)

// Wide is a session of Turns turns. Each turn is a user request, an assistant message that
// reads Reads files and edits Edits files (cycling over ReadFiles and ModifiedFiles
// distinct paths, disjoint), their results, and a short answer.
type Wide struct {
	Turns, Reads, Edits      int
	ReadFiles, ModifiedFiles int
	// SignatureBytes is the size of each assistant message's thinking signature: bytes on
	// disk that cost no tokens (signatures are opaque to the model).
	SignatureBytes int
}

// ReadPath and ModifiedPath are the i-th read and modified paths.
func ReadPath(i int) string     { return fmt.Sprintf("src/r%03d/handler_%04d.ts", i%97, i) }
func ModifiedPath(i int) string { return fmt.Sprintf("src/w%03d/service_%04d.ts", i%89, i) }

// Write writes the session as JSON lines.
func (g Wide) Write(out io.Writer) error {
	w := bufio.NewWriter(out)
	start := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	n, parent := 0, any(nil)
	var err error
	write := func(v map[string]any) {
		b, e := json.Marshal(v)
		if err == nil {
			err = e
		}
		w.Write(append(b, '\n'))
	}
	entry := func(typ string, fields map[string]any) {
		n++
		id := fmt.Sprintf("%08x", n)
		fields["type"], fields["id"], fields["parentId"] = typ, id, parent
		fields["timestamp"] = start.Add(time.Duration(n) * time.Second).Format("2006-01-02T15:04:05.000Z")
		write(fields)
		parent = id
	}
	msg := func(m map[string]any) {
		m["timestamp"] = start.Add(time.Duration(n) * time.Second).UnixMilli()
		entry("message", map[string]any{"message": m})
	}
	write(map[string]any{"type": "session", "version": 3, "id": "019b8a10-0000-7000-8000-000000000021",
		"timestamp": start.Format("2006-01-02T15:04:05.000Z"), "cwd": "/home/dev/monorepo"})
	entry("model_change", map[string]any{"provider": "anthropic", "modelId": "claude-sonnet-4-5"})
	const unit = "EqSV5OGsmhYmO7cAUWNpY+aiZTacZGZ4I4Yi/321"
	signature := strings.Repeat(unit, max(1, g.SignatureBytes/len(unit)))
	assistant := func(blocks []any, stop string) {
		msg(map[string]any{"role": "assistant", "content": blocks, "api": "anthropic-messages", "provider": "anthropic",
			"model": "claude-sonnet-4-5", "stopReason": stop})
	}
	text := func(s string) []any { return []any{map[string]any{"type": "text", "text": s}} }
	for turn := range g.Turns {
		msg(map[string]any{"role": "user", "content": fmt.Sprintf("Step %d: update the services of batch %d to the new client and keep the tests green.", turn, turn)})
		blocks := []any{map[string]any{"type": "thinking", "thinking": "Read the handlers, then edit the services.", "thinkingSignature": signature}}
		var results []map[string]any
		for j := range g.Reads + g.Edits {
			id := fmt.Sprintf("call_%d_%d", turn, j)
			if j < g.Reads {
				p := ReadPath((turn*g.Reads + j) % g.ReadFiles)
				blocks = append(blocks, map[string]any{"type": "toolCall", "id": id, "name": "read", "arguments": map[string]any{"path": p}})
				results = append(results, map[string]any{"role": "toolResult", "toolCallId": id, "toolName": "read", "isError": false,
					"content": text(fmt.Sprintf("// batch %d\nexport async function handle%d(req: Request) {\n\treturn client.call(\"%s\", req.body);\n}\n", turn, j, p))})
				continue
			}
			p := ModifiedPath((turn*g.Edits + j - g.Reads) % g.ModifiedFiles)
			blocks = append(blocks, map[string]any{"type": "toolCall", "id": id, "name": "edit", "arguments": map[string]any{"path": p, "oldText": "legacyClient.call(", "newText": "client.call("}})
			results = append(results, map[string]any{"role": "toolResult", "toolCallId": id, "toolName": "edit", "isError": false,
				"content": text("Successfully replaced text in " + p + ".")})
		}
		assistant(blocks, "toolUse")
		for _, r := range results {
			msg(r)
		}
		assistant([]any{map[string]any{"type": "thinking", "thinking": "Done with this batch.", "thinkingSignature": signature},
			map[string]any{"type": "text", "text": fmt.Sprintf("Batch %d is on the new client: %d services edited.", turn, g.Edits)}}, "stop")
	}
	if err != nil {
		return fmt.Errorf("sessiongen: %w", err)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("sessiongen: %w", err)
	}
	return nil
}

// WriteFile writes the session to path, with a modification time two hours back (an
// abandoned session, not a live agent's).
func (g Wide) WriteFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("sessiongen: %w", err)
	}
	if err := g.Write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("sessiongen: %w", err)
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		return fmt.Errorf("sessiongen: %w", err)
	}
	return nil
}

// Fataler is the part of testing.TB that Messages needs.
type Fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Messages decodes message JSON lines as Pi stores them (a span written by hand in a
// test), failing the test on a line that does not decode.
func Messages(t Fataler, lines ...string) []*sessionio.Message {
	t.Helper()
	out := make([]*sessionio.Message, 0, len(lines))
	for i, l := range lines {
		m, err := sessionio.DecodeMessage([]byte(l))
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		out = append(out, m)
	}
	return out
}
