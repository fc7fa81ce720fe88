package summarize

import (
	"context"
	"errors"
	"github.com/compactor-dev/compactor/sessionio/picontext"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/tokenize"
)

func writeFile(p, s string) error { return os.WriteFile(p, []byte(s), 0o600) }

// recorder is a Summarizer that records requests and answers "<task>:<n messages>".
type recorder struct {
	mu   sync.Mutex
	reqs []Request
	fail Task
	err  error
}

func (r *recorder) Summarize(ctx context.Context, req Request) (Result, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	if r.err != nil && req.Task == r.fail {
		return Result{}, r.err
	}
	return Result{Text: req.Task.String() + ":" + itoa(len(req.Messages)), InputTokens: 10, OutputTokens: 2, Calls: 1}, nil
}

func readCall(path string) *sessionio.Message {
	return &sessionio.Message{Role: sessionio.RoleAssistant, Content: sessionio.Content{Blocks: []sessionio.Block{
		{Type: sessionio.BlockToolCall, ID: "c-" + path, Name: "read", Arguments: []byte(`{"path":"` + path + `"}`)},
	}}}
}

func TestCompactionSummaryShapes(t *testing.T) {
	t.Parallel()
	hist := []*sessionio.Message{userMsg("a"), readCall("b.go")}
	prefix := []*sessionio.Message{userMsg("c")}
	f := ExtractFileOps(pi.MustParseRelease("0.73.1"), nil, hist, prefix)
	f.AddEdited("z.go")

	r := &recorder{}
	out, err := CompactionSummary(context.Background(), r, CompactionInput{
		MessagesToSummarize: hist, TurnPrefix: prefix, IsSplitTurn: true, PreviousSummary: "prev",
		CustomInstructions: "focus", ReserveTokens: 1000, FileOps: f, Release: pi.MustParseRelease("0.73.1"),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "update:2" + SplitTurnSeparator + "turn-prefix:1" + "\n\n<read-files>\nb.go\n</read-files>\n\n<modified-files>\nz.go\n</modified-files>"
	if out.Summary != want {
		t.Fatalf("summary %q\nwant %q", out.Summary, want)
	}
	if out.InputTokens != 20 || out.OutputTokens != 4 || out.Calls != 2 {
		t.Fatalf("usage %+v", out)
	}
	for _, q := range r.reqs {
		switch q.Task {
		case TaskUpdate:
			if q.MaxTokens != 800 || q.PreviousSummary != "prev" || q.CustomInstructions != "focus" {
				t.Errorf("history request %+v", q)
			}
		case TaskTurnPrefix:
			if q.MaxTokens != 500 || q.PreviousSummary != "" || q.CustomInstructions != "" {
				t.Errorf("prefix request %+v", q)
			}
		default:
			t.Errorf("unexpected kind %v", q.Task)
		}
	}
	// Pi 1.6: the model's own output limit, and the prefix gets the instructions too.
	r = &recorder{}
	if _, err := CompactionSummary(context.Background(), r, CompactionInput{
		MessagesToSummarize: hist, TurnPrefix: prefix, IsSplitTurn: true, PreviousSummary: "prev",
		CustomInstructions: "focus", ReserveTokens: 1000, FileOps: f, Release: pi.Latest,
	}); err != nil {
		t.Fatal(err)
	}
	for _, q := range r.reqs {
		if q.MaxTokens != 0 || q.CustomInstructions != "focus" || q.Release != pi.Latest {
			t.Errorf("Pi 1.6 %s request %+v", q.Task, q)
		}
	}

	// Split turn with no history: "No prior history." and the previous summary is dropped.
	r = &recorder{}
	out, err = CompactionSummary(context.Background(), r, CompactionInput{TurnPrefix: prefix, IsSplitTurn: true, PreviousSummary: "prev", Release: pi.MustParseRelease("0.73.1")})
	if err != nil {
		t.Fatal(err)
	}
	if out.Summary != NoPriorHistory+SplitTurnSeparator+"turn-prefix:1" || len(r.reqs) != 1 {
		t.Fatalf("summary %q after %d requests", out.Summary, len(r.reqs))
	}
	if r.reqs[0].MaxTokens != TurnPrefixMaxTokens(DefaultReserveTokens) || TurnPrefixMaxTokens(DefaultReserveTokens) != 8192 || HistoryMaxTokens(DefaultReserveTokens) != 13107 {
		t.Fatalf("limits %d", r.reqs[0].MaxTokens)
	}

	// Split flag with an empty prefix behaves as not split; an empty span is still summarized.
	r = &recorder{}
	out, err = CompactionSummary(context.Background(), r, CompactionInput{IsSplitTurn: true})
	if err != nil || out.Summary != "history:0" || len(out.ReadFiles) != 0 || out.ModifiedFiles == nil {
		t.Fatalf("%+v %v", out, err)
	}

	// A failing prefix fails the whole summary.
	boom := errors.New("boom")
	r = &recorder{fail: TaskTurnPrefix, err: boom}
	if _, err := CompactionSummary(context.Background(), r, CompactionInput{MessagesToSummarize: hist, TurnPrefix: prefix, IsSplitTurn: true}); !errors.Is(err, boom) {
		t.Fatalf("err %v", err)
	}
}

func TestPromptLayout(t *testing.T) {
	t.Parallel()
	msgs := []*sessionio.Message{userMsg("hi")}
	p := BuildPrompt(Request{Task: TaskHistory, Messages: msgs, PreviousSummary: "old", CustomInstructions: "tests"})
	want := "<conversation>\n[User]: hi\n</conversation>\n\n<previous-summary>\nold\n</previous-summary>\n\n" + UpdatePrompt + "\n\n" + focusRules + "\n<focus-request>\ntests\n</focus-request>"
	if p != want {
		t.Fatalf("prompt %q", p)
	}
	if p := BuildPrompt(Request{Task: TaskTurnPrefix, Messages: msgs, CustomInstructions: "ignored", Release: pi.MustParseRelease("0.73.1")}); p != "<conversation>\n[User]: hi\n</conversation>\n\n"+TurnPrefixPrompt {
		t.Fatalf("turn prefix prompt (Pi 0.73) %q", p)
	}
	// Pi 1.4+ gives the turn prefix the custom instructions too.
	if p := BuildPrompt(Request{Task: TaskTurnPrefix, Messages: msgs, CustomInstructions: "focus", Release: pi.Latest}); p != "<conversation>\n[User]: hi\n</conversation>\n\n"+TurnPrefixPrompt+"\n\n"+focusRules+"\n<focus-request>\nfocus\n</focus-request>" {
		t.Fatalf("turn prefix prompt (Pi 1.6) %q", p)
	}
	if p := BuildPrompt(Request{Task: TaskBranch, Messages: msgs, CustomInstructions: "only this", ReplaceInstructions: true}); !strings.HasSuffix(p, "</conversation>\n\nonly this") {
		t.Fatalf("replace instructions %q", p)
	}
	for _, h := range []string{"## Goal", "## Constraints & Preferences", "## Progress", "### Done", "### In Progress", "### Blocked", "## Key Decisions", "## Next Steps", "## Critical Context"} {
		if !strings.Contains(HistoryPrompt, h) || !strings.Contains(UpdatePrompt, h) {
			t.Errorf("history/update prompt lacks %q", h)
		}
		if h != "## Critical Context" && !strings.Contains(BranchPrompt, h) {
			t.Errorf("branch prompt lacks %q", h)
		}
	}
	if strings.Contains(BranchPrompt, "Critical Context") {
		t.Error("the branch prompt has no Critical Context section")
	}
	for _, h := range []string{"## Original Request", "## Early Progress", "## Context for Suffix"} {
		if !strings.Contains(TurnPrefixPrompt, h) {
			t.Errorf("turn prefix prompt lacks %q", h)
		}
	}
}

// TestChunkedRollingSummary: a span far larger than the endpoint's window ends in one
// summary, made by sequential update calls that each fit.
func TestChunkedRollingSummary(t *testing.T) {
	t.Parallel()
	var msgs []*sessionio.Message
	for i := range 60 {
		msgs = append(msgs, userMsg("request "+itoa(i)+" "+strings.Repeat("lorem ipsum ", 150)), assistantMsg("answer "+itoa(i)+" "+strings.Repeat("dolor sit ", 120)))
	}
	const window = 3000 // tokens; the span is ~50k
	for _, configured := range []int{window, 0, window * 2} {
		srv := fakellm.Start(t)
		srv.SetWindow(window)
		c, _, _ := newClient(t, srv, func(c *OpenAIConfig) { c.MaxInputTokens = configured })
		res, err := c.Summarize(context.Background(), Request{Task: TaskHistory, Messages: msgs, MaxTokens: 500})
		if err != nil {
			t.Fatalf("configured window %d: %v", configured, err)
		}
		reqs := srv.Requests()
		ok := 0
		for i, r := range reqs {
			if r.Status != 200 {
				continue
			}
			ok++
			if r.PromptTokens > window {
				t.Fatalf("request %d has %d tokens", i, r.PromptTokens)
			}
			if ok > 1 && !strings.Contains(r.Messages[1].Content, "<previous-summary>\n## Goal") {
				t.Fatalf("request %d does not carry the rolling summary", i)
			}
		}
		if res.Calls != ok || ok < 10 || !strings.Contains(res.Text, "previous summary: true") {
			t.Fatalf("configured %d: %d calls (%d ok of %d), text %q", configured, res.Calls, ok, len(reqs), res.Text)
		}
		t.Logf("configured window %d: %d requests, %d ok, summary %d chars", configured, len(reqs), ok, len(res.Text))
		if configured == window && ok != len(reqs) {
			t.Errorf("with the right window no request should overflow (%d of %d)", len(reqs)-ok, len(reqs))
		}
		// Every message made it into some request.
		all := ""
		for _, r := range reqs {
			if r.Status == 200 {
				all += r.Messages[1].Content
			}
		}
		for i := range 60 {
			if !strings.Contains(all, "request "+itoa(i)+" ") || !strings.Contains(all, "answer "+itoa(i)+" ") {
				t.Fatalf("configured %d: message %d never sent", configured, i)
			}
		}
	}
}

func TestChunkedHugeSingleMessage(t *testing.T) {
	t.Parallel()
	srv := fakellm.Start(t)
	srv.SetWindow(2000)
	c, _, _ := newClient(t, srv, func(c *OpenAIConfig) { c.MaxInputTokens = 2000 })
	huge := userMsg("START " + strings.Repeat("0123456789", 20000) + " END")
	res, err := c.Summarize(context.Background(), Request{Task: TaskBranch, Messages: []*sessionio.Message{huge}})
	if err != nil {
		t.Fatal(err)
	}
	r := srv.Requests()[0]
	if res.Calls != 1 || r.PromptTokens > 2000 || !strings.Contains(r.Messages[1].Content, "START") || !strings.Contains(r.Messages[1].Content, "END") {
		t.Fatalf("calls %d, prompt %d tokens", res.Calls, r.PromptTokens)
	}
}

func TestBranchSummaryAssembly(t *testing.T) {
	t.Parallel()
	out, err := BranchSummary(context.Background(), &recorder{}, nil, nil, BranchOptions{})
	if err != nil || out.Summary != NoContentToSummarize || out.ReadFiles == nil || len(out.ModifiedFiles) != 0 {
		t.Fatalf("%+v %v", out, err)
	}
	s := loadCorpus(t, "03-branches-labels-name.jsonl.gz")
	entries, _, err := CollectBranch(s, s.LeafID(), "e729c9f5")
	if err != nil {
		t.Fatal(err)
	}
	msgs, f, _ := PrepareBranch(entries, 0, tokenize.EstimateFor(pi.MustParseRelease("0.73.1")), pi.MustParseRelease("0.73.1"))
	r := &recorder{}
	out, err = BranchSummary(context.Background(), r, msgs, f, BranchOptions{CustomInstructions: "x", Release: pi.MustParseRelease("0.73.1")})
	if err != nil {
		t.Fatal(err)
	}
	read, mod := ComputeFileLists(f)
	if out.Summary != BranchSummaryPreamble+"branch:"+itoa(len(msgs))+FormatFileOperations(read, mod) {
		t.Fatalf("summary %q", out.Summary)
	}
	if r.reqs[0].MaxTokens != BranchMaxTokens || r.reqs[0].CustomInstructions != "x" {
		t.Fatalf("request %+v", r.reqs[0])
	}
	// Pi 1.6 leaves the output limit to the model.
	if _, err = BranchSummary(context.Background(), r, msgs, f, BranchOptions{Release: pi.Latest}); err != nil || r.reqs[1].MaxTokens != 0 {
		t.Fatalf("Pi 1.6 branch request %+v (%v)", r.reqs[1], err)
	}
	if _, _, err := CollectBranch(s, s.LeafID(), "nope"); err == nil {
		t.Fatal("unknown target must fail")
	}
}

func TestExtractive(t *testing.T) {
	t.Parallel()
	s := loadCorpus(t, "08-large.jsonl.gz")
	path, err := s.Path("")
	if err != nil {
		t.Fatal(err)
	}
	ctx := picontext.Build(path, pi.MustParseRelease("0.73.1"))
	x := NewExtractive()
	span := SerializeConversation(ctx.Messages, pi.MustParseRelease("0.73.1"))
	res, err := x.Summarize(context.Background(), Request{Task: TaskHistory, Messages: ctx.Messages, MaxTokens: HistoryMaxTokens(DefaultReserveTokens)})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"## Goal", "## Constraints & Preferences", "## Progress", "### Done", "### In Progress", "### Blocked", "## Key Decisions", "## Next Steps", "## Critical Context"} {
		if !strings.Contains(res.Text, h) {
			t.Errorf("missing %q", h)
		}
	}
	t.Logf("extractive: %d messages, span %d chars, summary %d chars", len(ctx.Messages), len(span), len(res.Text))
	if len(res.Text) > 8000 || len(res.Text)*20 > len(span) {
		t.Fatalf("summary %d chars for a %d-char span", len(res.Text), len(span))
	}
	again, _ := x.Summarize(context.Background(), Request{Task: TaskHistory, Messages: ctx.Messages})
	if again.Text != res.Text {
		t.Fatal("extractive summary is not deterministic")
	}
	upd, _ := x.Summarize(context.Background(), Request{Task: TaskUpdate, Messages: ctx.Messages[:5], PreviousSummary: res.Text})
	if !strings.Contains(upd.Text, "## Critical Context") || len(upd.Text) > 8000 {
		t.Fatalf("update %q", upd.Text)
	}
	tp, _ := x.Summarize(context.Background(), Request{Task: TaskTurnPrefix, Messages: ctx.Messages[:5]})
	if !strings.HasPrefix(tp.Text, "## Original Request") || !strings.Contains(tp.Text, "## Context for Suffix") {
		t.Fatalf("turn prefix %q", tp.Text)
	}
	br, _ := x.Summarize(context.Background(), Request{Task: TaskBranch, Messages: ctx.Messages[:5]})
	if strings.Contains(br.Text, "Critical Context") || !strings.Contains(br.Text, "## Next Steps") {
		t.Fatalf("branch %q", br.Text)
	}
	// Works through the same assembly as the LLM.
	out, err := CompactionSummary(context.Background(), x, CompactionInput{MessagesToSummarize: ctx.Messages[:10], TurnPrefix: ctx.Messages[10:12], IsSplitTurn: true})
	if err != nil || !strings.Contains(out.Summary, SplitTurnSeparator) {
		t.Fatalf("%v %q", err, out.Summary)
	}
}

// An incremental preparation merges only the new messages into the base history, and
// reuses the base without a request when nothing is new.
func TestCompactionSummaryBaseHistory(t *testing.T) {
	t.Parallel()
	base := "base history"
	newMsgs := []*sessionio.Message{userMsg("n1"), userMsg("n2")}
	prefix := []*sessionio.Message{userMsg("p")}
	cases := []struct {
		name     string
		in       CompactionInput
		want     string
		requests []string // kind:messages:previous
	}{
		{"new messages", CompactionInput{MessagesToSummarize: newMsgs, PreviousSummary: "ignored", BaseHistory: &base},
			"update:2", []string{"update:2:base history"}},
		{"nothing new", CompactionInput{BaseHistory: &base}, "base history", nil},
		{"nothing new, split turn", CompactionInput{TurnPrefix: prefix, IsSplitTurn: true, BaseHistory: &base},
			"base history" + SplitTurnSeparator + "turn-prefix:1", []string{"turn-prefix:1:"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := &recorder{}
			out, err := CompactionSummary(context.Background(), r, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if out.Summary != tc.want {
				t.Fatalf("summary %q, want %q", out.Summary, tc.want)
			}
			var got []string
			for _, q := range r.reqs {
				got = append(got, q.Task.String()+":"+itoa(len(q.Messages))+":"+q.PreviousSummary)
			}
			if strings.Join(got, "|") != strings.Join(tc.requests, "|") {
				t.Fatalf("requests %v, want %v", got, tc.requests)
			}
			if want := strings.SplitN(tc.want, SplitTurnSeparator, 2)[0]; out.History != want {
				t.Fatalf("history part %q, want %q", out.History, want)
			}
		})
	}
}
