package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/internal/visible"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/wire"
)

// page is what a page's template gets.
type page struct {
	Title    string
	Role     Role
	Operator bool
	CSRF     string
	Path     string
	Now      time.Time
	Data     any
	Main     template.HTML // the content, in the layout
	Notice   string        // what the last action did (?done=)
}

// dataFunc builds a page's data.
type dataFunc func(ctx context.Context, r *http.Request, v *pipeline.FleetView, who caller) (title string, data any, err error)

// httpError is an error with its status.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func notFound(format string, args ...any) error {
	return &httpError{http.StatusNotFound, fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// page serves a page: its content alone when the live script asks (X-Console-Partial),
// else in the layout. Without credentials, the login page.
func (c *Console) page(name string, data dataFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		who := c.who(r)
		if who.role == RoleNone {
			if r.Header.Get("X-Console-Partial") != "" {
				http.Error(w, "log in again", http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		v, err := c.fleet(r.Context())
		if err != nil {
			c.fail(w, r, who, &httpError{http.StatusServiceUnavailable, "the fleet cannot be read: " + err.Error()})
			return
		}
		title, d, err := data(r.Context(), r, v, who)
		if err != nil {
			c.fail(w, r, who, err)
			return
		}
		p := c.pageOf(r, who, title, d)
		var main bytes.Buffer
		if err := c.tmpl.ExecuteTemplate(&main, name, p); err != nil {
			c.log.Error("console: render", "page", name, "err", err)
			http.Error(w, "render failed", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if r.Header.Get("X-Console-Partial") != "" {
			_, _ = w.Write(visible.HTML(main.Bytes()))
			return
		}
		p.Main = template.HTML(main.String()) //nolint:gosec // rendered by html/template above
		var doc bytes.Buffer
		if err := c.tmpl.ExecuteTemplate(&doc, "layout", p); err != nil {
			c.log.Error("console: render", "page", "layout", "err", err)
			http.Error(w, "render failed", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write(visible.HTML(doc.Bytes()))
	}
}

func (c *Console) pageOf(r *http.Request, who caller, title string, d any) page {
	p := page{Title: title, Role: who.role, Operator: who.role == RoleOperator, Path: r.URL.Path, Now: time.Now().UTC(), Data: d,
		Notice: r.URL.Query().Get("done")}
	if who.nonce != "" {
		p.CSRF = c.sess.csrf(who.nonce)
	}
	return p
}

// fail answers an error: a page with the message (or the bare message to the live script).
func (c *Console) fail(w http.ResponseWriter, r *http.Request, who caller, err error) {
	status := http.StatusInternalServerError
	var he *httpError
	if errors.As(err, &he) {
		status = he.status
	}
	if status >= 500 {
		c.log.Warn("console: request failed", "path", r.URL.Path, "err", err)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	p := c.pageOf(r, who, "Error", err.Error())
	var main bytes.Buffer
	_ = c.tmpl.ExecuteTemplate(&main, "error", p)
	if r.Header.Get("X-Console-Partial") != "" {
		_, _ = w.Write(visible.HTML(main.Bytes()))
		return
	}
	p.Main = template.HTML(main.String()) //nolint:gosec // rendered by html/template
	var doc bytes.Buffer
	_ = c.tmpl.ExecuteTemplate(&doc, "layout", p)
	_, _ = w.Write(visible.HTML(doc.Bytes()))
}

// FleetPage is the fleet page's data (and /api/fleet's).
type FleetPage struct {
	pipeline.FleetSnapshot
	Versions []VersionCount `json:"versions"`
	Warnings []string       `json:"warnings"`
}

// VersionCount is how many workers run a version.
type VersionCount struct {
	Version string `json:"version"`
	Workers int    `json:"workers"`
}

func (c *Console) fleetData(ctx context.Context, r *http.Request, v *pipeline.FleetView, who caller) (string, any, error) {
	snap := v.Snapshot()
	fp := FleetPage{FleetSnapshot: snap, Versions: []VersionCount{}, Warnings: []string{}}
	seen := map[string]map[string]bool{}
	for _, st := range snap.Stores {
		for _, b := range st.Workers {
			ver := b.Version
			if ver == "" {
				ver = "unknown"
			}
			if seen[ver] == nil {
				seen[ver] = map[string]bool{}
			}
			seen[ver][b.Worker] = true
		}
		if len(st.Workers) == 0 {
			fp.Warnings = append(fp.Warnings, fmt.Sprintf("store %s: no worker has reported in the last 30 s", st.Store))
		}
		if st.Paused != nil {
			fp.Warnings = append(fp.Warnings, fmt.Sprintf("store %s is paused: its workers take no jobs", st.Store))
		}
	}
	for ver, ws := range seen {
		fp.Versions = append(fp.Versions, VersionCount{Version: ver, Workers: len(ws)})
	}
	slices.SortFunc(fp.Versions, func(a, b VersionCount) int { return strings.Compare(a.Version, b.Version) })
	if len(fp.Versions) > 1 {
		fp.Warnings = append(fp.Warnings, "the workers run different versions")
	}
	return "Fleet", fp, nil
}

// StorePage is a store's page data (and /api/store's).
type StorePage struct {
	pipeline.StoreView
	Queued      []pipeline.QueuedJob        `json:"queued"`
	QueuedErr   string                      `json:"queuedError,omitempty"`
	Recent      []wire.Event                `json:"recent"`
	DeadLetters []pipeline.DeadLetterRecord `json:"deadLetters"`
	// DeadLettersShown: the first of DeadLetters shown on the page (all in /api).
	DeadLettersShown int  `json:"-"`
	HasFiles         bool `json:"hasFiles"`
}

const (
	pageJobs        = 50
	pageDeadLetters = 100
)

func (c *Console) storeOf(ctx context.Context, v *pipeline.FleetView, name string, all bool) (*StorePage, error) {
	snap := v.Snapshot()
	var sv *pipeline.StoreView
	for i := range snap.Stores {
		if snap.Stores[i].Store == name {
			sv = &snap.Stores[i]
		}
	}
	if sv == nil {
		return nil, notFound("no store %q in this fleet", name)
	}
	sp := &StorePage{StoreView: *sv, Recent: []wire.Event{}, DeadLetters: []pipeline.DeadLetterRecord{}}
	_, sp.HasFiles = c.opts.Stores[name]
	qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	q, err := v.QueuedJobs(qctx, name, pageJobs)
	if err != nil {
		sp.QueuedErr = err.Error()
	}
	sp.Queued = q
	if sp.Queued == nil {
		sp.Queued = []pipeline.QueuedJob{}
	}
	if x := v.Events(); x != nil {
		sp.Recent = x.Recent(name, pageJobs)
	}
	if dls := v.DeadLetters(name); dls != nil {
		sp.DeadLetters = dls
	}
	sp.DeadLettersShown = len(sp.DeadLetters)
	if !all && sp.DeadLettersShown > pageDeadLetters {
		sp.DeadLettersShown = pageDeadLetters
	}
	return sp, nil
}

func (c *Console) storeData(ctx context.Context, r *http.Request, v *pipeline.FleetView, who caller) (string, any, error) {
	name := r.PathValue("store")
	sp, err := c.storeOf(ctx, v, name, false)
	if err != nil {
		return "", nil, err
	}
	return "Store " + name, sp, nil
}

// SessionPage is a session's page data (and /api/session's).
type SessionPage struct {
	Store     string        `json:"store"`
	SessionID string        `json:"sessionId"`
	Events    []wire.Event  `json:"events"`
	Jobs      []JobHistory  `json:"jobs"`
	File      *SessionFile  `json:"file,omitempty"`
	FileErr   string        `json:"fileError,omitempty"`
	Chart     template.HTML `json:"-"`
}

// JobHistory is one job of a session: its events (attempts and the final one).
type JobHistory struct {
	JobSeq   uint64       `json:"jobSeq"`
	Kind     string       `json:"kind"`
	Outcome  string       `json:"outcome"`
	Reason   string       `json:"reason,omitempty"`
	Attempts int          `json:"attempts"`
	Events   []wire.Event `json:"events"`
}

func (c *Console) sessionOf(r *http.Request, v *pipeline.FleetView, who caller) (*SessionPage, error) {
	store, id := r.URL.Query().Get("store"), r.URL.Query().Get("id")
	if store == "" || id == "" {
		return nil, badRequest("a session is named by ?store=STORE&id=SESSION_ID")
	}
	sp := &SessionPage{Store: store, SessionID: id, Events: []wire.Event{}, Jobs: []JobHistory{}}
	if x := v.Events(); x != nil {
		sp.Events = x.Session(store, id)
	}
	var path string
	for _, ev := range sp.Events {
		path = ev.Path
		if n := len(sp.Jobs); n == 0 || sp.Jobs[n-1].JobSeq != ev.JobSeq {
			sp.Jobs = append(sp.Jobs, JobHistory{JobSeq: ev.JobSeq, Kind: ev.Kind})
		}
		j := &sp.Jobs[len(sp.Jobs)-1]
		j.Events = append(j.Events, ev)
		j.Attempts = max(j.Attempts, ev.Attempt)
		j.Outcome, j.Reason = string(ev.Outcome), ev.Reason
	}
	slices.Reverse(sp.Jobs)
	if dir, ok := c.opts.Stores[store]; ok && path != "" {
		f, err := readSessionFile(dir, path, who.role == RoleOperator)
		if err != nil {
			sp.FileErr = err.Error()
		} else {
			sp.File = f
			sp.Chart = tokenChart(f)
		}
	} else if !ok {
		sp.FileErr = "this console does not read store " + store + "'s files (give it --store " + store + "=DIR on a host that has them)"
	}
	return sp, nil
}

func (c *Console) sessionData(ctx context.Context, r *http.Request, v *pipeline.FleetView, who caller) (string, any, error) {
	sp, err := c.sessionOf(r, v, who)
	if err != nil {
		return "", nil, err
	}
	return "Session " + sp.SessionID, sp, nil
}

// ZeroWaitPage is the zero-wait page's data (and /api/zero-wait's).
type ZeroWaitPage struct {
	Since  time.Time            `json:"since"`
	Counts []pipeline.HookCount `json:"counts"`
	Totals []HookTotal          `json:"totals"`
	Recent []pipeline.HookSeen  `json:"recent"`
}

// HookTotal sums a store's hooks by what answered them.
type HookTotal struct {
	Store     string  `json:"store"`
	Hooks     int     `json:"hooks"`
	Prepared  int     `json:"prepared"`
	Extract   int     `json:"extract"`
	Pi        int     `json:"pi"`
	BlockedMs float64 `json:"blockedMs"`
}

func (c *Console) zeroWaitOf(v *pipeline.FleetView) *ZeroWaitPage {
	zp := &ZeroWaitPage{Counts: []pipeline.HookCount{}, Totals: []HookTotal{}, Recent: []pipeline.HookSeen{}}
	h := v.Hooks()
	if h == nil {
		return zp
	}
	zp.Since, zp.Counts, zp.Recent = h.Since(), h.Counts(), h.Recent(pageJobs)
	idx := map[string]int{}
	for _, c := range zp.Counts {
		i, ok := idx[c.Store]
		if !ok {
			i = len(zp.Totals)
			idx[c.Store] = i
			zp.Totals = append(zp.Totals, HookTotal{Store: c.Store})
		}
		t := &zp.Totals[i]
		t.Hooks += c.Hooks
		t.BlockedMs += c.BlockedMs
		switch c.Result {
		case wire.HookResultPrepared:
			t.Prepared += c.Hooks
		case wire.HookResultExtract:
			t.Extract += c.Hooks
		case wire.HookResultPi:
			t.Pi += c.Hooks
		}
	}
	return zp
}

func (c *Console) zeroWaitData(ctx context.Context, r *http.Request, v *pipeline.FleetView, who caller) (string, any, error) {
	return "Zero-wait", c.zeroWaitOf(v), nil
}

// DeadLetterPage is a dead letter in full.
type DeadLetterPage struct {
	pipeline.DeadLetterRecord
	JobJSON string `json:"-"`
	// Instructions are the summary instructions its job carries: a retry passes them on
	// only when the operator says so.
	Instructions string `json:"instructions,omitempty"`
}

func (c *Console) deadLetterOf(ctx context.Context, r *http.Request, v *pipeline.FleetView) (*DeadLetterPage, error) {
	store := r.URL.Query().Get("store")
	seq, err := strconv.ParseUint(r.URL.Query().Get("seq"), 10, 64)
	if err != nil || store == "" {
		return nil, badRequest("a dead letter is named by ?store=STORE&seq=N (a sequence is its store's account's)")
	}
	rec, err := v.DeadLetter(ctx, store, seq)
	if err != nil {
		return nil, notFound("%v", err)
	}
	dp := &DeadLetterPage{DeadLetterRecord: rec}
	if job, err := wire.DecodeJob(rec.Job); err == nil {
		dp.Instructions = job.Instructions
	}
	if len(rec.Job) > 0 {
		var b bytes.Buffer
		if json.Indent(&b, rec.Job, "", "  ") == nil {
			dp.JobJSON = b.String()
		}
	} else {
		dp.JobJSON = rec.JobText
	}
	return dp, nil
}

func (c *Console) deadLetterData(ctx context.Context, r *http.Request, v *pipeline.FleetView, who caller) (string, any, error) {
	dp, err := c.deadLetterOf(ctx, r, v)
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("Dead letter %d", dp.Seq), dp, nil
}
