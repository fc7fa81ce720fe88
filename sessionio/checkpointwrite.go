package sessionio

import "io"

// What a new checkpoint (checkpoint.go) holds, after a whole-file read: the entries of the lines
// up to the context's first entry, with those of the checkpoint the read used before them,
// and the whole-file facts of those lines.

// newCheckpoint is the checkpoint of t, a whole-file read (NeedFile) of the lines after
// old (nil: after the header), or nil when none should be written: the history it would cover
// (up to the line of the context's first entry) is not minGain longer than old, or lines after
// it would make it unusable. chooseAt (tests) picks the entry the checkpoint ends before among
// the entries read before the context's first one (file order), instead of that first one.
func newCheckpoint(t *Tail, lines *backward, id fileID, old *checkpoint, minGain int64, chooseAt func([]*Entry) *Entry) *checkpoint {
	if len(t.Path) == 0 || t.Window >= len(t.Path) || !t.Complete {
		return nil
	}
	first := t.Path[t.Window]
	if first.record != 0 || first.at.Len == 0 {
		return nil
	}
	before := entriesUpTo(lines, first)
	if chooseAt != nil {
		first = chooseAt(before)
	}
	at := first.at.Off
	prev := lines.start // the old checkpoint's end, or the first line after the header
	if at-prev < minGain {
		return nil
	}
	h := newDraft(old)
	if !h.add(before, at) || len(h.items) == h.newStart && old != nil {
		return nil
	}
	winners, index := h.winners()
	recs, blob, orphans := h.records(winners, index)
	if changesHistory(lines, at, index, orphans, old) {
		return nil
	}
	c := &h.c
	c.id, c.file = id, t.File
	c.lo, c.at = lines.afterHeader, at
	c.lines, c.headLine = first.Line-lines.headerLine-1, lines.headerLine
	if !c.hashHistory(lines.file.ra) {
		return nil
	}
	for _, tg := range h.labelOrder {
		c.labels = append(c.labels, checkpointLabel{target: tg, label: h.labels[tg]})
	}
	for _, d := range t.Diagnostics {
		if d.Line <= c.headLine+c.lines {
			c.diags = append(c.diags, d)
		}
	}
	c.n, c.recs, c.blob, c.table = len(winners), recs, string(blob), idTable(recs, blob, len(winners))
	return c
}

// entriesUpTo returns the entries read before first, the context's first one, and first
// itself, in file order.
func entriesUpTo(lines *backward, first *Entry) []*Entry {
	var before []*Entry
	for i := len(lines.entries) - 1; i >= 0 && lines.entries[i].at.Off <= first.at.Off; i-- {
		before = append(before, lines.entries[i])
	}
	return before
}

// checkpointDraft gathers what a new checkpoint holds: the records in file order (the old
// checkpoint's, then the lines read before its end) and the whole-file facts of those lines
// (the old ones, then the new lines' in order).
type checkpointDraft struct {
	old        *checkpoint
	c          checkpoint
	items      []checkpointRecord
	newStart   int // the first of items read from lines (the ones before are old's)
	labels     map[string]string
	labelOrder []string
}

// newDraft starts a draft with old's records and facts (nil: none).
func newDraft(old *checkpoint) *checkpointDraft {
	h := &checkpointDraft{old: old, labels: map[string]string{}}
	if old != nil {
		for i := range old.n {
			h.items = append(h.items, old.record(i))
		}
		h.c.count, h.c.hasAssistant, h.c.nameSet, h.c.name = old.count, old.hasAssistant, old.nameSet, old.name
		for _, l := range old.labels {
			h.labels[l.target] = l.label
			h.labelOrder = append(h.labelOrder, l.target)
		}
		h.c.orphanParents = append(h.c.orphanParents, old.orphanParents...)
	}
	h.newStart = len(h.items)
	return h
}

