package engine

import (
	"fmt"
	"github.com/compactor-dev/compactor/sessionio/picontext"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/configs"
	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/tokenize"
)

// Source is one read of a session file with everything planning needs: the path to the
// leaf, the session's model resolved in the catalog (configs.Resolve) and the counter for
// its encoding. Load makes it; Compact, BranchSummary, CheckBudget, Plan (and through it
// `compactor plan` and `inspect`) and the experiments all start from one, so every caller
// sees the same window, encoding and counts for a session.
type Source struct {
	File string
	// Session is the whole file; nil after a tail read (ReadBudget, ReadPath), which sets
	// Tail instead.
	Session *sessionio.Session
	Tail    *sessionio.Tail
	// ModTime is the file's modification time, taken before the read: if the file changes
	// in between, the content read is at least as new as the time, which errs on the side
	// of "active".
	ModTime time.Time
	// Path is the current path, root first: to the file's leaf, or to LoadOptions.Leaf.
	Path []*sessionio.Entry
	// ModelRef is the model the path names (nil when it names none).
	ModelRef *sessionio.ModelRef
	Model    configs.Resolved
	// Counter counts with the session's encoding, through LoadOptions.Cache when one is
	// given.
	Counter tokenize.Counter
	// Release is the Pi release whose rules the session is read, planned and written by.
	Release pi.Release
	// Override is Pi's compaction.modelOverrides entry (from 0.86, ModelOverrides) for the session's model (nil:
	// none, or a Pi without them).
	Override *ModelOverride
}

// LoadOptions say how much of a session file to read, and for which leaf. They are not
// settings: the zero value is the whole read at the file's leaf.
type LoadOptions struct {
	// Leaf plans for this entry instead of the file's leaf (the last entry line). With
	// Leaf, the whole file is read whatever Read says.
	Leaf string
	// Read is how much of the file is read (ReadAll by default).
	Read Read
	// Cache, if set, remembers counts per entry across loads. ReadPath counts with a memo
	// of its own instead: with Cache, the whole file is read.
	Cache *tokenize.Cache
	// Checkpoints (ReadPath), if set, are read and written (sessionio.Checkpoints): the
	// history before a checkpoint is not read again.
	Checkpoints *sessionio.Checkpoints
	// File, if set, is the file every read goes through (a job's: confined beneath its
	// store's root, the file of the first read); by name otherwise.
	File *sessionio.File
}

// Read is how much of a session file Load reads.
type Read int

const (
	// ReadAll reads the whole file: Source.Session holds it.
	ReadAll Read = iota
	// ReadBudget reads the file from its end only as far as the context's size and the
	// model need (sessionio.ReadTail with NeedUsage: back to the newest answer whose usage
	// Pi's budget formula takes, or to the context's start): Path then starts inside the
	// context, and Session is nil, Tail set. Enough to count a context (budget checks);
	// neither a long history nor a long context before that answer costs anything.
	ReadBudget
	// ReadPath is for callers that need the path and the plan, not the whole session (no
	// tree, no other branches). The file is read from its end: the context's messages are
	// decoded (their bytes are not kept) while the rest of the path back to the root is
	// only validated and walked, concurrently with the counting; Session is nil, Tail set.
	ReadPath
)

