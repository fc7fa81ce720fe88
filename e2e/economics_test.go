//go:build e2e

package e2e

// What a workload costs (docs/architecture.md, "The cost model"): the agent's own requests
// and the summary requests (Pi's, or compactor's preparations), under the cost model
// providers bill by. For each stream of requests (the session's agent requests; Pi's
// summary requests; compactor's summary requests) a request's leading messages that are
// identical to the previous request's are served by the provider's prompt cache, and cached
// input costs 0.1 of uncached input. Output is left out: the scripted answers are the same
// size in both runs.
//
// Per Pi release, as Pi sends its requests:
//   - Pi 1.6 sends its summary requests with cacheRetention "none" and a fresh routing id:
//     they are never served from a cache (Pi 0.73's were, as any request: the rule above);
//   - compactor's requests go to an OpenAI-compatible endpoint, billed by what its automatic
//     prefix cache reports (usage.prompt_tokens_details.cached_tokens: the scripted server
//     applies OpenAI's rule, internal/promptcache), which counts a repeated beginning of a
//     message too: a top-up that sends the first preparation's span again after the same
//     prompt is served from the cache for that part.
//
// Two price lists: OpenAI-style (cached input 0.1, uncached 1) and Anthropic-style, where
// uncached input that is written to the cache costs 1.25 (the 5-minute cache write) and a
// read 0.1. Pi 1.6's Anthropic sessions use message threads: each request sends only the new
// messages and the server continues the conversation, falling back to a full request when the
// prefix changed (after a compaction); billed as the conversation read from the cache plus
// the new part written to it, which is the rule above with the write price. Pi 1.6's summary
// requests write nothing (1.0); Pi 0.73's are written like any request.

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/scriptllm"
)

// cachedPrice is what a cached input token costs, relative to an uncached one;
// cacheWritePrice what an uncached token written to an Anthropic-style cache costs.
const (
	cachedPrice     = 0.1
	cacheWritePrice = 1.25
)

// Economics are one run's figures.
type Economics struct {
	Name string
	// Pi is the Pi release of the run (its summary requests are cached or not).
	Pi          string
	Compactions int
	// FromHook is how many compactions Pi wrote from a value the extension returned.
	FromHook int
	// SummaryRequests counts every summarization request the model received (Pi's own and
	// compactor's preparations); PiSummaryRequests Pi's alone; InCycles those made before the
	// run's last compaction ended, for the compactions counted (a preparation after it is for
	// the cycle the run ends in).
	SummaryRequests, PiSummaryRequests, InCycles int
	// SummaryInput and AgentInput are input tokens (characters / 4); the Cached ones the
	// part the cost model serves from the cache (leading messages identical to the stream's
	// previous request; none of Pi 1.6's summary requests). PiSummaryInput and
	// PiSummaryCached are Pi's part of the summary figures.
	SummaryInput, SummaryCached     int
	PiSummaryInput, PiSummaryCached int
	AgentInput, AgentCached         int
	// ProviderCachedSummary is what the scripted provider reported as cached_tokens for the
	// summary requests (a token-prefix cache, as OpenAI's: internal/promptcache).
	ProviderCachedSummary int
	BlockedMedian         time.Duration
	BlockedTotal          time.Duration
}

// Cost is the modelled bill, OpenAI-style: uncached input at 1, cached input at cachedPrice.
func (e Economics) Cost() float64 {
	return float64(e.AgentInput-e.AgentCached) + cachedPrice*float64(e.AgentCached) +
		float64(e.SummaryInput-e.SummaryCached) + cachedPrice*float64(e.SummaryCached)
}

// AnthropicCost is the modelled bill, Anthropic-style: what the cache does not serve is
// written to it (cacheWritePrice), what it serves is read (cachedPrice); but Pi 1.6's
// summary requests, which write nothing, cost 1; compactor's endpoint is OpenAI-style.
func (e Economics) AnthropicCost() float64 {
	written := func(in, cached int) float64 { return cacheWritePrice*float64(in-cached) + cachedPrice*float64(cached) }
	pi := written(e.PiSummaryInput, e.PiSummaryCached)
	if piNeverCaches(e.Pi) {
		pi = float64(e.PiSummaryInput)
	}
	ours := float64(e.SummaryInput-e.PiSummaryInput-(e.SummaryCached-e.PiSummaryCached)) + cachedPrice*float64(e.SummaryCached-e.PiSummaryCached)
	return written(e.AgentInput, e.AgentCached) + pi + ours
}

