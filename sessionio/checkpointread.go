package sessionio

import "github.com/compactor-dev/compactor/sessionio/internal/checkpoint"
import "fmt"

// A checkpoint (internal/checkpoint) stands in for the lines before its end: the walk (walk.go) takes
// the history's entries from its table, and reads a history line only where the read still
// needs its content. Its whole-file facts join the read's (facts.go).

// errCheckpoint makes a read give up its checkpoint and read the file again without one.
type errCheckpoint struct{ reason string }

func (e *errCheckpoint) Error() string { return "checkpoint not usable: " + e.reason }

// checkpointHistory is a checkpoint's table as the walk's history of the lines [afterHeader, ck.at);
// the lines after them (lines) are read as always.
type checkpointHistory struct {
	ck    *checkpoint.Checkpoint
	file  *tailFile
	p     *tailParser
	known *known
	lines *backward

	checked   bool     // the lines after the checkpoint were checked against it (boundary)
	linesRead int      // the entries of those lines (all read by then)
	entries   []*Entry // the history's entries met, by record
	lineBuf   []byte   // a history line read for its content
	stubs     []Entry  // entries made from their record alone, allocated by the hundred
	// earliest is where the earliest history line read for its content starts (the file's
	// size: none).
	earliest int64
}

// fits checks the checkpoint against the file's start and end (backward.readHeader).
func (h *checkpointHistory) fits() error {
	if c := h.ck; c.Lo != h.lines.afterHeader || c.HeadLine != h.lines.headerLine || c.At >= h.lines.end {
		return &errCheckpoint{"the file's start or end does not match"}
	}
	return nil
}

// boundary runs once every line after the checkpoint is read: the lines must leave the
// history's meaning as it was (else the read starts again without the checkpoint).
func (h *checkpointHistory) boundary() error {
	if h.checked {
		return nil
	}
	h.checked = true
	for _, e := range h.lines.entries {
		if h.ck.Lookup(e.ID) >= 0 {
			return &errCheckpoint{fmt.Sprintf("line %s reuses an id of the history", e.ID)}
		}
	}
	for _, p := range h.ck.OrphanParents {
		if h.lines.byID[p] != nil {
			return &errCheckpoint{fmt.Sprintf("entry %s, missing from the history, was appended", p)}
		}
	}
	if h.ck.HasAssistant {
		h.known.assistant = true
	}
	h.linesRead = len(h.lines.entries)
	h.entries = make([]*Entry, h.ck.N)
	return nil
}

// parent returns e's parent from the history: for an entry of the lines after the
// checkpoint (whose parent they do not have), the record with its parent's id; for an entry
// of the history, its record's parent.
func (h *checkpointHistory) parent(e *Entry, walked int) (*Entry, error) {
	if e.record == 0 {
		if err := h.boundary(); err != nil {
			return nil, err
		}
		i := h.ck.Lookup(e.ParentID)
		if i < 0 {
			return nil, nil
		}
		return h.entry(i)
	}
	p := int(h.ck.Record(int(e.record - 1)).ParentIdx)
	if p < 0 {
		return nil, nil
	}
	if walked > h.ck.N+h.linesRead { // a history with a cycle: not one this package wrote
		return nil, &errCheckpoint{"its history has a parentId cycle"}
	}
	return h.entry(p)
}

// entry is the entry of record i: from its line when the read still needs its content
// (known.needsLine), else from the record alone (id, parent, type, timestamp, line: a place
// on the path).
func (h *checkpointHistory) entry(i int) (*Entry, error) {
	if e := h.entries[i]; e != nil {
		return e, nil
	}
	rc := h.ck.Record(i)
	var e *Entry
	if !h.known.needsLine(rc.Type, rc.Flags&checkpoint.Assistant != 0) {
		if len(h.stubs) == 0 { // stubs by the hundred: one allocation each
			h.stubs = make([]Entry, min(256, h.ck.N))
		}
		e, h.stubs = &h.stubs[0], h.stubs[1:]
		e.Type, e.ID, e.ParentID, e.Timestamp = rc.Type, rc.ID, rc.Parent, rc.Timestamp
	} else {
		if cap(h.lineBuf) < int(rc.Len) {
			h.lineBuf = make([]byte, rc.Len)
		}
		line := h.lineBuf[:rc.Len]
		if err := h.file.readAt(line, rc.Off); err != nil {
			return nil, err
		}
		h.p.skeleton = h.known.skeleton()
		h.p.quiet = true
		e = h.p.parse(line, 0, rc.Off, !h.known.context)
		h.p.quiet = false
		if e == nil || e.ID != rc.ID || e.ParentID != rc.Parent || e.Type != rc.Type {
			return nil, &errCheckpoint{fmt.Sprintf("line %d no longer holds entry %s", rc.Line, rc.ID)}
		}
		h.earliest = min(h.earliest, rc.Off)
	}
	e.Line = rc.Line
	e.at = Span{Off: rc.Off, Len: rc.Len}
	e.record = int32(i + 1)
	h.entries[i] = e
	return e, nil
}

// diagnosticsOf are the diagnostics of the history c covers.
func diagnosticsOf(c *checkpoint.Checkpoint) []Diagnostic {
	out := make([]Diagnostic, len(c.Diags))
	for i, d := range c.Diags {
		out[i] = Diagnostic(d)
	}
	return out
}
