package sessionio_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/picontext"
)

// A tail read reads a session file from its end and stops as soon as what the Need asks
// for is settled: here the context's messages and the model. The latest compaction keeps
// the entries from a3 on, and a4 (an assistant answer) settles the model, so the lines before
// a3 are not read. Extend reads on to the root when the whole path is wanted after all.
func ExampleReadTail() {
	file := `{"type":"session","version":3,"id":"s1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/p"}
{"type":"message","id":"a1","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}
{"type":"message","id":"a2","parentId":"a1","timestamp":"2026-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"hello"}],"provider":"p","model":"m1","stopReason":"stop","timestamp":2}}
{"type":"message","id":"a3","parentId":"a2","timestamp":"2026-01-01T00:00:03.000Z","message":{"role":"user","content":"refactor the parser","timestamp":3}}
{"type":"message","id":"a4","parentId":"a3","timestamp":"2026-01-01T00:00:04.000Z","message":{"role":"assistant","content":[{"type":"text","text":"done"}],"provider":"p","model":"m2","stopReason":"stop","timestamp":4}}
{"type":"compaction","id":"c1","parentId":"a4","timestamp":"2026-01-01T00:00:05.000Z","summary":"A refactor, done.","firstKeptEntryId":"a3","tokensBefore":1200}
{"type":"message","id":"a5","parentId":"c1","timestamp":"2026-01-01T00:00:06.000Z","message":{"role":"user","content":"and the tests?","timestamp":6}}
`
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "session.jsonl")
	if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
		fmt.Println(err)
		return
	}

	t, err := sessionio.ReadTail(path, sessionio.NeedMessages|sessionio.NeedModel)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := picontext.Build(t.Path, pi.MustParseRelease("0.73.1"))
	fmt.Println("path:", len(t.Path), "entries, complete:", t.Complete)
	fmt.Printf("read the last %d of %d bytes, from %.27s...\n", t.Size-t.ReadFrom, t.Size, file[t.ReadFrom:])
	for i, m := range ctx.Messages {
		fmt.Println(ctx.EntryIDs[i], m.Role)
	}
	fmt.Println("model:", ctx.Model.ModelID)

	if err := t.Extend(sessionio.NeedRoot); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("after Extend: path:", len(t.Path), "entries, complete:", t.Complete)
	// Output:
	// path: 4 entries, complete: false
	// read the last 687 of 1137 bytes, from {"type":"message","id":"a3"...
	// c1 compactionSummary
	// a3 user
	// a4 assistant
	// a5 user
	// model: m2
	// after Extend: path: 6 entries, complete: true
}