// Load reads file as o says, takes its path, resolves its model and picks the counter s
// names, for the window s gives (0: the catalog's).
func Load(file string, s Settings, o LoadOptions) (*Source, error) {
	s = s.withDefaults()
	d := s.Release()
	f := o.File
	if f == nil {
		f = sessionio.Named(file)
	}
	if err := f.CheckLoads(d); err != nil {
		return nil, err
	}
	if o.Read == ReadPath && o.Leaf == "" && o.Cache == nil {
		src, err := loadPath(f, s.Counter, s.ContextWindow, d, o.Checkpoints)
		if err == nil {
			src.Override = s.override(src.ModelRef, d)
		}
		return src, err
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	src := &Source{File: file, ModTime: fi.ModTime(), Release: d}
	if o.Read == ReadBudget && o.Leaf == "" {
		t, err := f.ReadTail(sessionio.NeedUsage|sessionio.NeedModel, sessionio.TailOptions{DecodeContent: true})
		if err != nil {
			return nil, err
		}
		src.Tail, src.Path = t, t.Path
	} else {
		sess, err := f.Read(sessionio.Options{})
		if err != nil {
			return nil, err
		}
		path, err := sess.Path(o.Leaf)
		if err != nil {
			if o.Leaf != "" {
				return nil, &InputError{Err: err} // the file has no entry Leaf
			}
			return nil, err
		}
		src.Session, src.Path = sess, path
	}
	if err := src.resolve(s.Counter, s.ContextWindow, o.Cache); err != nil {
		return nil, err
	}
	src.Override = s.override(src.ModelRef, d)
	return src, nil
}

// resolve fills the model (the latest model_change or assistant message on the path, as
// Pi's context takes it) and the counter for its encoding.
func (src *Source) resolve(counter string, contextWindow int, cache *tokenize.Cache) error {
	if m := picontext.ModelOf(src.Path); m != nil {
		src.ModelRef = m
		src.Model = configs.Resolve(m.Provider, m.ModelID, contextWindow)
	} else {
		src.Model = configs.Resolve("", "", contextWindow)
	}
	tc, err := tokenize.NewFor(counter, src.Model.Encoding(), src.Release)
	if err != nil {
		return err
	}
	src.Counter = tc
	if cache != nil {
		src.Counter = cached{c: tc, cache: cache}
	}
	return nil
}

// Settings are the cut-point settings for this session: keepRecentTokens and
// reserveTokens as given, unless Pi 1.x's override for the session's model sets them, and
// the window of its model.
func (src *Source) Settings(keepRecentTokens, reserveTokens int) cutpoint.Settings {
	if o := src.Override; o != nil {
		if o.KeepRecentTokens != nil {
			keepRecentTokens = *o.KeepRecentTokens
		}
		if o.ReserveTokens != nil {
			reserveTokens = *o.ReserveTokens
		}
	}
	return cutpoint.Settings{KeepRecentTokens: keepRecentTokens, ReserveTokens: reserveTokens, ContextWindow: src.Model.ContextWindow, Release: src.Release}
}

// planPath plans path with the named policy. Every plan compactor makes goes through here.
func planPath(path []*sessionio.Entry, policy string, cs cutpoint.Settings, c cutpoint.Counter) (*cutpoint.Plan, error) {
	pol, err := cutpoint.ByName(policy)
	if err != nil {
		return nil, err
	}
	p, err := pol.Plan(path, cs, c)
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	return p, nil
}

// Planned is a session and its plan.
type Planned struct {
	*Source
	Settings cutpoint.Settings
	Plan     *cutpoint.Plan
}

// OverBudget reports whether the planned context is over its model's budget.
func (p *Planned) OverBudget() bool { return cutpoint.OverBudget(p.Plan.TokensBefore, p.Settings) }

// Plan reads file as o says and plans it as Compact would, without summarizing or
// writing: the entry point of `compactor plan` and `inspect`. It needs no summarizer.
//
// s's fields take their defaults as everywhere (Settings), except KeepRecentTokens and
// ReserveTokens, which Plan takes as given, 0 included: a person may ask `compactor plan`
// where a cut keeping nothing it need not falls, and the command's flags give Pi's
// defaults when not set.
func Plan(file string, s Settings, o LoadOptions) (*Planned, error) {
	src, err := Load(file, s, o)
	if err != nil {
		return nil, err
	}
	pd := &Planned{Source: src, Settings: src.Settings(s.KeepRecentTokens, s.ReserveTokens)}
	pd.Plan, err = planPath(src.Path, s.withDefaults().Policy, pd.Settings, src.Counter)
	if err != nil {
		return nil, err
	}
	return pd, nil
}

// loadPath is Load for ReadPath: the tail read of the context, then the rest of
// the path to the root (the plan's indices count from it), read while the context's
// messages are counted once each on every core (tokenize.Memo).
//
// With checkpoints the rest of the file is read too (its whole-file facts are kept), so that a
// checkpoint can be written: the next plan of the file reads only what was appended.
func loadPath(f *sessionio.File, counter string, contextWindow int, d pi.Release, cks *sessionio.Checkpoints) (*Source, error) {
	if strings.EqualFold(strings.TrimSpace(counter), tokenize.CounterTiktoken) {
		tokenize.Preload(tokenize.O200KBase) // most models' encoding: it loads while the file is read
	}
	file := f.Name()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	o := sessionio.TailOptions{DecodeContent: true, LeaveMessagesOnDisk: true, Checkpoints: cks}
	rest := sessionio.NeedRoot
	if cks != nil && cks.Dir != "" {
		o.FileLater, rest = true, rest|sessionio.NeedFile
	}
	t, err := f.ReadTail(sessionio.NeedMessages|sessionio.NeedModel, o)
	if err != nil {
		return nil, err
	}
	src := &Source{File: file, ModTime: fi.ModTime(), Tail: t, Path: t.Path, Release: d}
	done := make(chan error, 1)
	go func() { done <- t.Extend(rest) }()
	if err := src.resolve(counter, contextWindow, nil); err != nil {
		<-done
		return nil, err
	}
	memo := tokenize.NewMemo(src.Counter)
	var msgs []*sessionio.Message
	for _, e := range src.Path[sessionio.ContextStart(src.Path):] {
		if e.Message != nil {
			msgs = append(msgs, e.Message)
		}
	}
	memo.Warm(msgs, 0)
	src.Counter = memo
	if err := <-done; err != nil {
		return nil, err
	}
	src.Path = t.Path
	return src, nil
}
