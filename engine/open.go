package engine

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/outcome"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/sessionio/activity"
	"github.com/compactor-dev/compactor/sessionio/liveappend"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/tokenize"
)

// The opening. Every job (Compact, BranchSummary, Prepare) starts in open, which does in
// one order what decides whether the job goes on, before anything costs a summary:
//
//  0. its custom instructions, bounded (summarize.CheckInstructions);
//  1. its settings: the engine's with the request's laid over them (Settings);
//  2. one read of the file (Load): the path, the model, the counter;
//  3. the result that names the session and its model (Result, with the job's kind);
//  4. the format: compactor appends only to v3 files (Pi rewrites v1/v2 files);
//  5. an assistant message: Pi would write a file without one again from scratch;
//  6. the job's own lookups (its resolve step): the entry an earlier delivery of the same
//     request already wrote, the entries the request names;
//  7. the live state (live): a turn or a write in progress skips the job.
//
// Compact and Prepare then plan the cut under the guards they share (planCut). What
// differs between the kinds is in one table, jobKind.

// jobKind is what differs between the kinds of job at their opening.
type jobKind struct {
	name string // Result.Kind
	// counter, when set, is what the job counts with, whatever the settings say.
	counter string
	// notV3 (with the version for %d) and noAssistant are the reasons of the skips of
	// steps 4 and 5, in the kind's own words: results and events carry them, so they stay
	// as they are.
	notV3, noAssistant string
	// live: a turn or a write in progress skips the job (step 7). warnLiveDryRun: a dry
	// run goes on and says so in a warning.
	live, warnLiveDryRun bool
	// wholeTurns: the cut never splits a turn (cutpoint.WholeTurns; see Prepare).
	wholeTurns bool
	// overBudgetOnly: the job honours Request.OnlyOverBudget.
	overBudgetOnly bool
}

var (
	compactJob = jobKind{name: KindCompact,
		notV3:       "format v%d: compactor never appends to v1/v2 files (Pi would migrate and rewrite them)",
		noAssistant: "no assistant message yet (Pi would duplicate the file's content on its next write)",
		live:        true, warnLiveDryRun: true, overBudgetOnly: true}
	// A branch summary counts with Pi's estimate, as Pi sizes the branch it summarizes.
	branchJob = jobKind{name: KindBranchSummary, counter: tokenize.CounterEstimate,
		notV3:       "format v%d: compactor never appends to v1/v2 files",
		noAssistant: "no assistant message yet",
		live:        true}
	// A preparation is made for a live agent, mid-turn, before its session is over budget.
	prepareJob = jobKind{name: KindPrepare,
		notV3:       "format v%d: Pi rewrites such a file with new ids when it opens it",
		noAssistant: "no assistant message yet",
		wholeTurns:  true}
	// A base (base.go) is the model's summary of what an extract answered: made while the
	// agent works, like a preparation, written nowhere but the store.
	baseJob = jobKind{name: KindBase,
		notV3:       "format v%d: Pi rewrites such a file with new ids when it opens it",
		noAssistant: "no assistant message yet"}
)

// job is one request under way: what open made of it.
type job struct {
	kind  jobKind
	req   Request
	cfg   Settings        // the engine's settings with the request's over them
	file  *sessionio.File // the session file: every read and the append go through it
	src   *Source
	res   *Result
	start time.Time
}

