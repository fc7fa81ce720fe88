package sessionio

// What a new checkpoint (ckfile.go) holds, after a whole-file read: the entries of the lines
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
	// The entries read before the context's first one, in file order; the checkpoint ends
	// before first (chooseAt, tests: another of them).
	var before []*Entry
	for i := len(lines.entries) - 1; i >= 0 && lines.entries[i].at.Off <= first.at.Off; i-- {
		before = append(before, lines.entries[i])
	}
	if chooseAt != nil {
		first = chooseAt(before)
	}
	at := first.at.Off
	prev := lines.start // the old checkpoint's end, or the first line after the header
	if at-prev < minGain {
		return nil
	}
	// The records in file order: the old checkpoint's, then the lines read before at; and
	// the whole-file facts of the history: the old ones, then the new lines in order.
	var items []ckRec
	var c checkpoint
	labels := map[string]string{}
	var labelOrder []string
	oldN := 0
	if old != nil {
		oldN = old.n
		for i := range old.n {
			items = append(items, old.rec(i))
		}
		c.count, c.hasAssistant, c.nameSet, c.name = old.count, old.hasAssistant, old.nameSet, old.name
		for _, l := range old.labels {
			labels[l.target] = l.label
			labelOrder = append(labelOrder, l.target)
		}
		c.orphanParents = append(c.orphanParents, old.orphanParents...)
	}
	newStart := len(items)
	for _, e := range before {
		if e.at.Off >= at {
			break
		}
		if len(e.ID) > 0xffff || len(e.ParentID) > 0xffff || len(e.Type) > 0xff || len(e.Timestamp) > 0xff || e.at.Len >= 1<<24 || e.at.Off >= 1<<40 {
			return nil // beyond what a record holds (never written by Pi)
		}
		rc := ckRec{id: e.ID, parent: e.ParentID, typ: e.Type, ts: e.Timestamp, line: e.Line, off: e.at.Off, len: e.at.Len}
		c.count++
		if e.IsMessage(RoleAssistant) {
			rc.flags |= ckAssistant
			c.hasAssistant = true
		}
		switch e.Type {
		case TypeLabel:
			if _, ok := labels[e.TargetID]; !ok {
				labelOrder = append(labelOrder, e.TargetID)
			}
			labels[e.TargetID] = e.Label
		case TypeSessionInfo:
			c.nameSet, c.name = true, trimJSSpace(e.Name)
		}
		items = append(items, rc)
	}
	if len(items) == newStart && old != nil {
		return nil
	}
	// Winners (the last line per id), numbered in file order; the old records are winners.
	last := make(map[string]int, len(items)-oldN)
	for i := newStart; i < len(items); i++ {
		last[items[i].id] = i
	}
	index := make(map[string]int32, len(last))
	var winners []int
	for i := range items {
		if i >= newStart && last[items[i].id] != i {
			continue
		}
		if i >= newStart {
			index[items[i].id] = int32(len(winners))
		}
		winners = append(winners, i)
	}
	indexOf := func(id string) int32 {
		if v, ok := index[id]; ok {
			return v
		}
		if old != nil {
			if j := old.lookup(id); j >= 0 {
				return int32(j)
			}
		}
		return -2
	}
	// The records.
	var blob []byte
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
	recs := make([]byte, len(winners)*ckRecSize)
	orphans := map[string]bool{}
	for _, p := range c.orphanParents {
		orphans[p] = true
	}
	for k, i := range winners {
		rc := items[i] // an old record keeps its parent index: the old records come first, in order
		if i >= newStart {
			rc.parentIdx = -1
			if rc.parent != "" {
				rc.parentIdx = indexOf(rc.parent)
			}
			if rc.parentIdx == -2 && !orphans[rc.parent] {
				orphans[rc.parent] = true
				c.orphanParents = append(c.orphanParents, rc.parent)
			}
		}
		putRec(recs[k*ckRecSize:(k+1)*ckRecSize], rc, put)
	}
	// Lines after at must not change what the history means: no id of the history used
	// again, no missing parent of the history supplied (the reads would all fall back).
	for _, e := range lines.entries {
		if e.at.Off < at {
			break
		}
		if _, ok := index[e.ID]; ok || orphans[e.ID] || (old != nil && old.lookup(e.ID) >= 0) {
			return nil
		}
	}
	table := idTable(recs, blob, len(winners))
	c.id, c.file = id, t.File
	c.lo, c.at = lines.afterHeader, at
	c.lines, c.headLine = first.Line-lines.headerLine-1, lines.headerLine
	var err error
	if c.headHash, err = hashRange(lines.file.ra, 0, c.lo); err != nil {
		return nil
	}
	if c.tailHash, err = hashRange(lines.file.ra, max(c.lo, at-ckTailLen), at); err != nil {
		return nil
	}
	for _, p := range samplePoints(c.lo, at) {
		h, err := hashRange(lines.file.ra, p, min(p+ckSampleLen, at))
		if err != nil {
			return nil
		}
		c.samples = append(c.samples, ckSample{off: p, hash: h})
	}
	for _, tg := range labelOrder {
		c.labels = append(c.labels, ckLabel{target: tg, label: labels[tg]})
	}
	for _, d := range t.Diagnostics {
		if d.Line <= c.headLine+c.lines {
			c.diags = append(c.diags, d)
		}
	}
	c.n, c.recs, c.blob, c.table = len(winners), recs, string(blob), table
	return &c
}
