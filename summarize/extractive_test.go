package summarize

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/internal/sessiongen"
)

func bashCall(id, cmd string) string {
	return fmt.Sprintf(`{"role":"assistant","content":[{"type":"toolCall","id":%q,"name":"bash","arguments":{"command":%q}}],"stopReason":"toolUse","timestamp":1}`, id, cmd)
}

func bashResult(id, out string, isError bool) string {
	return fmt.Sprintf(`{"role":"toolResult","toolCallId":%q,"toolName":"bash","content":[{"type":"text","text":%q}],"isError":%v,"timestamp":1}`, id, out, isError)
}

func summarizeText(t *testing.T, x *Extractive, req Request) string {
	t.Helper()
	res, err := x.Summarize(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res.Text
}

// sectionOf returns the lines of one section of a summary.
func sectionOf(text, title string) string {
	for _, s := range parseSections(text) {
		if s.title == title {
			return strings.Join(s.items, "\n")
		}
	}
	return ""
}

// Messages are filed by what they are: a question is not a constraint, a command whose
// output says "ok" (exit 0) is done, not blocked; a command that failed and passed later is
// done with its old error; one whose last run failed is blocked with its first error line.
func TestExtractiveClassifies(t *testing.T) {
	t.Parallel()
	msgs := sessiongen.Messages(t,
		`{"role":"user","content":"Please fix the flaky login test in auth_test.go. Never change the public API. Should we also check the cache? How does retry work?","timestamp":1}`,
		bashCall("b1", "cd /repo && go test ./auth/ 2>&1 | tail -3"),
		bashResult("b1", "--- FAIL: TestLogin (0.01s)\n    auth_test.go:12: got 401, want 200\nFAIL\n\nCommand exited with code 1", true),
		bashCall("b2", "cd /repo && go test ./auth/ 2>&1 | tail -3"),
		bashResult("b2", "ok  \texample.com/auth\t0.2s", false),
		bashCall("b3", "go vet ./..."),
		bashResult("b3", "ok", false),
		bashCall("b4", "make lint"),
		bashResult("b4", "checking\nlint.go:3: error: unused variable x\nmore output\n\nCommand exited with code 2", true),
		`{"role":"bashExecution","command":"docker compose up -d","output":"Error response from daemon: port is already allocated","exitCode":1,"cancelled":false,"truncated":false,"timestamp":2}`,
		`{"role":"assistant","content":[{"type":"text","text":"The root cause is a stale token in the fixture, so I'll use a fresh one per test."}],"stopReason":"stop","timestamp":3}`,
	)
	text := summarizeText(t, NewExtractive(), Request{Task: TaskHistory, Messages: msgs})
	constraints := sectionOf(text, "## Constraints & Preferences")
	if constraints != "Never change the public API." {
		t.Errorf("constraints %q: want only the rule, not the questions", constraints)
	}
	goal := sectionOf(text, "## Goal")
	if !strings.Contains(goal, "Please fix the flaky login test in auth_test.go.") {
		t.Errorf("goal %q lacks the request", goal)
	}
	blocked := sectionOf(text, "### Blocked")
	for _, want := range []string{
		"`make lint` failed (exit 2): lint.go:3: error: unused variable x",
		"`docker compose up -d` failed (exit 1): Error response from daemon: port is already allocated",
	} {
		if !strings.Contains(blocked, want) {
			t.Errorf("blocked %q lacks %q", blocked, want)
		}
	}
	if strings.Contains(blocked, "go vet") || strings.Contains(blocked, "go test") {
		t.Errorf("blocked %q lists a command whose last run passed", blocked)
	}
	done := sectionOf(text, "### Done")
	for _, want := range []string{
		"[x] `go vet ./...`",
		"[x] `go test ./auth/ 2>&1 | tail -3` passes now; it failed before (exit 1): --- FAIL: TestLogin (0.01s)",
	} {
		if !strings.Contains(done, want) {
			t.Errorf("done %q lacks %q", done, want)
		}
	}
	if d := sectionOf(text, "## Key Decisions"); !strings.Contains(d, "The root cause is a stale token in the fixture, so I'll use a fresh one per test.") {
		t.Errorf("decisions %q", d)
	}
	if again := summarizeText(t, NewExtractive(), Request{Task: TaskHistory, Messages: msgs}); again != text {
		t.Error("not deterministic")
	}
}

var omissionRe = regexp.MustCompile(`\(left out for space: ([^)]*)\)`)

// omittedCounts parses the omission notes of a summary: kind name -> count.
func omittedCounts(t *testing.T, text string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, m := range omissionRe.FindAllStringSubmatch(text, -1) {
		for _, part := range strings.Split(m[1], ", ") {
			n, name, ok := strings.Cut(part, " ")
			c, err := strconv.Atoi(n)
			if !ok || err != nil {
				t.Fatalf("omission note %q", m[0])
			}
			out[name] += c
		}
	}
	return out
}

// Over budget, the summary keeps the most important items, stays within the budget, and
// says per kind how many it left out: every command is either listed or counted.
func TestExtractiveBudgetSaysWhatItOmits(t *testing.T) {
	t.Parallel()
	var lines []string
	lines = append(lines, `{"role":"user","content":"Run every migration and keep the logs. Always use the staging database.","timestamp":1}`)
	const passed, failed = 120, 3
	for i := range passed {
		id := "p" + strconv.Itoa(i)
		lines = append(lines, bashCall(id, fmt.Sprintf("./migrate --step %d --verbose", i)), bashResult(id, "applied", false))
	}
	for i := range failed {
		id := "f" + strconv.Itoa(i)
		lines = append(lines, bashCall(id, fmt.Sprintf("./check --table t%d", i)), bashResult(id, fmt.Sprintf("error: table t%d is missing\n\nCommand exited with code 3", i), true))
	}
	msgs := sessiongen.Messages(t, lines...)
	x := &Extractive{Budget: 400}
	text := summarizeText(t, x, Request{Task: TaskHistory, Messages: msgs})
	if n := EstimateText(text); n > 400 {
		t.Errorf("summary of %d tokens over a budget of 400:\n%s", n, text)
	}
	for i := range failed {
		if want := fmt.Sprintf("`./check --table t%d` failed (exit 3): error: table t%d is missing", i, i); !strings.Contains(text, want) {
			t.Errorf("lost a failure: %q", want)
		}
	}
	if !strings.Contains(text, "Always use the staging database.") {
		t.Error("lost the constraint")
	}
	listed := strings.Count(text, "[x] `./migrate --step ")
	omitted := omittedCounts(t, text)
	if omitted["commands that passed"] == 0 || listed+omitted["commands that passed"] != passed {
		t.Errorf("%d passed commands listed + %v omitted, want %d in all:\n%s", listed, omitted, passed, text)
	}
	// The newest survive.
	if !strings.Contains(text, fmt.Sprintf("--step %d ", passed-1)) {
		t.Error("the newest command was dropped before older ones")
	}
	// A smaller request limit lowers the budget.
	small := summarizeText(t, x, Request{Task: TaskHistory, Messages: msgs, MaxTokens: 200})
	if n := EstimateText(small); n > 200 {
		t.Errorf("summary of %d tokens with MaxTokens 200", n)
	}
}

// An update keeps the previous summary's items below the span's own, carries its omission
// counts forward, and does not turn Pi's file lists or stale "latest" lines into items.
func TestExtractiveUpdateMergesPrevious(t *testing.T) {
	t.Parallel()
	prev := strings.Join([]string{
		"## Goal", "- Port the billing service to Go", "",
		"## Constraints & Preferences", "- Never log card numbers.", "",
		"## Progress", "### Done", "- (left out for space: 7 commands that passed)", "- [x] `go build ./...`", "",
		"### In Progress", "- [ ] Answer the latest request: old question", "",
		"### Blocked", "- `make e2e` failed (exit 2): e2e: timeout after 30s", "",
		"## Key Decisions", "- (none)", "", "## Next Steps", "1. Continue from the latest answer: old", "",
		"## Critical Context", "- Latest user request: old question", "",
		"<read-files>", "src/old.go", "</read-files>",
	}, "\n")
	msgs := sessiongen.Messages(t,
		`{"role":"user","content":"Now add the invoice endpoint. Make sure amounts stay in cents.","timestamp":1}`,
		bashCall("b1", "go test ./invoice/"),
		bashResult("b1", "ok", false),
	)
	text := summarizeText(t, NewExtractive(), Request{Task: TaskUpdate, Messages: msgs, PreviousSummary: prev})
	for _, want := range []string{
		"- Port the billing service to Go", "- Now add the invoice endpoint.",
		"- Never log card numbers.", "- Make sure amounts stay in cents.",
		"`make e2e` failed (exit 2): e2e: timeout after 30s",
		"[x] `go test ./invoice/`", "(left out for space: 7 commands that passed)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("update lacks %q:\n%s", want, text)
		}
	}
	for _, gone := range []string{"src/old.go", "old question", "Continue from the latest answer: old"} {
		if strings.Contains(text, gone) {
			t.Errorf("update carries %q:\n%s", gone, text)
		}
	}
	// A split turn's prefix summary (after the history's) is carried into the sections
	// that hold the same kinds of items.
	split := "## Goal\n- Port it\n\n" + strings.TrimPrefix(SplitTurnSeparator, "\n\n") +
		"## Original Request\n- Upgrade the parser to v2.\n\n## Early Progress\n- Do not touch the lexer.\n- [x] `npm ci`\n- [x] `go test ./invoice/`\n" +
		"- `npm run build` failed (exit 2): error TS2304\n\n## Context for Suffix\n- Latest assistant text: working on it"
	text = summarizeText(t, NewExtractive(), Request{Task: TaskUpdate, Messages: msgs, PreviousSummary: split})
	for title, want := range map[string]string{
		"## Goal": "Upgrade the parser to v2.", "## Constraints & Preferences": "Do not touch the lexer.",
		"### Done": "[x] `npm ci`", "### Blocked": "`npm run build` failed (exit 2): error TS2304",
	} {
		if !strings.Contains(sectionOf(text, title), want) {
			t.Errorf("%s lacks %q:\n%s", title, want, text)
		}
	}
	if strings.Contains(text, "working on it") || strings.Count(text, "Port it") != 1 || strings.Count(text, "`go test ./invoice/`") != 1 {
		t.Errorf("stale or repeated items:\n%s", text)
	}
	// The older summary's omission notes (before this format) count as items.
	old := summarizeText(t, NewExtractive(), Request{Task: TaskUpdate, Messages: msgs, PreviousSummary: "## Goal\n- (6 earlier items omitted)\n- Port it"})
	if !strings.Contains(old, "(left out for space: 6 items)") {
		t.Errorf("old omission note not carried:\n%s", old)
	}
}

// The turn prefix keeps its own three sections.
func TestExtractiveTurnPrefix(t *testing.T) {
	t.Parallel()
	msgs := sessiongen.Messages(t,
		`{"role":"user","content":"Upgrade the parser to v2. Do not touch the lexer.","timestamp":1}`,
		bashCall("b1", "npm run build"),
		bashResult("b1", "src/parser.ts(3,1): error TS2304: Cannot find name 'Tok'.\n\nCommand exited with code 2", true),
	)
	text := summarizeText(t, NewExtractive(), Request{Task: TaskTurnPrefix, Messages: msgs})
	if !strings.HasPrefix(text, "## Original Request\n- Upgrade the parser to v2.") ||
		!strings.Contains(text, "## Early Progress") || !strings.Contains(text, "## Context for Suffix") ||
		!strings.Contains(text, "Do not touch the lexer.") || !strings.Contains(text, "error TS2304: Cannot find name 'Tok'.") {
		t.Errorf("turn prefix:\n%s", text)
	}
}