// open starts a job of the kind (steps 1 to 7 above). It returns the job, or the result
// it ended with in its opening (a skip, or the entry an earlier delivery wrote), or an
// error. resolve (optional) is step 6: it returns a result to end the job with, or nil to
// go on.
func (e *Engine) open(kind jobKind, req Request, resolve func(*job) (*Result, error)) (*job, *Result, error) {
	start := time.Now()
	// Custom instructions are data quoted into the prompt (summarize.CheckInstructions);
	// what cannot be quoted safely is refused before anything is read or paid for.
	if err := summarize.CheckInstructions(req.Instructions); err != nil {
		return nil, nil, &InputError{Err: fmt.Errorf("instructions: %w", err)}
	}
	cfg := e.settings(req)
	if kind.counter != "" {
		cfg.Counter = kind.counter
	}
	file, err := e.file(req.File)
	if err != nil {
		return nil, nil, err
	}
	src, err := e.load(file, cfg)
	if err != nil {
		return nil, nil, err
	}
	if req.SessionID != "" && src.Session.Header.ID != req.SessionID {
		return nil, nil, &InputError{Err: fmt.Errorf("the session file holds session %s, the request names session %s", src.Session.Header.ID, req.SessionID)}
	}
	j := &job{kind: kind, req: req, cfg: cfg, file: file, src: src, start: start,
		res: &Result{Kind: kind.name, File: req.File, SessionID: src.Session.Header.ID, Model: src.Model.ModelID,
			ModelKnown: src.Model.Known, ContextWindow: src.Model.ContextWindow, Counter: src.Counter.Name()}}
	if v := src.Session.Version(); v != 3 {
		return nil, j.skip(fmt.Sprintf(kind.notV3, v)), nil
	}
	if !src.Session.HasAssistant() {
		return nil, j.skip(kind.noAssistant), nil
	}
	if e, what, since := newerPi(src); e != nil {
		return nil, j.skip(fmt.Sprintf("written by a newer Pi than this store follows: %s at line %d (entry %s) comes from Pi %s or later; compactor follows Pi %s here (setting pi-version)",
			what, e.Line, e.ID, since, src.Release)), nil
	}
	if resolve != nil {
		if res, err := resolve(j); res != nil || err != nil {
			return nil, res, err
		}
	}
	if kind.live {
		reason, cause, warnings := live(src, cfg)
		j.res.Warnings = warnings
		if reason != "" && !req.DryRun {
			return nil, j.busy(cause, reason), nil
		}
		if reason != "" && kind.warnLiveDryRun {
			j.res.Warnings = append(j.res.Warnings, "not compactable now: "+reason)
		}
	}
	return j, nil, nil
}

// newerPi returns the first entry of the session that only a Pi newer than the release of
// src writes (nil when none), what it is, and the behaviour's first release: before 0.86
// (SystemMessages) a usage entry, a system message or a compaction with a checkpoint; before
// 0.87 (ContextEdits) a context edit or a compaction that keeps nothing. Such a file comes
// from an agent running a newer Pi, which reads it differently; compactor writes nothing to
// it under the older rules.
func newerPi(src *Source) (*sessionio.Entry, string, pi.Release) {
	r := src.Release
	if r.Has(pi.ContextEdits) || src.Session == nil {
		return nil, "", r
	}
	for _, e := range src.Session.Entries {
		if !r.Has(pi.SystemMessages) {
			switch {
			case e.Type == sessionio.TypeUsage:
				return e, "a usage entry", pi.SystemMessages.Since()
			case e.IsMessage(sessionio.RoleSystem):
				return e, "a system message", pi.SystemMessages.Since()
			case e.Type == sessionio.TypeCompaction && e.SystemMessage != nil:
				return e, "a compaction with a systemMessage checkpoint", pi.SystemMessages.Since()
			}
		}
		switch {
		case e.Type == sessionio.TypeContextEdit:
			return e, "a context_edit entry", pi.ContextEdits.Since()
		case e.Type == sessionio.TypeCompaction && e.FirstKeptEntryID == e.ID:
			return e, "a retain-none compaction", pi.ContextEdits.Since()
		}
	}
	return nil, "", r
}

// settings are the engine's settings with the request's laid over them.
func (e *Engine) settings(req Request) Settings { return req.Settings.over(e.Settings).withDefaults() }

// load reads a request's file with its settings. The session's model (the latest
// model_change or assistant message on the path) sets the window and the encoding
// (configs.Resolve). An unknown model gets the catalog's default, and the result says so
// (modelKnown false); results name the model by the id the session uses.
func (e *Engine) load(file *sessionio.File, s Settings) (*Source, error) {
	return Load(file.Name(), s, LoadOptions{Cache: e.Cache, File: file})
}

