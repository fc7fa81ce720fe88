package sessionio

import "github.com/compactor-dev/compactor/sessionio/internal/checkpoint"
import "sort"

// What only the whole file tells (NeedFile): the entry count, labels, the session name and
// the diagnostics. A tail read gathers them from the lines as it reads them, last line first,
// and numbers the lines once it has read them all; a checkpoint's history brings its own.

// tailFacts are a tail read's whole-file facts. Labels and the name are decided by the last
// line about them, which the read meets first.
type tailFacts struct {
	count    int
	labels   map[string]string
	labelSet map[string]bool // targets whose last label line was met
	name     string
	nameSet  bool
	dupLater map[string]*Entry // duplicate ids: the nearest later line met (its diagnostic's line)
	diags    []tailDiag        // duplicate ids, orphans (the lines' problems are their parsers')
	done     bool              // numbered (once: Extend finishes again)
}

func newTailFacts() tailFacts {
	return tailFacts{labels: map[string]string{}, labelSet: map[string]bool{}, dupLater: map[string]*Entry{}}
}

// add counts an entry read backwards; winner is the entry a later line already holds its id
// with (nil if none).
func (f *tailFacts) add(e, winner *Entry) {
	if winner != nil { // reported on the nearest later line with the id
		prev := f.dupLater[e.ID]
		if prev == nil {
			prev = winner
		}
		f.diags = append(f.diags, tailDiag{d: Diagnostic{EntryID: e.ID, Kind: DiagDuplicateID}, phase: 1,
			fromEnd: prev.fromEnd, earlierFromEnd: e.fromEnd})
		f.dupLater[e.ID] = e
	}
	f.count++
	switch e.Type {
	case TypeLabel:
		if !f.labelSet[e.TargetID] {
			f.labelSet[e.TargetID] = true
			if e.Label != "" {
				f.labels[e.TargetID] = e.Label
			}
		}
	case TypeSessionInfo:
		if !f.nameSet {
			f.nameSet = true
			f.name = trimJSSpace(e.Name)
		}
	}
}

// addHistory adds the facts of a checkpoint's history, which all lie before the lines read.
func (f *tailFacts) addHistory(c *checkpoint.Checkpoint) {
	f.count += c.Count
	for _, l := range c.Labels {
		if !f.labelSet[l.Target] && l.Label != "" {
			f.labels[l.Target] = l.Label
		}
	}
	if !f.nameSet && c.NameSet {
		f.name = c.Name
	}
}

// number is called once every line is read (after the header, or after a checkpoint's
// history hist, which brings its own diagnostics). It gives every entry read its line
// number and returns the diagnostics in the full read's order. entries are the entries read,
// newest first, and byID the last line per id; fromEnd runs from 0 (the last line) to
// lines-1 (the first line read), which is line first; lineDiags are the lines' own problems.
func (f *tailFacts) number(entries []*Entry, byID map[string]*Entry, lines, first int, lineDiags []tailDiag, hist *checkpoint.Checkpoint) []Diagnostic {
	f.done = true
	lineOf := func(fromEnd int) int { return first + lines - 1 - fromEnd }
	for _, e := range entries {
		e.Line = lineOf(e.fromEnd)
	}
	for i := len(entries) - 1; i >= 0; i-- { // orphans, in file order
		e := entries[i]
		if e.ParentID == "" || byID[e.ID] != e {
			continue
		}
		if byID[e.ParentID] == nil && (hist == nil || hist.Lookup(e.ParentID) < 0) {
			f.diags = append(f.diags, tailDiag{d: orphan(0, e.ID, e.ParentID), phase: 2, fromEnd: e.fromEnd})
		}
	}
	all := make([]tailDiag, 0, len(lineDiags)+len(f.diags))
	all = append(append(all, lineDiags...), f.diags...)
	sort.SliceStable(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.phase != b.phase {
			return a.phase < b.phase
		}
		if a.fromEnd != b.fromEnd {
			return a.fromEnd > b.fromEnd
		}
		return a.seq < b.seq
	})
	out := make([]Diagnostic, 0, len(all))
	for _, td := range all {
		d := td.d
		d.Line = lineOf(td.fromEnd)
		if td.phase == 1 {
			d = duplicateID(d.Line, d.EntryID, lineOf(td.earlierFromEnd))
		}
		out = append(out, d)
	}
	if hist != nil {
		out = mergeDiagnostics(diagnosticsOf(hist), out)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// diagPhase orders diagnostics as the full read does: line problems, duplicate ids, orphans.
func diagPhase(d Diagnostic) int {
	switch d.Kind {
	case DiagDuplicateID:
		return 1
	case DiagOrphan:
		return 2
	}
	return 0
}

// mergeDiagnostics puts the history's diagnostics (all before the new lines') with the new
// ones, phase by phase.
func mergeDiagnostics(hist, cur []Diagnostic) []Diagnostic {
	if len(hist) == 0 {
		return cur
	}
	out := make([]Diagnostic, 0, len(hist)+len(cur))
	for ph := range 3 {
		for _, d := range hist {
			if diagPhase(d) == ph {
				out = append(out, d)
			}
		}
		for _, d := range cur {
			if diagPhase(d) == ph {
				out = append(out, d)
			}
		}
	}
	return out
}
