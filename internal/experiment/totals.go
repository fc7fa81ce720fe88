package experiment

// SnapshotTotal sums the snapshot rows of one policy and keepRecentTokens setting over the
// sessions that had a plan (Prepared).
type SnapshotTotal struct {
	Policy           string `json:"policy"`
	KeepRecentTokens int    `json:"keepRecentTokens"`
	Sessions         int    `json:"sessions"` // rows
	Prepared         int    `json:"prepared"`
	SplitTurns       int    `json:"splitTurns"`
	// Sums over prepared plans.
	KeptTokens       int `json:"keptTokens"`
	SummarizedTokens int `json:"summarizedTokens"`
	TurnPrefixTokens int `json:"turnPrefixTokens"`
	// MeanKeptTokens and MeanAbsDistance (|kept - keepRecentTokens|) are rounded means over
	// prepared plans.
	MeanKeptTokens  int `json:"meanKeptTokens"`
	MeanAbsDistance int `json:"meanAbsDistance"`
	// Violations sums invariant breaches; SessionsWithViolations counts the plans with any.
	Violations             int `json:"violations"`
	SessionsWithViolations int `json:"sessionsWithViolations"`
	AgreesWithPi           int `json:"agreesWithPi"`
}

// ReplayTotal sums the replay rows of one policy, keepRecentTokens setting and summarizer.
type ReplayTotal struct {
	Policy           string `json:"policy"`
	KeepRecentTokens int    `json:"keepRecentTokens"`
	Summarizer       string `json:"summarizer"`
	Sessions         int    `json:"sessions"`
	Compacted        int    `json:"compacted"` // sessions with at least one compaction
	Compactions      int    `json:"compactions"`
	Stuck            int    `json:"stuck"`
	Refused          int    `json:"refused"`
	StillOverBudget  int    `json:"stillOverBudget"`
	ShortenedLists   int    `json:"shortenedLists"`
	DroppedSummaries int    `json:"droppedSummaries"`
	SummarizerTokens int    `json:"summarizerTokens"`
	// MeanKeptTokens is the mean verbatim context after a compaction, over every
	// compaction of every session; MinKeptTokens the smallest; both 0 with none.
	MeanKeptTokens   int `json:"meanKeptTokens"`
	MinKeptTokens    int `json:"minKeptTokens"`
	MaxContextTokens int `json:"maxContextTokens"`
	Violations       int `json:"violations"`

	LLMCalls             int `json:"llmCalls"`
	LLMInputTokens       int `json:"llmInputTokens"`
	LLMCachedInputTokens int `json:"llmCachedInputTokens"`
	LLMOutputTokens      int `json:"llmOutputTokens"`

	// With Eval: the sums of the rows' evals, the mean summary over every compaction and
	// the largest; Milestones sum the first spans of the sessions that reached each one.
	Recall             *ProbeRecall                    `json:"recall,omitempty"`
	SummaryTokensMean  int                             `json:"summaryTokensMean,omitempty"`
	SummaryTokensMax   int                             `json:"summaryTokensMax,omitempty"`
	FileListTokensMean int                             `json:"fileListTokensMean,omitempty"`
	Milestones         *[len(Milestones)]MilestoneSums `json:"milestones,omitempty"`
}

// MilestoneSums sums the Milestone of every session that reached it.
type MilestoneSums struct {
	After             int         `json:"after"`
	Sessions          int         `json:"sessions"`
	SummaryTokensMean int         `json:"summaryTokensMean"`
	FirstSpan         ProbeRecall `json:"firstSpan"`
	summaryTokensSum  int
}

// RecallTotal is the recall of one probe kind for one policy, setting and summarizer,
// over every compaction of every session (a flat row for charts and CSV).
type RecallTotal struct {
	Policy           string `json:"policy"`
	KeepRecentTokens int    `json:"keepRecentTokens"`
	Summarizer       string `json:"summarizer"`
	ProbeKind        string `json:"probeKind"`
	Probes           int    `json:"probes"`
	Found            int    `json:"found"`
	// RecallPercent is found/probes in percent, rounded down (0 with no probes).
	RecallPercent int `json:"recallPercent"`
}