// add records the entries of before whose lines start before at, and their facts; false
// when one does not fit in a record.
func (h *checkpointDraft) add(before []*Entry, at int64) bool {
	for _, e := range before {
		if e.at.Off >= at {
			break
		}
		if len(e.ID) > 0xffff || len(e.ParentID) > 0xffff || len(e.Type) > 0xff || len(e.Timestamp) > 0xff || e.at.Len >= 1<<24 || e.at.Off >= 1<<40 {
			return false // beyond what a record holds (never written by Pi)
		}
		rc := checkpointRecord{id: e.ID, parent: e.ParentID, typ: e.Type, ts: e.Timestamp, line: e.Line, off: e.at.Off, len: e.at.Len}
		h.c.count++
		if e.IsMessage(RoleAssistant) {
			rc.flags |= recAssistant
			h.c.hasAssistant = true
		}
		switch e.Type {
		case TypeLabel:
			if _, ok := h.labels[e.TargetID]; !ok {
				h.labelOrder = append(h.labelOrder, e.TargetID)
			}
			h.labels[e.TargetID] = e.Label
		case TypeSessionInfo:
			h.c.nameSet, h.c.name = true, trimJSSpace(e.Name)
		}
		h.items = append(h.items, rc)
	}
	return true
}

// winners returns the items that are winners (the last line per id), in file order, and
// the number of each new winner by id; the old records are winners.
func (h *checkpointDraft) winners() (winners []int, index map[string]int32) {
	last := make(map[string]int, len(h.items)-h.newStart)
	for i := h.newStart; i < len(h.items); i++ {
		last[h.items[i].id] = i
	}
	index = make(map[string]int32, len(last))
	for i := range h.items {
		if i >= h.newStart && last[h.items[i].id] != i {
			continue
		}
		if i >= h.newStart {
			index[h.items[i].id] = int32(len(winners))
		}
		winners = append(winners, i)
	}
	return winners, index
}

// records encodes the winners' records and the strings they point into, resolving each new
// record's parent to its number (-1: none, -2: not in the history, then noted among the
// orphan parents, which it returns as a set).
func (h *checkpointDraft) records(winners []int, index map[string]int32) (recs, blob []byte, orphans map[string]bool) {
	indexOf := func(id string) int32 {
		if v, ok := index[id]; ok {
			return v
		}
		if h.old != nil {
			if j := h.old.lookup(id); j >= 0 {
				return int32(j)
			}
		}
		return -2
	}
	strs := map[string]uint32{}
	put := func(s string) uint32 {
		if off, ok := strs[s]; ok {
			return off
		}
		off := uint32(len(blob))
		blob = append(blob, s...)
		if len(s) <= 32 {
			strs[s] = off
		}
		return off
	}
	recs = make([]byte, len(winners)*recordSize)
	orphans = map[string]bool{}
	for _, p := range h.c.orphanParents {
		orphans[p] = true
	}
	for k, i := range winners {
		rc := h.items[i] // an old record keeps its parent index: the old records come first, in order
		if i >= h.newStart {
			rc.parentIdx = -1
			if rc.parent != "" {
				rc.parentIdx = indexOf(rc.parent)
			}
			if rc.parentIdx == -2 && !orphans[rc.parent] {
				orphans[rc.parent] = true
				h.c.orphanParents = append(h.c.orphanParents, rc.parent)
			}
		}
		putRec(recs[k*recordSize:(k+1)*recordSize], rc, put)
	}
	return recs, blob, orphans
}

// changesHistory says whether lines after at change what the history means: an id of the
// history used again, or a missing parent of the history supplied (the reads would all fall
// back).
func changesHistory(lines *backward, at int64, index map[string]int32, orphans map[string]bool, old *checkpoint) bool {
	for _, e := range lines.entries {
		if e.at.Off < at {
			break
		}
		if _, ok := index[e.ID]; ok || orphans[e.ID] || (old != nil && old.lookup(e.ID) >= 0) {
			return true
		}
	}
	return false
}

// hashHistory sets the hashes a read checks the history against (the header, the last
// bytes before c.at, samples between); false when the file cannot be read.
func (c *checkpoint) hashHistory(ra io.ReaderAt) bool {
	var err error
	if c.headHash, err = hashRange(ra, 0, c.lo); err != nil {
		return false
	}
	if c.tailHash, err = hashRange(ra, max(c.lo, c.at-tailHashLen), c.at); err != nil {
		return false
	}
	for _, p := range samplePoints(c.lo, c.at) {
		h, err := hashRange(ra, p, min(p+sampleLen, c.at))
		if err != nil {
			return false
		}
		c.samples = append(c.samples, checkpointSample{off: p, hash: h})
	}
	return true
}