// file is the session file at name as the engine opens it: beneath the root that holds
// it when the engine has roots (the deepest: a store inside another is its own), by name
// without roots. With roots, a name under none of them is refused.
func (e *Engine) file(name string) (*sessionio.File, error) {
	if len(e.Roots) == 0 {
		return sessionio.Named(name), nil
	}
	best, rel := "", ""
	for _, root := range e.Roots {
		r, err := filepath.Rel(root, name)
		if err != nil || !filepath.IsAbs(name) || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
			continue
		}
		if len(root) > len(best) {
			best, rel = root, r
		}
	}
	if best == "" {
		return nil, &sessionio.FileError{File: name, Err: fmt.Errorf("%w: not inside any store's root (%s)", sessionio.ErrUnsafeFile, strings.Join(e.Roots, ", "))}
	}
	return sessionio.Beneath(best, rel), nil
}

// end ends the job with o.
func (j *job) end(o outcome.Outcome) *Result {
	j.res.Outcome = o
	j.res.DurationMS = time.Since(j.start).Milliseconds()
	return j.res
}

// skip ends the job as skipped: an outcome, not a failure.
func (j *job) skip(reason string) *Result {
	j.res.Reason = reason
	return j.end(outcome.Skipped)
}

// busy ends the job as skipped for a session busy now, for cause.
func (j *job) busy(cause BusyCause, reason string) *Result {
	j.res.Busy = cause
	return j.skip(reason)
}

// found ends a job whose entry an earlier delivery already appended: done, or superseded
// when the entry is not on the session's path.
func (j *job) found(id string) *Result {
	j.res.Found = true
	if !onPath(j.src.Path, id) {
		return j.end(outcome.Superseded)
	}
	return j.end(outcome.Done)
}

// appended ends a job whose entry was appended: done, with the note to reload, or
// superseded when a live agent's lines landed around it.
func (j *job) appended(ap *liveappend.Appended) *Result {
	j.res.Intruders, j.res.Restores = ap.Intruders, ap.Restores
	if ap.Superseded() {
		j.res.Reason = supersededReason(ap)
		return j.end(outcome.Superseded)
	}
	j.res.Note = ReloadNote
	return j.end(outcome.Done)
}

// supersededReason says where a live agent's lines landed around an appended entry.
func supersededReason(ap *liveappend.Appended) string {
	switch {
	case len(ap.Intruders) > 0:
		return fmt.Sprintf("the agent appended %d entries just before this one (%v): it is on a side branch, and restore entry %v gives the leaf back to the agent; nothing was lost", len(ap.Intruders), ap.Intruders, ap.Restores)
	default:
		return fmt.Sprintf("the agent appended %d entries right after this one without reloading (%v): it is on a side branch; nothing was lost", len(ap.Followers), ap.Followers)
	}
}

// checkSummary is the guard every summary passes before it is used: it is not empty.
func checkSummary(summary string) error {
	if strings.TrimSpace(summary) == "" {
		return &GuardError{Reason: "the summarizer returned an empty summary"}
	}
	return nil
}

// planCut plans the job's compaction and checks what Compact and Prepare share: a plan
// (the branch is not compacted already), a session over budget when the request says so,
// something to summarize, and the cut invariants. A skip ends the job with its result.
func (j *job) planCut() (*cutpoint.Plan, cutpoint.Settings, *Result, error) {
	p, cs, err := plan(j.src, j.cfg)
	if err != nil {
		return nil, cs, nil, err
	}
	if j.kind.wholeTurns {
		p = cutpoint.WholeTurns(j.src.Path, p, cs, j.src.Counter)
	}
	res := j.res
	res.Plan, res.Policy, res.TokensBefore = p, p.Policy, p.TokensBefore
	res.OverBudget = cutpoint.OverBudget(p.TokensBefore, cs)
	if !p.Prepared && p.Reason != cutpoint.ReasonNothingToSummarize {
		return nil, cs, j.skip("already compacted: " + p.Reason), nil
	}
	if j.kind.overBudgetOnly && j.req.OnlyOverBudget && !res.OverBudget {
		return nil, cs, j.skip(fmt.Sprintf("under budget: %d tokens of %d (window %d - reserve %d)", p.TokensBefore, cs.ContextWindow-cs.ReserveTokens, cs.ContextWindow, cs.ReserveTokens)), nil
	}
	if !p.Prepared || len(p.Summarize) == 0 && len(p.Prefix) == 0 {
		return nil, cs, j.skip(fmt.Sprintf("nothing to summarize: the whole context (%d tokens) fits in keepRecentTokens %d", p.TokensBefore, cs.KeepRecentTokens)), nil
	}
	if v := cutpoint.CheckInvariants(j.src.Path, p); len(v) > 0 {
		return nil, cs, nil, &GuardError{Reason: fmt.Sprintf("the %s plan breaks a cut invariant (%s); try --policy nearest", p.Policy, v[0])}
	}
	return p, cs, nil, nil
}

