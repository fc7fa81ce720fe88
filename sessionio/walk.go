package sessionio

// The walk from the leaf: Pi's getBranch, backwards, and only as far as the need asks. It
// follows parentIds through the history of the file, which is read for it as it goes, and
// notes what each entry settles: the latest compaction, the context's first entry, the model,
// the thinking level, a usage Pi's budget formula takes.

// history is a part of the file the walk reads back through: the lines from the end
// (backward.go) and, for a read from a checkpoint, the checkpoint's table of the lines before
// them (checkpointread.go). Parts are asked newest first; an entry's parent is in the part that gave
// the entry or in one before it.
type history interface {
	// parent returns e's parent when this part holds it, reading back as far as needed; nil
	// when it does not. walked is the walk's length so far (a part may bound it).
	parent(e *Entry, walked int) (*Entry, error)
}

// walker is the walk: the entries walked, leaf first, and what they settle.
type walker struct {
	parts []history // newest first
	at    int       // the part that gave the last entry walked
	known *known    // context, model and thinking are set here

	path       []*Entry
	compaction *Entry // the latest compaction on the path, once met
	window     int    // index in path of the context's first entry, -1 until known
	usage      bool   // a message with valid usage was walked before any compaction (NeedUsage)
	edited     bool   // a context edit was walked: a usage older than it settles nothing
	root       bool   // the walk reached a root: no parent, or one the file does not have
}

// start walks the leaf.
func (w *walker) start(leaf *Entry) { w.step(leaf) }

// walkOn follows parentIds from the last entry walked until need is met or the root is
// reached.
func (w *walker) walkOn(need Need) error {
	if len(w.path) == 0 {
		return nil
	}
	e := w.path[len(w.path)-1]
	for !w.met(need) {
		if e.ParentID == "" {
			w.root = true
			return nil
		}
		p, err := w.parent(e)
		if err != nil {
			return err
		}
		if p == nil { // an orphan: Pi's walk stops at a missing parent
			w.root = true
			return nil
		}
		w.step(p)
		e = p
	}
	return nil
}

// parent asks the parts, from the one that gave e on, for e's parent.
func (w *walker) parent(e *Entry) (*Entry, error) {
	for ; w.at < len(w.parts); w.at++ {
		if p, err := w.parts[w.at].parent(e, len(w.path)); p != nil || err != nil {
			return p, err
		}
	}
	return nil, nil
}

// met reports whether the walk has what need asks for.
func (w *walker) met(need Need) bool {
	if w.root {
		return true
	}
	if need&NeedRoot != 0 {
		return false
	}
	if need&NeedMessages != 0 && w.window < 0 {
		return false
	}
	// The usage settles the size when no compaction was met before it (everything walked is
	// then in the context); past a compaction, the context's start settles it.
	if need&NeedUsage != 0 && !w.usage && w.window < 0 {
		return false
	}
	if need&NeedModel != 0 && !w.known.model {
		return false
	}
	if need&NeedThinking != 0 && !w.known.thinking {
		return false
	}
	return true
}

// step adds e to the walk and notes what it settles.
func (w *walker) step(e *Entry) {
	w.path = append(w.path, e)
	// A usage settles the size for both Pis when it is one they take: Pi 1.x takes none that
	// is all zeros or older than a context edit (then the whole context is counted). For
	// Pi 0.73 this only reads on a little further than it had to.
	if w.compaction == nil && !w.edited && e.Type == TypeMessage && e.Message != nil && e.Message.HasValidUsage() && e.Message.Usage.ContextTokens() > 0 {
		w.usage = true
	}
	if e.Type == TypeContextEdit {
		w.edited = true
	}
	switch {
	case e.Type == TypeCompaction && w.compaction == nil:
		w.compaction = e
	case w.compaction != nil && w.window < 0 && e.ID == w.compaction.FirstKeptEntryID:
		w.window = len(w.path) - 1
		w.known.context = true // the context's bytes are all read: later lines keep none
	}
	switch e.Type {
	case TypeModelChange:
		w.known.model = true
	case TypeThinkingLevelChange:
		w.known.thinking = true
	case TypeMessage:
		if e.Message != nil && e.Message.Role == RoleAssistant {
			w.known.model = true
		}
	}
}

// rootward is the walk root first: a Tail's Path.
func (w *walker) rootward() []*Entry {
	n := len(w.path)
	out := make([]*Entry, n)
	for i, e := range w.path {
		out[n-1-i] = e
	}
	return out
}
