package picontext_test

import (
	"fmt"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/picontext"
)

// A session is read, its current path (root to leaf) found, and the context Pi would send
// to the model built from it. The second user message hangs off the first, so the first
// assistant reply is on a side branch and not in the context.
func ExampleBuild() {
	file := `{"type":"session","version":3,"id":"s1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/p"}
{"type":"message","id":"a1","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}
{"type":"message","id":"a2","parentId":"a1","timestamp":"2026-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"hello"}],"provider":"p","model":"m","stopReason":"stop","timestamp":2}}
{"type":"message","id":"a3","parentId":"a1","timestamp":"2026-01-01T00:00:03.000Z","message":{"role":"user","content":"other branch","timestamp":3}}
`
	s, err := sessionio.Parse([]byte(file), "example.jsonl")
	if err != nil {
		fmt.Println(err)
		return
	}
	path, _ := s.Path("") // "" = the leaf: the last entry line
	ctx := picontext.Build(path, pi.MustParseRelease("0.73.1"))
	fmt.Println("leaf:", s.LeafID(), "path:", len(path), "entries")
	for i, m := range ctx.Messages {
		fmt.Println(ctx.EntryIDs[i], m.Role, m.Content.Text)
	}
	// Output:
	// leaf: a3 path: 2 entries
	// a1 user hi
	// a3 user other branch
}
