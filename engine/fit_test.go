package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/internal/sessiongen"
	"github.com/compactor-dev/compactor/outcome"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/tokenize"
)

// Sizes of a reported run that overflowed: a long agent run over 894 files read and 536 modified, about
// 104k tokens of context in a 7.5 MiB file, compacted for a 45,000-token window.
const (
	bigReadFiles     = 894
	bigModifiedFiles = 536
	bigWindow        = 45000
)

// bigSession writes a session like the report's: 150 turns, each reading 8 files and
// editing 5 (cycling over 894 and 536 paths, all of them used before the last 20,000
// tokens). With signatures, thinking signatures make the file 7.5 MiB and cost no tokens;
// without, it is 0.6 MiB with the same context.
func bigSession(t *testing.T, signatures bool) string {
	t.Helper()
	g := sessiongen.Wide{Turns: 150, Reads: 8, Edits: 5, ReadFiles: bigReadFiles, ModifiedFiles: bigModifiedFiles}
	if signatures {
		g.SignatureBytes = 22800
	}
	file := filepath.Join(t.TempDir(), "big.jsonl")
	if err := g.WriteFile(file); err != nil {
		t.Fatal(err)
	}
	return file
}

// contextTokens is what Pi's context of the file costs now, with the counter.
func contextTokens(t *testing.T, file, counter string) (int, *sessionio.Entry) {
	t.Helper()
	src, err := Load(file, Settings{ContextWindow: bigWindow, Counter: counter}, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cutpoint.ContextTokens(src.Path, src.Release, src.Counter), src.Path[len(src.Path)-1]
}

// That run's case: 104k tokens compacted for a 45,000-token window with the model's input
// limited to 32,000 tokens (the span is summarized in chunks). Untrimmed, the file lists
// alone (894 + 536 paths) leave the compacted context over the 28,616-token threshold, and
// the next turn compacts again. It must end at or under the threshold, say what it
// trimmed, and keep every path in the details.
//
// It is not parallel: its sessions are large, and other tests of the package time their
// calls.
func TestCompactFitsTheBudget(t *testing.T) {
	llm := fakellm.Start(t)
	file := bigSession(t, true)
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := contextTokens(t, file, tokenize.CounterTiktoken)
	t.Logf("generated session: %.1f MiB, %d tokens of context", float64(fi.Size())/(1<<20), before)
	if fi.Size() < 7<<20 || before < 95000 || before > 115000 {
		t.Fatalf("the generated session is not the report's: %d bytes, %d tokens", fi.Size(), before)
	}
	eng, err := New(openAI(t, llm.URL(), func(c *summarize.OpenAIConfig) { c.MaxInputTokens = 32000 }), Settings{ContextWindow: bigWindow})
	if err != nil {
		t.Fatal(err)
	}
	res, err := eng.Compact(context.Background(), Request{File: file})
	if err != nil {
		t.Fatal(err)
	}
	threshold := bigWindow - cutpoint.DefaultReserveTokens
	after, leaf := contextTokens(t, file, tokenize.CounterTiktoken)
	t.Logf("compacted in %d calls: %d -> %d tokens (threshold %d); %+v", res.LLMCalls, res.TokensBefore, res.TokensAfter, threshold, res.Trimmed)
	if res.Outcome != outcome.Done || res.LLMCalls < 4 {
		t.Fatalf("outcome %s after %d calls; want a compaction summarized in chunks", res.Outcome, res.LLMCalls)
	}
	if res.TokensAfter > threshold || after > threshold {
		t.Fatalf("the compacted context is %d tokens (result %d), over the threshold %d: the next turn compacts again", after, res.TokensAfter, threshold)
	}
	if after != res.TokensAfter {
		t.Errorf("the result says %d tokens after, the file's context is %d", res.TokensAfter, after)
	}
	tr := res.Trimmed
	if tr == nil || tr.Threshold != threshold || tr.TokensAfter != res.TokensAfter || tr.TokensUntrimmed <= threshold ||
		tr.ReadFiles != bigReadFiles || tr.ModifiedFiles != bigModifiedFiles || tr.ReadFilesListed+tr.ModifiedFilesListed >= bigReadFiles+bigModifiedFiles {
		t.Fatalf("trimmed %+v", tr)
	}
	// Modified files are listed before read ones, the most recent first.
	if tr.ModifiedFilesListed < bigModifiedFiles && tr.ReadFilesListed > 0 {
		t.Errorf("read files listed while modified ones were left out: %+v", tr)
	}
	note := fmt.Sprintf("%d of %d read files and %d of %d modified files are not listed",
		tr.ReadFiles-tr.ReadFilesListed, tr.ReadFiles, tr.ModifiedFiles-tr.ModifiedFilesListed, tr.ModifiedFiles)
	if !strings.Contains(leaf.Summary, note) {
		t.Errorf("the summary does not say what its lists leave out (%q)", note)
	}
	if tr.ModifiedFilesListed > 0 && !strings.Contains(leaf.Summary, "<modified-files>\nsrc/w") {
		t.Error("no modified files listed")
	}
	var details struct{ ReadFiles, ModifiedFiles []string }
	if err := json.Unmarshal(leaf.Details, &details); err != nil || len(details.ReadFiles) != bigReadFiles || len(details.ModifiedFiles) != bigModifiedFiles {
		t.Errorf("details keep %d read and %d modified files (%v), want every path", len(details.ReadFiles), len(details.ModifiedFiles), err)
	}

	// The same for a preparation (nothing written).
	file2 := bigSession(t, false)
	pr, pres, err := eng.Prepare(context.Background(), Request{File: file2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if pres.Trimmed == nil || pres.TokensAfter > threshold {
		t.Fatalf("preparation: %d tokens after, trimmed %+v", pres.TokensAfter, pres.Trimmed)
	}
	if !strings.Contains(pr.Summary, "are not listed") || len(pr.Details.ReadFiles) != bigReadFiles {
		t.Error("the prepared summary's lists are not shortened, or its details lost paths")
	}
}

// When the kept part itself leaves no room (a long summary), the plan is made again with a
// later cut, and only the messages between the two cuts are summarized again.
func TestCompactCutsLaterToFit(t *testing.T) {
	llm := fakellm.Start(t)
	// A ~9,000-token summary (estimate counter: 4 characters a token).
	llm.SetDefault(fakellm.Behavior{Text: "## Goal\n" + strings.Repeat("- keep going with the services\n", 1200)})
	file := bigSession(t, false)
	eng, err := New(openAI(t, llm.URL(), nil), Settings{ContextWindow: bigWindow, Counter: tokenize.CounterEstimate})
	if err != nil {
		t.Fatal(err)
	}
	planned, err := Plan(file, Settings{Counter: tokenize.CounterEstimate, KeepRecentTokens: cutpoint.DefaultKeepRecentTokens,
		ReserveTokens: cutpoint.DefaultReserveTokens, ContextWindow: bigWindow}, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	plan := planned.Plan
	res, err := eng.Compact(context.Background(), Request{File: file})
	if err != nil {
		t.Fatal(err)
	}
	threshold := bigWindow - cutpoint.DefaultReserveTokens
	t.Logf("%d calls: %d -> %d tokens; first kept %s (planned %s); %+v", res.LLMCalls, res.TokensBefore, res.TokensAfter, res.FirstKeptEntryID, plan.FirstKeptEntryID, res.Trimmed)
	if res.Trimmed == nil || res.Trimmed.KeepRecentTokens == 0 || res.TokensAfter > threshold {
		t.Fatalf("trimmed %+v, %d tokens after", res.Trimmed, res.TokensAfter)
	}
	if res.FirstKeptEntryID <= plan.FirstKeptEntryID || res.LLMCalls < 2 {
		t.Errorf("kept from %s (planned %s) after %d calls; want a later cut and one more call", res.FirstKeptEntryID, plan.FirstKeptEntryID, res.LLMCalls)
	}
	built := false
	for _, r := range llm.Requests()[1:] {
		built = built || strings.Contains(r.Messages[len(r.Messages)-1].Content, "<previous-summary>\n## Goal\n- keep going")
	}
	if !built {
		t.Error("the later cut did not build on the summary already made")
	}
	if after, _ := contextTokens(t, file, tokenize.CounterEstimate); after != res.TokensAfter {
		t.Errorf("the result says %d tokens after, the file's context is %d", res.TokensAfter, after)
	}
}

// When nothing fits, nothing is written, and the reason names the sizes.
func TestCompactRefusesWhatCannotFit(t *testing.T) {
	llm := fakellm.Start(t)
	llm.SetDefault(fakellm.Behavior{Text: strings.Repeat("a summary too long for any window ", 4000)})
	file := bigSession(t, false)
	before, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := New(openAI(t, llm.URL(), nil), Settings{ContextWindow: bigWindow})
	if err != nil {
		t.Fatal(err)
	}
	_, err = eng.Compact(context.Background(), Request{File: file})
	var ge *GuardError
	if !errors.As(err, &ge) || !strings.Contains(err.Error(), "cannot fit under the budget") || !strings.Contains(err.Error(), fmt.Sprintf("over %d (window %d - reserve %d)", bigWindow-16384, bigWindow, 16384)) {
		t.Fatalf("got %v", err)
	}
	after, _ := os.ReadFile(file)
	if string(after) != string(before) {
		t.Error("the file changed")
	}
}