// EarlyTotal is, for one policy, setting and summarizer, the sessions' first compacted
// span after their After-th compaction: how many sessions got that far, their mean
// summary size then, and the recall of the first span's facts (every kind but the file
// lists) and files.
type EarlyTotal struct {
	Policy            string `json:"policy"`
	KeepRecentTokens  int    `json:"keepRecentTokens"`
	Summarizer        string `json:"summarizer"`
	After             int    `json:"after"`
	Sessions          int    `json:"sessions"`
	SummaryTokensMean int    `json:"summaryTokensMean"`
	FactProbes        int    `json:"factProbes"`
	FactsFound        int    `json:"factsFound"`
	FactsPercent      int    `json:"factsPercent"`
	FileProbes        int    `json:"fileProbes"`
	FilesFound        int    `json:"filesFound"`
	FilesPercent      int    `json:"filesPercent"`
	// FirstSpan has every kind.
	FirstSpan ProbeRecall `json:"firstSpan"`
}

type totalKey struct {
	policy string
	keep   int
	sum    string
}

func snapshotTotals(rows []SnapshotRow, policies []string, keeps []int) []SnapshotTotal {
	acc := map[totalKey]*SnapshotTotal{}
	dist := map[totalKey]int{}
	var out []SnapshotTotal
	for _, k := range keeps {
		for _, p := range policies {
			acc[totalKey{p, k, ""}] = &SnapshotTotal{Policy: p, KeepRecentTokens: k}
		}
	}
	for _, r := range rows {
		key := totalKey{r.Policy, r.KeepRecentTokens, ""}
		t := acc[key]
		t.Sessions++
		if r.AgreesWithPi {
			t.AgreesWithPi++
		}
		if !r.Prepared {
			continue
		}
		t.Prepared++
		if r.SplitTurn {
			t.SplitTurns++
		}
		t.KeptTokens += r.KeptTokens
		t.SummarizedTokens += r.SummarizedTokens
		t.TurnPrefixTokens += r.TurnPrefixTokens
		d := r.TargetDistance
		if d < 0 {
			d = -d
		}
		dist[key] += d
		t.Violations += r.Violations
		if r.Violations > 0 {
			t.SessionsWithViolations++
		}
	}
	for _, k := range keeps {
		for _, p := range policies {
			key := totalKey{p, k, ""}
			t := acc[key]
			if t.Prepared > 0 {
				t.MeanKeptTokens = roundDiv(t.KeptTokens, t.Prepared)
				t.MeanAbsDistance = roundDiv(dist[key], t.Prepared)
			}
			out = append(out, *t)
		}
	}
	return out
}

func replayTotals(rows []ReplayRow, policies []string, keeps []int, summarizers []string) []ReplayTotal {
	acc := map[totalKey]*ReplayTotal{}
	keptSum := map[totalKey]int{}
	summarySum, fileSum := map[totalKey]int{}, map[totalKey]int{}
	var out []ReplayTotal
	for _, k := range keeps {
		for _, p := range policies {
			for _, s := range summarizers {
				acc[totalKey{p, k, s}] = &ReplayTotal{Policy: p, KeepRecentTokens: k, Summarizer: s}
			}
		}
	}
	for _, r := range rows {
		key := totalKey{r.Policy, r.KeepRecentTokens, r.Summarizer}
		t := acc[key]
		t.Sessions++
		t.Stuck += r.Stuck
		t.Refused += r.Refused
		t.StillOverBudget += r.StillOverBudget
		t.ShortenedLists += r.ShortenedLists
		t.DroppedSummaries += r.DroppedSummaries
		t.SummarizerTokens += r.SummarizerTokens
		t.MaxContextTokens = max(t.MaxContextTokens, r.MaxContextTokens)
		t.Violations += r.Violations
		t.LLMCalls += r.LLMCalls
		t.LLMInputTokens += r.LLMInputTokens
		t.LLMCachedInputTokens += r.LLMCachedInputTokens
		t.LLMOutputTokens += r.LLMOutputTokens
		if r.Eval != nil {
			t.addEval(r.Eval)
			summarySum[key] += r.Eval.SummaryTokensSum
			fileSum[key] += r.Eval.FileListTokensSum
		}
		if r.Compactions == 0 {
			continue
		}
		if t.Compactions == 0 || r.MinKeptTokens < t.MinKeptTokens {
			t.MinKeptTokens = r.MinKeptTokens
		}
		t.Compacted++
		t.Compactions += r.Compactions
		keptSum[key] += r.KeptTokensSum
	}
	for _, k := range keeps {
		for _, p := range policies {
			for _, s := range summarizers {
				key := totalKey{p, k, s}
				t := acc[key]
				t.means(keptSum[key], summarySum[key], fileSum[key])
				out = append(out, *t)
			}
		}
	}
	return out
}

