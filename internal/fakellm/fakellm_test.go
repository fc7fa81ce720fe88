package fakellm

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
)

func post(t *testing.T, url, body string) (int, http.Header, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return resp.StatusCode, resp.Header, out
}

func TestServerScriptAndWindow(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.Enqueue(Behavior{Status: 429, RetryAfter: "2"})
	s.SetWindow(5)
	body := `{"model":"m","messages":[{"role":"user","content":"## Goal please"}]}`
	if st, h, _ := post(t, s.URL()+"/chat/completions", body); st != 429 || h.Get("Retry-After") != "2" {
		t.Fatalf("scripted 429: %d %v", st, h)
	}
	st, _, out := post(t, s.URL()+"/chat/completions", body)
	if st != 200 {
		t.Fatalf("status %d", st)
	}
	text := out["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
	if !strings.Contains(text, "## Next Steps") || strings.Contains(text, "Critical Context") {
		t.Fatalf("branch-shaped prompt got %q", text)
	}
	long := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 100) + `"}]}`
	st, _, out = post(t, strings.TrimSuffix(s.URL(), "/v1")+"/chat/completions", long)
	if st != 400 || out["error"].(map[string]any)["code"] != "context_length_exceeded" {
		t.Fatalf("window: %d %v", st, out)
	}
	reqs := s.Requests()
	if len(reqs) != 3 || reqs[2].PromptTokens != 25 || reqs[0].Header.Get("Authorization") != "Bearer k" || reqs[2].Status != 400 {
		t.Fatalf("recorded %+v", reqs)
	}
}

func TestServerConcurrentUse(t *testing.T) {
	t.Parallel()
	s := Start(t)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			s.Enqueue(Behavior{})
			post(t, s.URL()+"/chat/completions", `{"model":"m","messages":[]}`)
			_ = s.Requests()
		})
	}
	wg.Wait()
	if s.Count() != 20 || s.MaxInFlight() < 1 {
		t.Fatalf("count %d", s.Count())
	}
}

// Summary depends on the prompt only: the same prompt built twice gets the same answer,
// another prompt another one, and the headings follow what the prompt asks for.
func TestSummaryDeterministic(t *testing.T) {
	t.Parallel()
	prompt := func(user string) []Message {
		return []Message{{Role: "system", Content: "You summarize."}, {Role: "user", Content: strings.Repeat("x", 3) + user}}
	}
	a, b := Summary(prompt("## Goal ## Critical Context")), Summary(prompt("## Goal ## Critical Context"))
	if a != b {
		t.Fatalf("the same prompt gave two summaries:\n%s\n%s", a, b)
	}
	if c := Summary(prompt("## Goal ## Critical Context, more")); c == a {
		t.Fatal("two prompts gave the same summary")
	}
	if p := Summary(prompt("## Original Request")); !strings.HasPrefix(p, "## Original Request\n- fake summary ") {
		t.Fatalf("turn-prefix prompt: %q", p)
	}
	if !strings.Contains(a, "## Critical Context") || strings.Contains(Summary(prompt("## Goal")), "## Critical Context") {
		t.Fatal("the branch prompt (no Critical Context) is not told apart from the history prompt")
	}
}

// Hold answers only once its channel is closed: a held request that its client gives up is
// recorded as given up (499), never answered; one released is answered normally.
func TestHoldAnswersWhenReleased(t *testing.T) {
	t.Parallel()
	s := Start(t)
	hold := make(chan struct{})
	s.SetDefault(Behavior{Hold: hold})
	body := `{"model":"m","messages":[{"role":"user","content":"## Goal"}]}`

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/chat/completions", strings.NewReader(body))
	gaveUp := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		gaveUp <- err
	}()
	for s.Count() == 0 {
		runtime.Gosched()
	}
	cancel()
	if err := <-gaveUp; err == nil {
		t.Fatal("a held request was answered before its hold was released")
	}
	for s.Requests()[0].Status == 0 {
		runtime.Gosched()
	}
	if st := s.Requests()[0].Status; st != 499 {
		t.Fatalf("held request given up by its client recorded as %d, want 499", st)
	}

	close(hold)
	st, _, out := post(t, s.URL()+"/chat/completions", body)
	if st != 200 || len(out["choices"].([]any)) != 1 {
		t.Fatalf("after the release: %d %v", st, out)
	}
}