// piNeverCaches: Pi's summary requests are never served from a cache (Pi 1.x sends them with
// cacheRetention "none" and a fresh routing id).
func piNeverCaches(version string) bool { return !strings.HasPrefix(version, "0.") }

// economicsOf computes a run's figures from every request its scripted model received and
// the compactions Pi ran.
func economicsOf(name string, reqs []scriptllm.Request, comps []AutoCompaction) Economics {
	ec := Economics{Name: name, Pi: piVersion, Compactions: len(comps)}
	var blocked []time.Duration
	for _, c := range comps {
		if fromHook(c.Entry) {
			ec.FromHook++
		}
		blocked = append(blocked, c.Blocked)
		ec.BlockedTotal += c.Blocked
	}
	if len(blocked) > 0 {
		ec.BlockedMedian = median(blocked)
	}
	var prevAgent, prevPi, prevOurs []scriptllm.Message
	var lastEnd time.Time
	if len(comps) > 0 {
		lastEnd = comps[len(comps)-1].End
	}
	for _, r := range reqs {
		if r.Error != "" && len(r.Messages) == 0 {
			continue
		}
		if r.Kind == scriptllm.KindSummary && !r.Time.After(lastEnd) {
			ec.InCycles++
		}
		switch r.Kind {
		case scriptllm.KindAgent:
			ec.AgentInput += r.PromptTokens
			ec.AgentCached += leadingSame(prevAgent, r.Messages)
			prevAgent = r.Messages
		case scriptllm.KindSummary:
			ec.SummaryRequests++
			ec.SummaryInput += r.PromptTokens
			if r.Stream { // Pi's: compactor's requests are not streamed
				ec.PiSummaryRequests++
				ec.PiSummaryInput += r.PromptTokens
				if !piNeverCaches(ec.Pi) {
					cached := leadingSame(prevPi, r.Messages)
					ec.PiSummaryCached += cached
					ec.SummaryCached += cached
				}
				prevPi = r.Messages
				continue
			}
			ec.SummaryCached += max(r.CachedTokens, leadingSame(prevOurs, r.Messages))
			ec.ProviderCachedSummary += r.CachedTokens
			prevOurs = r.Messages
		}
	}
	return ec
}

// leadingSame is the size (tokens, as the server counts them) of the leading messages of
// cur that are identical to prev's.
func leadingSame(prev, cur []scriptllm.Message) int {
	n := 0
	for n < len(prev) && n < len(cur) && reflect.DeepEqual(prev[n], cur[n]) {
		n++
	}
	return scriptllm.CountTokens(cur[:n])
}

// economicsTable prints the runs side by side with the ratio of the second to the first
// (Pi alone first), as a markdown table.
func economicsTable(base, with Economics) string {
	ratio := func(a, b float64) string {
		if a == 0 {
			return "—"
		}
		return fmt.Sprintf("%.2fx", b/a)
	}
	row := func(name string, a, b float64, f string) string {
		return fmt.Sprintf("| %s | "+f+" | "+f+" | %s |\n", name, a, b, ratio(a, b))
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "| | %s | %s | ratio |\n|---|---|---|---|\n", base.Name, with.Name)
	sb.WriteString(row("automatic compactions", float64(base.Compactions), float64(with.Compactions), "%.0f"))
	sb.WriteString(row("  of which from a prepared summary", float64(base.FromHook), float64(with.FromHook), "%.0f"))
	sb.WriteString(row("summary requests (Pi's or compactor's)", float64(base.SummaryRequests), float64(with.SummaryRequests), "%.0f"))
	sb.WriteString(row("  of which for the compactions counted", float64(base.InCycles), float64(with.InCycles), "%.0f"))
	sb.WriteString(row("  of which Pi's", float64(base.PiSummaryRequests), float64(with.PiSummaryRequests), "%.0f"))
	sb.WriteString(row("summary input tokens (characters / 4)", float64(base.SummaryInput), float64(with.SummaryInput), "%.0f"))
	sb.WriteString(row("  of which cached (cost model)", float64(base.SummaryCached), float64(with.SummaryCached), "%.0f"))
	sb.WriteString(row("  compactor's reported cached by the provider", float64(base.ProviderCachedSummary), float64(with.ProviderCachedSummary), "%.0f"))
	sb.WriteString(row("agent input tokens", float64(base.AgentInput), float64(with.AgentInput), "%.0f"))
	sb.WriteString(row("  of which not served by the cache", float64(base.AgentInput-base.AgentCached), float64(with.AgentInput-with.AgentCached), "%.0f"))
	sb.WriteString(row("modelled cost", base.Cost(), with.Cost(), "%.0f"))
	sb.WriteString(row("modelled cost, Anthropic-style", base.AnthropicCost(), with.AnthropicCost(), "%.0f"))
	fmt.Fprintf(&sb, "| agent blocked, median / total | %s / %s | %s / %s | |\n",
		base.BlockedMedian.Round(time.Millisecond), base.BlockedTotal.Round(time.Millisecond),
		with.BlockedMedian.Round(time.Millisecond), with.BlockedTotal.Round(time.Millisecond))
	return sb.String()
}