// addEval adds an evaluated replay's recall, largest summary and milestones to t.
func (t *ReplayTotal) addEval(e *ReplayEval) {
	if t.Recall == nil {
		t.Recall = &ProbeRecall{}
		t.Milestones = &[len(Milestones)]MilestoneSums{}
		for i, after := range Milestones {
			t.Milestones[i].After = after
		}
	}
	t.Recall.add(e.Recall)
	t.SummaryTokensMax = max(t.SummaryTokensMax, e.SummaryTokensMax)
	for i, m := range e.Milestones {
		if m.Reached {
			ms := &t.Milestones[i]
			ms.Sessions++
			ms.summaryTokensSum += m.SummaryTokens
			ms.FirstSpan.add(m.FirstSpan)
		}
	}
}

// means sets t's means per compaction from the sums of its rows' kept tokens, summary
// tokens and file-list tokens, and each milestone's mean summary.
func (t *ReplayTotal) means(kept, summary, files int) {
	if t.Compactions > 0 {
		t.MeanKeptTokens = roundDiv(kept, t.Compactions)
		t.SummaryTokensMean = roundDiv(summary, t.Compactions)
		t.FileListTokensMean = roundDiv(files, t.Compactions)
	}
	if t.Milestones != nil {
		for i := range t.Milestones {
			if ms := &t.Milestones[i]; ms.Sessions > 0 {
				ms.SummaryTokensMean = roundDiv(ms.summaryTokensSum, ms.Sessions)
			}
		}
	}
}

// evalTotals flattens the evaluated replay totals into one row per probe kind and one
// per milestone.
func evalTotals(totals []ReplayTotal) ([]RecallTotal, []EarlyTotal) {
	recalls, early := []RecallTotal{}, []EarlyTotal{}
	for _, t := range totals {
		if t.Recall == nil {
			continue
		}
		for _, kind := range ProbeKinds() {
			r := *t.Recall.Kind(kind)
			recalls = append(recalls, RecallTotal{Policy: t.Policy, KeepRecentTokens: t.KeepRecentTokens, Summarizer: t.Summarizer,
				ProbeKind: kind, Probes: r.Probes, Found: r.Found, RecallPercent: percent(r)})
		}
		for _, m := range t.Milestones {
			facts, files := m.FirstSpan.Facts(), m.FirstSpan.Total()
			files.Probes -= facts.Probes
			files.Found -= facts.Found
			early = append(early, EarlyTotal{Policy: t.Policy, KeepRecentTokens: t.KeepRecentTokens, Summarizer: t.Summarizer,
				After: m.After, Sessions: m.Sessions, SummaryTokensMean: m.SummaryTokensMean,
				FactProbes: facts.Probes, FactsFound: facts.Found, FactsPercent: percent(facts),
				FileProbes: files.Probes, FilesFound: files.Found, FilesPercent: percent(files), FirstSpan: m.FirstSpan})
		}
	}
	return recalls, early
}

// percent is found/probes in whole percent, rounded down: 94.9% is 94, never a 95 that
// meets a target it misses.
func percent(r Recall) int {
	if r.Probes == 0 {
		return 0
	}
	return r.Found * 100 / r.Probes
}
