package summarize

// The budget: fit drops the least important items until the summary fits, and each
// section says what it left out. The omission note is written and read back here, so a
// count carried through many updates stays exact.

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// omissionNote matches the note a section ends with when items were left out:
// "(left out for space: 12 requests, 1 constraint)", and the older "(6 earlier items
// omitted)".
var (
	omissionNote    = regexp.MustCompile(`^\(left out for space: (.+)\)$`)
	oldOmissionNote = regexp.MustCompile(`^\((\d+) earlier items omitted\)$`)
	omissionPart    = regexp.MustCompile(`^(\d+) (.+)$`)
)

func parseOmission(it string) (map[string]int, bool) {
	if m := oldOmissionNote.FindStringSubmatch(it); m != nil {
		n, _ := strconv.Atoi(m[1])
		return map[string]int{kOther: n}, true
	}
	m := omissionNote.FindStringSubmatch(it)
	if m == nil {
		return nil, false
	}
	out := map[string]int{}
	for _, part := range strings.Split(m[1], ", ") {
		pm := omissionPart.FindStringSubmatch(part)
		if pm == nil {
			return nil, false
		}
		n, _ := strconv.Atoi(pm[1])
		kind := kOther
		for k, names := range kindNames {
			if pm[2] == names[0] || pm[2] == names[1] {
				kind = k
			}
		}
		out[kind] += n
	}
	return out, true
}

func addOmitted(m map[string]map[string]int, sec, kind string, n int) {
	if m[sec] == nil {
		m[sec] = map[string]int{}
	}
	m[sec][kind] += n
}

// fit renders the sections with as many items as the budget allows: it drops the least
// important item (lowest priority, then oldest) until the text fits, and notes in each
// section how many items of each kind were left out.
func fit(titles []string, items []item, omitted map[string]map[string]int, budget, maxItems int, count func(string) int) string {
	// Drop order: lowest priority first, oldest first.
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if items[a].prio != items[b].prio {
			return items[a].prio - items[b].prio
		}
		return items[a].seq - items[b].seq
	})
	kept := make([]bool, len(items))
	for i := range kept {
		kept[i] = true
	}
	drop := func(i int) {
		kept[i] = false
		addOmitted(omitted, items[i].sec, items[i].kind, 1)
	}
	if maxItems > 0 {
		perSec := map[string]int{}
		for k := len(order) - 1; k >= 0; k-- { // most important first
			i := order[k]
			if perSec[items[i].sec]++; perSec[items[i].sec] > maxItems {
				drop(i)
			}
		}
	}
	size := 0
	for _, t := range titles {
		size += count(t) + 2
	}
	for i, it := range items {
		if kept[i] {
			size += it.cost
		}
	}
	notes := func() int {
		n := 0
		for sec, kinds := range omitted {
			if len(kinds) > 0 && slices.Contains(titles, sec) {
				n += count(omissionText(kinds)) + 2
			}
		}
		return n
	}
	for _, i := range order {
		if size+notes() <= budget {
			break
		}
		if kept[i] {
			drop(i)
			size -= items[i].cost
		}
	}
	return render(titles, items, kept, omitted)
}

func omissionText(kinds map[string]int) string {
	keys := make([]string, 0, len(kinds))
	for k := range kinds {
		keys = append(keys, k)
	}
	// Most important kinds first.
	rank := []string{kConstraint, kFailed, kRequest, kFixed, kToolError, kPending, kWork, kDecision, kPassed, kContext, kOther}
	slices.SortFunc(keys, func(a, b string) int { return slices.Index(rank, a) - slices.Index(rank, b) })
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		names := kindNames[k]
		parts = append(parts, plural(kinds[k], names[0], names[1]))
	}
	return "(left out for space: " + strings.Join(parts, ", ") + ")"
}