// checkEconomics holds the run with the extension to the zero-wait bar against Pi alone's, for
// a workload whose cycle is several times the summary's latency: the agent waits at most
// 50 ms (median); at least 95% of compactions come from Pi's hook with no summary call by
// Pi; at most one compaction more than Pi alone; at most 2 summary requests per compaction;
// a modelled cost no higher.
func checkEconomics(t *testing.T, alone, with Economics) {
	t.Helper()
	if with.BlockedMedian > 50*time.Millisecond {
		t.Errorf("median blocked %s with the extension, want <= 50ms", with.BlockedMedian)
	}
	if with.Compactions == 0 || float64(with.FromHook) < 0.95*float64(with.Compactions) {
		t.Errorf("%d of %d compactions from a prepared summary, want >= 95%%", with.FromHook, with.Compactions)
	}
	if with.Compactions > alone.Compactions+1 {
		t.Errorf("%d compactions with the extension, Pi alone %d: want at most one more", with.Compactions, alone.Compactions)
	}
	if with.InCycles > 2*with.Compactions {
		t.Errorf("%d summary requests for %d compactions, want at most 2 per compaction", with.InCycles, with.Compactions)
	}
	if with.Cost() > alone.Cost() {
		t.Errorf("modelled cost %.0f with the extension, Pi alone %.0f (%.3fx)", with.Cost(), alone.Cost(), with.Cost()/alone.Cost())
	}
}

// TestLeadingSame pins the cost model's cache rule on hand-made requests.
func TestLeadingSame(t *testing.T) {
	sys := scriptllm.Message{Role: "system", Content: strings.Repeat("s", 400)}
	u1 := scriptllm.Message{Role: "user", Content: strings.Repeat("a", 40)}
	u2 := scriptllm.Message{Role: "user", Content: strings.Repeat("b", 40)}
	call := scriptllm.Message{Role: "assistant", ToolCalls: []scriptllm.ToolCall{{ID: "1", Name: "read", Arguments: `{"path":"x"}`}}}
	if got := leadingSame(nil, []scriptllm.Message{sys, u1}); got != 0 {
		t.Fatalf("first request: %d cached", got)
	}
	if got, want := leadingSame([]scriptllm.Message{sys, u1}, []scriptllm.Message{sys, u1, call}), scriptllm.CountTokens([]scriptllm.Message{sys, u1}); got != want {
		t.Fatalf("appended request: %d cached, want %d", got, want)
	}
	if got, want := leadingSame([]scriptllm.Message{sys, u1, call}, []scriptllm.Message{sys, u2, call}), scriptllm.CountTokens([]scriptllm.Message{sys}); got != want {
		t.Fatalf("changed second message: %d cached, want %d (the system prompt only)", got, want)
	}
	e := Economics{AgentInput: 1000, AgentCached: 800, SummaryInput: 100, SummaryCached: 0}
	if c := e.Cost(); c != 200+80+100 {
		t.Fatalf("cost %.1f", c)
	}
	// Anthropic-style: the uncached agent input is written (1.25); Pi 1.6's summaries cost 1,
	// Pi 0.73's are written too; compactor's are OpenAI-style.
	a := Economics{Pi: "1.6.0", AgentInput: 1000, AgentCached: 800, SummaryInput: 300, SummaryCached: 50, PiSummaryInput: 100}
	if c := a.AnthropicCost(); c != 250+80+100+150+5 {
		t.Fatalf("anthropic cost (1.6) %.1f", c)
	}
	a.Pi, a.PiSummaryCached, a.SummaryCached = "0.73.1", 40, 90
	if c := a.AnthropicCost(); math.Abs(c-(250+80+75+4+150+5)) > 1e-9 {
		t.Fatalf("anthropic cost (0.73) %.1f", c)
	}
}
