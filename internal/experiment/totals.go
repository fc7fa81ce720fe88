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

// ReplayTotal sums the replay rows of one policy and keepRecentTokens setting.
type ReplayTotal struct {
	Policy           string `json:"policy"`
	KeepRecentTokens int    `json:"keepRecentTokens"`
	Sessions         int    `json:"sessions"`
	Compacted        int    `json:"compacted"` // sessions with at least one compaction
	Compactions      int    `json:"compactions"`
	Stuck            int    `json:"stuck"`
	Refused          int    `json:"refused"`
	StillOverBudget  int    `json:"stillOverBudget"`
	SummarizerTokens int    `json:"summarizerTokens"`
	// MeanKeptTokens is the mean verbatim context after a compaction, over every
	// compaction of every session; MinKeptTokens the smallest; both 0 with none.
	MeanKeptTokens   int `json:"meanKeptTokens"`
	MinKeptTokens    int `json:"minKeptTokens"`
	MaxContextTokens int `json:"maxContextTokens"`
	Violations       int `json:"violations"`
}

type totalKey struct {
	policy string
	keep   int
}

func snapshotTotals(rows []SnapshotRow, policies []string, keeps []int) []SnapshotTotal {
	acc := map[totalKey]*SnapshotTotal{}
	dist := map[totalKey]int{}
	var out []SnapshotTotal
	for _, k := range keeps {
		for _, p := range policies {
			acc[totalKey{p, k}] = &SnapshotTotal{Policy: p, KeepRecentTokens: k}
		}
	}
	for _, r := range rows {
		key := totalKey{r.Policy, r.KeepRecentTokens}
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
			key := totalKey{p, k}
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

func replayTotals(rows []ReplayRow, policies []string, keeps []int) []ReplayTotal {
	acc := map[totalKey]*ReplayTotal{}
	keptSum := map[totalKey]int{}
	var out []ReplayTotal
	for _, k := range keeps {
		for _, p := range policies {
			acc[totalKey{p, k}] = &ReplayTotal{Policy: p, KeepRecentTokens: k}
		}
	}
	for _, r := range rows {
		key := totalKey{r.Policy, r.KeepRecentTokens}
		t := acc[key]
		t.Sessions++
		t.Stuck += r.Stuck
		t.Refused += r.Refused
		t.StillOverBudget += r.StillOverBudget
		t.SummarizerTokens += r.SummarizerTokens
		t.MaxContextTokens = max(t.MaxContextTokens, r.MaxContextTokens)
		t.Violations += r.Violations
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
			key := totalKey{p, k}
			t := acc[key]
			if t.Compactions > 0 {
				t.MeanKeptTokens = roundDiv(keptSum[key], t.Compactions)
			}
			out = append(out, *t)
		}
	}
	return out
}
