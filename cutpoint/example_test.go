package cutpoint_test

import (
	"fmt"
	"strings"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/tokenize"
)

// Three turns: a 250-token user message (1,000 characters, Pi's estimate) and a 1-token
// reply each, with keepRecentTokens 300. pi walks back until it has at least 300 tokens
// (502, the last two turns) and cuts at the turn start; turn does the same. nearest takes
// the safe cut whose kept size is closest to 300 in either direction: from e4 (252 tokens),
// which splits the middle turn, so its user message is summarized as the turn prefix.
func ExamplePolicy() {
	lines := []string{`{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}`}
	parent := "null"
	for i := 1; i <= 6; i++ {
		id := fmt.Sprintf("e%d", i)
		msg := `{"role":"user","content":"` + strings.Repeat("x", 1000) + `","timestamp":1}`
		if i%2 == 0 {
			msg = `{"role":"assistant","content":[{"type":"text","text":"ok"}],"provider":"p","model":"m","stopReason":"stop","timestamp":2}`
		}
		lines = append(lines, `{"type":"message","id":"`+id+`","parentId":`+parent+`,"timestamp":"2026-01-01T00:00:01.000Z","message":`+msg+`}`)
		parent = `"` + id + `"`
	}
	s, _ := sessionio.Parse([]byte(strings.Join(lines, "\n")), "example.jsonl")
	path, _ := s.Path("")
	for _, name := range cutpoint.Names() {
		pol, _ := cutpoint.ByName(name)
		p, _ := pol.Plan(path, cutpoint.Settings{KeepRecentTokens: 300}, tokenize.Estimate())
		fmt.Printf("%-7s first kept %s, summarize %v, split turn %v\n", name, p.FirstKeptEntryID, p.MessagesToSummarize, p.IsSplitTurn)
	}
	// Output:
	// pi      first kept e3, summarize [e1 e2], split turn false
	// turn    first kept e3, summarize [e1 e2], split turn false
	// nearest first kept e4, summarize [e1 e2], split turn true
}