// plan plans a loaded session with s's policy and token settings in its model's window.
func plan(src *Source, s Settings) (*cutpoint.Plan, cutpoint.Settings, error) {
	cs := src.Settings(s.KeepRecentTokens, s.ReserveTokens)
	p, err := planPath(src.Path, s.Policy, cs, src.Counter)
	return p, cs, err
}

// live checks what the file says about a running agent (docs/live-agents.md, "The rules";
// docs/architecture.md, "Live agents"): while a turn is in progress, or a line is being
// written, Pi will append again from its in-memory leaf and anything appended now ends on a
// side branch, so the request is skipped. A file left like that for AbandonedAfter is taken
// as abandoned: it is compacted, and an incomplete last line is only warned about (Pi skips
// it; a newline is written before the new entry). --force does not override this.
func live(src *Source, s Settings) (skip string, cause BusyCause, warnings []string) {
	act := activity.OnPath(src.Session, src.Path)
	age := time.Since(src.ModTime)
	recent := age < s.AbandonedAfter
	ago := age.Round(time.Second)
	if act.TornLine > 0 {
		if recent {
			return fmt.Sprintf("write in progress: line %d is incomplete (modified %s ago; a file left like this for %s is treated as abandoned)", act.TornLine, ago, s.AbandonedAfter), BusyWrite, nil
		}
		warnings = append(warnings, fmt.Sprintf("line %d is incomplete and ignored, as Pi ignores it; a newline is written before the new entry", act.TornLine))
	}
	if act.TurnInProgress {
		if recent {
			return fmt.Sprintf("turn in progress: %s (modified %s ago; a session left mid-turn for %s is treated as abandoned)", act.Reason, ago, s.AbandonedAfter), BusyTurn, nil
		}
		warnings = append(warnings, fmt.Sprintf("the session was left mid-turn %s ago (%s); compacting it as abandoned", ago, act.Reason))
	}
	if act.Retrying && age < piRetryWindow {
		return fmt.Sprintf("turn in progress: %s (modified %s ago; Pi's retries end within %s)", act.Reason, ago, piRetryWindow), BusyTurn, nil
	}
	return "", "", warnings
}

// piRetryWindow bounds Pi's automatic retries of an errored answer: 3 attempts by default,
// 2 s doubling between them, each a model request.
const piRetryWindow = 2 * time.Minute

// findAfter returns the last entry after expectLeaf's line (in file order) that matches:
// what an earlier delivery of a request made from that leaf wrote. It returns nil when the
// request carries no leaf, the leaf is still current, or there is none.
func findAfter(s *sessionio.Session, expectLeaf string, match func(*sessionio.Entry) bool) *sessionio.Entry {
	if expectLeaf == "" || expectLeaf == s.LeafID() {
		return nil
	}
	from := s.Get(expectLeaf)
	if from == nil {
		return nil
	}
	var found *sessionio.Entry
	for _, e := range s.Entries {
		if e.Line > from.Line && match(e) {
			found = e
		}
	}
	return found
}

// onPath reports whether the entry with id is on path.
func onPath(path []*sessionio.Entry, id string) bool {
	for _, e := range path {
		if e.ID == id {
			return true
		}
	}
	return false
}
