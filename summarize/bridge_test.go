package summarize

import (
	"context"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/internal/sessiongen"
	"github.com/compactor-dev/compactor/sessionio"
)

// msgs decodes a hand-written span (the JSON helpers of extractive_test.go).
func msgs(t *testing.T, lines ...string) []*sessionio.Message {
	return sessiongen.Messages(t, lines...)
}

const modelNotes = `## Goal
Make the parser accept BOMs.

## Constraints & Preferences
- (none)

## Progress
### Done
- [x] Read sessionio/read.go.

### In Progress
- [ ] Write the fix.

### Blocked
- (none)

## Key Decisions
- **Strip the BOM in the scanner**: one place.

## Next Steps
1. Write the fix.
2. Run the tests.

## Critical Context
- The corpus file 07 starts with a BOM.`

func TestBridgeMergesIntoTheSections(t *testing.T) {
	gap := []*sessionio.Message{
		userMsg("Now run the race tests. Never use -count=0."),
	}
	gap = append(gap, msgs(t,
		bashCall("c1", "go test -race ./sessionio/"),
		bashResult("c1", "ok  \tsessionio\t3.1s", false),
		bashCall("c2", "go vet ./..."),
		bashResult("c2", "vet: sessionio/read.go:12: unreachable code", true))...)
	out, err := Bridge(context.Background(), modelNotes, gap, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Every line of the model's notes is kept, in order, but the placeholders the gap fills.
	rest := out.Text
	for _, line := range strings.Split(modelNotes, "\n") {
		if line == "- (none)" {
			continue
		}
		i := strings.Index(rest, line)
		if i < 0 {
			t.Fatalf("line %q of the base is missing or out of order in:\n%s", line, out.Text)
		}
		rest = rest[i+len(line):]
	}
	section := func(h string) string {
		i := strings.Index(out.Text, h+"\n")
		if i < 0 {
			t.Fatalf("no %s in:\n%s", h, out.Text)
		}
		body := out.Text[i+len(h)+1:]
		if j := strings.Index(body, "\n#"); j >= 0 {
			body = body[:j]
		}
		return body
	}
	for _, c := range []struct{ heading, want string }{
		{"## Constraints & Preferences", "Never use -count=0."},
		{"### Done", "go test -race ./sessionio/"},
		{"### Blocked", "go vet ./..."},
		{"### Blocked", "unreachable code"},
		{"## Next Steps", "3. "},
	} {
		if !strings.Contains(section(c.heading), c.want) {
			t.Errorf("%s does not hold %q:\n%s", c.heading, c.want, section(c.heading))
		}
	}
	if strings.Contains(section("## Constraints & Preferences"), "(none)") || strings.Contains(section("### Blocked"), "(none)") {
		t.Errorf("a (none) placeholder stayed next to new items:\n%s", out.Text)
	}
	if strings.Count(out.Text, "## Goal") != 1 || strings.Count(out.Text, "### Done") != 1 {
		t.Errorf("a section was duplicated instead of merged:\n%s", out.Text)
	}
	if out.Added == 0 || out.Sections == 0 {
		t.Errorf("added %d items in %d sections", out.Added, out.Sections)
	}
}

func TestBridgeBounds(t *testing.T) {
	// No gap: the base as it is.
	if out, err := Bridge(context.Background(), modelNotes, nil, 0); err != nil || out.Text != modelNotes {
		t.Fatalf("empty gap changed the base (%v)", err)
	}
	// A long gap adds at most about maxTokens of text.
	var gap []*sessionio.Message
	for i := range 200 {
		id := "c" + strings.Repeat("x", i%7) + string(rune('a'+i%26))
		gap = append(gap, userMsg(strings.Repeat("please look at module number "+id+" again. ", 3)))
		gap = append(gap, msgs(t, bashCall(id, "cat "+id+".go"), bashResult(id, "package x", false))...)
	}
	out, err := Bridge(context.Background(), modelNotes, gap, 200)
	if err != nil {
		t.Fatal(err)
	}
	if added := len(out.Text) - len(modelNotes); added > 200*4+200 {
		t.Fatalf("the bridge added %d characters for a 200-token budget", added)
	}
	// Notes without the usual headings get the extract's sections appended.
	plain := "The user wants the parser fixed; nothing else is known."
	out, err = Bridge(context.Background(), plain, gap[:3], 0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.Text, plain+"\n") || !strings.Contains(out.Text, "\n### Done\n") {
		t.Fatalf("plain notes not extended with sections:\n%s", out.Text)
	}
}
