package experiment

// Recall: each probe looked up in a context as whole words, and the counts per probe kind
// that the replay rows, the totals and the report carry.

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Recall counts probes and how many the context still held.
type Recall struct {
	Probes int `json:"probes"`
	Found  int `json:"found"`
}

func (r *Recall) add(o Recall) { r.Probes += o.Probes; r.Found += o.Found }

// Percent is Found/Probes in percent, rounded down to a tenth (0 with no probes).
func (r Recall) Percent() float64 {
	if r.Probes == 0 {
		return 0
	}
	return float64(r.Found*1000/r.Probes) / 10
}

// ProbeRecall is the recall of each probe kind.
type ProbeRecall struct {
	FileRead      Recall `json:"fileRead"`
	FileModified  Recall `json:"fileModified"`
	Command       Recall `json:"command"`
	FailedCommand Recall `json:"failedCommand"`
	Request       Recall `json:"request"`
	Constraint    Recall `json:"constraint"`
	Number        Recall `json:"number"`
}

// Kind returns the counter of one kind (nil for an unknown kind).
func (p *ProbeRecall) Kind(kind string) *Recall {
	switch kind {
	case ProbeFileRead:
		return &p.FileRead
	case ProbeFileModified:
		return &p.FileModified
	case ProbeCommand:
		return &p.Command
	case ProbeFailedCommand:
		return &p.FailedCommand
	case ProbeRequest:
		return &p.Request
	case ProbeConstraint:
		return &p.Constraint
	case ProbeNumber:
		return &p.Number
	}
	return nil
}

func (p *ProbeRecall) add(o ProbeRecall) {
	for _, k := range ProbeKinds() {
		p.Kind(k).add(*o.Kind(k))
	}
}

// Total sums every kind.
func (p ProbeRecall) Total() Recall {
	var t Recall
	for _, k := range ProbeKinds() {
		t.add(*p.Kind(k))
	}
	return t
}

// Facts sums every kind but the file lists (which Pi's summary format carries whole
// unless they were capped): what the summary text itself must keep.
func (p ProbeRecall) Facts() Recall {
	var t Recall
	for _, k := range ProbeKinds() {
		if k != ProbeFileRead && k != ProbeFileModified {
			t.add(*p.Kind(k))
		}
	}
	return t
}

// recall checks the probes against a context text (normalized with normText).
func recall(probes []probe, ctxText string) ProbeRecall {
	var out ProbeRecall
	for _, p := range probes {
		r := out.Kind(p.kind)
		r.Probes++
		ok := true
		for _, k := range p.keys {
			if !containsKey(ctxText, k) {
				ok = false
				break
			}
		}
		if ok {
			r.Found++
		}
	}
	return out
}

// containsKey reports whether text contains the key as whole words: where the key begins
// (ends) with a letter, digit or underscore, the text must not continue the word before
// (after) it. "8080" is not in "18080", "Run the tests" is not in "Run the testsuite".
func containsKey(text string, k probeKey) bool {
	first, _ := utf8.DecodeRuneInString(k.s)
	last, _ := utf8.DecodeLastRuneInString(k.s)
	for from := 0; from <= len(text); {
		i := strings.Index(text[from:], k.s)
		if i < 0 {
			return false
		}
		at := from + i
		end := at + len(k.s)
		okStart := !isWordRune(first) || at == 0 || !isWordRune(lastRune(text[:at]))
		okEnd := k.open || !isWordRune(last) || end == len(text) || !isWordRune(firstRune(text[end:]))
		if okStart && okEnd {
			return true
		}
		_, size := utf8.DecodeRuneInString(text[at:])
		from = at + size
	}
	return false
}

func isWordRune(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

func lastRune(s string) rune  { r, _ := utf8.DecodeLastRuneInString(s); return r }
func firstRune(s string) rune { r, _ := utf8.DecodeRuneInString(s); return r }
