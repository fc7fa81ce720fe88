package sessionio

import "github.com/compactor-dev/compactor/sessionio/internal/checkpoint"
import "io"

// What a new checkpoint (Checkpoints in checkpoint.go; its file: internal/checkpoint) holds,
// after a whole-file read: the entries of the lines up to the context's first entry, with
// those of the checkpoint the read used before them, and the whole-file facts of those lines.

// newCheckpoint is the checkpoint of t, a whole-file read (NeedFile) of the lines after
// old (nil: after the header), or nil when none should be written: the history it would cover
// (up to the line of the context's first entry) is not minGain longer than old, or lines after
// it would make it unusable. chooseAt (tests) picks the entry the checkpoint ends before among
// the entries read before the context's first one (file order), instead of that first one.
func newCheckpoint(t *Tail, lines *backward, id checkpoint.FileID, old *checkpoint.Checkpoint, minGain int64, chooseAt func([]*Entry) *Entry) *checkpoint.Checkpoint {
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
	c.ID, c.File = id, t.File
	c.Lo, c.At = lines.afterHeader, at
	c.Lines, c.HeadLine = first.Line-lines.headerLine-1, lines.headerLine
	if !hashHistory(c, lines.file.ra) {
		return nil
	}
	for _, tg := range h.labelOrder {
		c.Labels = append(c.Labels, checkpoint.Label{Target: tg, Label: h.labels[tg]})
	}
	for _, d := range t.Diagnostics {
		if d.Line <= c.HeadLine+c.Lines {
			c.Diags = append(c.Diags, checkpoint.Diagnostic(d))
		}
	}
	c.N, c.Recs, c.Blob, c.Table = len(winners), recs, string(blob), checkpoint.IDTable(recs, blob, len(winners))
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
	old        *checkpoint.Checkpoint
	c          checkpoint.Checkpoint
	items      []checkpoint.Record
	newStart   int // the first of items read from lines (the ones before are old's)
	labels     map[string]string
	labelOrder []string
}

// newDraft starts a draft with old's records and facts (nil: none).
func newDraft(old *checkpoint.Checkpoint) *checkpointDraft {
	h := &checkpointDraft{old: old, labels: map[string]string{}}
	if old != nil {
		for i := range old.N {
			h.items = append(h.items, old.Record(i))
		}
		h.c.Count, h.c.HasAssistant, h.c.NameSet, h.c.Name = old.Count, old.HasAssistant, old.NameSet, old.Name
		for _, l := range old.Labels {
			h.labels[l.Target] = l.Label
			h.labelOrder = append(h.labelOrder, l.Target)
		}
		h.c.OrphanParents = append(h.c.OrphanParents, old.OrphanParents...)
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
		rc := checkpoint.Record{ID: e.ID, Parent: e.ParentID, Type: e.Type, Timestamp: e.Timestamp, Line: e.Line, Off: e.at.Off, Len: e.at.Len}
		h.c.Count++
		if e.IsMessage(RoleAssistant) {
			rc.Flags |= checkpoint.Assistant
			h.c.HasAssistant = true
		}
		switch e.Type {
		case TypeLabel:
			if _, ok := h.labels[e.TargetID]; !ok {
				h.labelOrder = append(h.labelOrder, e.TargetID)
			}
			h.labels[e.TargetID] = e.Label
		case TypeSessionInfo:
			h.c.NameSet, h.c.Name = true, trimJSSpace(e.Name)
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
		last[h.items[i].ID] = i
	}
	index = make(map[string]int32, len(last))
	for i := range h.items {
		if i >= h.newStart && last[h.items[i].ID] != i {
			continue
		}
		if i >= h.newStart {
			index[h.items[i].ID] = int32(len(winners))
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
			if j := h.old.Lookup(id); j >= 0 {
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
	recs = make([]byte, len(winners)*checkpoint.RecordSize)
	orphans = map[string]bool{}
	for _, p := range h.c.OrphanParents {
		orphans[p] = true
	}
	for k, i := range winners {
		rc := h.items[i] // an old record keeps its parent index: the old records come first, in order
		if i >= h.newStart {
			rc.ParentIdx = -1
			if rc.Parent != "" {
				rc.ParentIdx = indexOf(rc.Parent)
			}
			if rc.ParentIdx == -2 && !orphans[rc.Parent] {
				orphans[rc.Parent] = true
				h.c.OrphanParents = append(h.c.OrphanParents, rc.Parent)
			}
		}
		checkpoint.PutRecord(recs[k*checkpoint.RecordSize:(k+1)*checkpoint.RecordSize], rc, put)
	}
	return recs, blob, orphans
}

// changesHistory says whether lines after at change what the history means: an id of the
// history used again, or a missing parent of the history supplied (the reads would all fall
// back).
func changesHistory(lines *backward, at int64, index map[string]int32, orphans map[string]bool, old *checkpoint.Checkpoint) bool {
	for _, e := range lines.entries {
		if e.at.Off < at {
			break
		}
		if _, ok := index[e.ID]; ok || orphans[e.ID] || (old != nil && old.Lookup(e.ID) >= 0) {
			return true
		}
	}
	return false
}

// hashHistory sets the hashes of c a read checks the history against (the header, the last
// bytes before c.at, samples between); false when the file cannot be read.
func hashHistory(c *checkpoint.Checkpoint, ra io.ReaderAt) bool {
	var err error
	if c.HeadHash, err = checkpoint.HashRange(ra, 0, c.Lo); err != nil {
		return false
	}
	if c.TailHash, err = checkpoint.HashRange(ra, max(c.Lo, c.At-checkpoint.TailHashLen), c.At); err != nil {
		return false
	}
	for _, p := range checkpoint.SamplePoints(c.Lo, c.At) {
		h, err := checkpoint.HashRange(ra, p, min(p+checkpoint.SampleLen, c.At))
		if err != nil {
			return false
		}
		c.Samples = append(c.Samples, checkpoint.Sample{Off: p, Hash: h})
	}
	return true
}
