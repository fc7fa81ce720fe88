package console

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/operator"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/internal/visible"
)

// The operator's actions, from a form (the page comes back with what was done) or from
// /api/<action> (JSON): retry and purge a dead letter, pause and resume a store.

// ActionResult is what an action did (/api/<action>'s answer).
type ActionResult struct {
	Action string                `json:"action"`
	OK     bool                  `json:"ok"`
	Error  string                `json:"error,omitempty"`
	Retry  *operator.RetryResult `json:"retry,omitempty"`
	Pause  *fleetops.PauseRecord `json:"pause,omitempty"`
}

func (c *Console) action(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	isAPI := strings.HasPrefix(r.URL.Path, "/api/")
	who := c.who(r)
	if status, why := c.checkAction(r, who); status != 0 {
		c.log.Warn("console: action refused", "path", r.URL.Path, "remote", r.RemoteAddr, "why", why)
		if isAPI {
			writeJSON(w, status, ActionResult{Action: r.PathValue("action"), Error: why})
			return
		}
		http.Error(w, why, status)
		return
	}
	v, err := c.fleet(r.Context())
	if err != nil {
		http.Error(w, "the fleet cannot be read: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	act := r.PathValue("action")
	res := ActionResult{Action: act}
	back := r.PostFormValue("back")
	var done string
	switch act {
	case "retry", "purge":
		done, err = c.deadLetterAction(ctx, r, v, act, &res)
	case "pause", "resume":
		store := r.PostFormValue("store")
		var rec fleetops.PauseRecord
		rec, err = v.SetPaused(ctx, store, act == "pause", strings.TrimSpace(r.PostFormValue("reason")), c.actor(r))
		res.Pause = &rec
		done = fmt.Sprintf("store %s %sd", store, act)
	default:
		err = &httpError{http.StatusNotFound, "no action " + act}
	}
	if err != nil {
		res.Error = err.Error()
		c.log.Warn("console: action failed", "action", act, "err", err)
	} else {
		res.OK = true
		c.log.Info("console: action", "action", act, "by", c.actor(r), "done", done)
	}
	c.answerAction(w, r, isAPI, res, done, back, err)
}

// deadLetterAction retries or purges the dead letter the form names.
func (c *Console) deadLetterAction(ctx context.Context, r *http.Request, v *operator.FleetView, act string, res *ActionResult) (done string, err error) {
	store := r.PostFormValue("store")
	seq, perr := strconv.ParseUint(r.PostFormValue("seq"), 10, 64)
	if perr != nil || store == "" {
		return "", &httpError{http.StatusBadRequest, act + ": a dead letter's store and seq are needed"}
	}
	if act != "retry" {
		err = v.PurgeDeadLetter(ctx, store, seq)
		return fmt.Sprintf("dead letter %d of store %s purged", seq, store), err
	}
	// Instructions in the job are its publisher's text: passed on only when the
	// operator ticks so on the dead letter's page, and logged with who did.
	allow := r.PostFormValue("instructions") == "pass"
	rr, err := v.RetryDeadLetter(ctx, store, seq, allow)
	res.Retry = &rr
	done = fmt.Sprintf("dead letter %d of store %s retried: job %d queued", seq, store, rr.JobSeq)
	if err == nil && allow {
		c.log.Warn("console: dead letter retried with its job's summary instructions passed on", "store", store, "seq", seq, "by", c.actor(r))
	}
	return done, err
}

// answerAction answers an action: its result as JSON for /api, else a redirect back to
// the page it came from (back), saying what was done or why it failed.
func (c *Console) answerAction(w http.ResponseWriter, r *http.Request, isAPI bool, res ActionResult, done, back string, err error) {
	if isAPI {
		status := http.StatusOK
		if err != nil {
			status = http.StatusConflict
			if he, ok := err.(*httpError); ok {
				status = he.status
			}
		}
		writeJSON(w, status, res)
		return
	}
	if err != nil {
		done = res.Action + " failed: " + err.Error()
	}
	u, err := url.Parse(safeNext(back))
	if err != nil {
		u = &url.URL{Path: "/"}
	}
	q := u.Query()
	q.Set("done", done)
	u.RawQuery = q.Encode()
	http.Redirect(w, r, u.String(), http.StatusSeeOther)
}

// actor names who acted: the console's name and the caller's address.
func (c *Console) actor(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	name := c.opts.Name
	if name == "" {
		name = "console"
	}
	return name + " (operator at " + host + ")"
}

// api serves a page's data as JSON. Reading needs the viewer's or the operator's
// credentials (a bearer token, or the browser's session).
func (c *Console) api(f func(ctx context.Context, r *http.Request, v *operator.FleetView, who caller) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		who := c.who(r)
		if who.role == RoleNone {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "give the viewer's or the operator's token (Authorization: Bearer TOKEN)"})
			return
		}
		v, err := c.fleet(r.Context())
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "the fleet cannot be read: " + err.Error()})
			return
		}
		d, err := f(r.Context(), r, v, who)
		if err != nil {
			status := http.StatusInternalServerError
			if he, ok := err.(*httpError); ok {
				status = he.status
			}
			writeJSON(w, status, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, d)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func (c *Console) apiFleet(ctx context.Context, r *http.Request, v *operator.FleetView, who caller) (any, error) {
	_, d, err := c.fleetData(ctx, r, v, who)
	return d, err
}

func (c *Console) apiStore(ctx context.Context, r *http.Request, v *operator.FleetView, who caller) (any, error) {
	name := r.URL.Query().Get("store")
	if name == "" {
		return nil, badRequest("a store is named by ?store=STORE")
	}
	return c.storeOf(ctx, v, name, true)
}

func (c *Console) apiSession(ctx context.Context, r *http.Request, v *operator.FleetView, who caller) (any, error) {
	return c.sessionOf(r, v, who)
}

func (c *Console) apiZeroWait(ctx context.Context, r *http.Request, v *operator.FleetView, who caller) (any, error) {
	return c.zeroWaitOf(v), nil
}

func (c *Console) apiCharts(ctx context.Context, r *http.Request, v *operator.FleetView, who caller) (any, error) {
	return c.chartsOf(r, v)
}

func (c *Console) apiDeadLetter(ctx context.Context, r *http.Request, v *operator.FleetView, who caller) (any, error) {
	return c.deadLetterOf(ctx, r, v)
}

// The login page takes a token and gives a session cookie.
func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	c.renderLogin(w, r, http.StatusOK, "")
}

func (c *Console) renderLogin(w http.ResponseWriter, r *http.Request, status int, msg string) {
	p := page{Title: "Log in", Path: "/login", Now: time.Now().UTC(), Data: map[string]string{"Next": safeNext(r.FormValue("next")), "Error": msg}}
	var main strings.Builder
	_ = c.tmpl.ExecuteTemplate(&main, "login", p)
	p.Main = template.HTML(main.String()) //nolint:gosec // rendered by html/template
	var doc strings.Builder
	_ = c.tmpl.ExecuteTemplate(&doc, "layout", p)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(visible.HTML([]byte(doc.String())))
}

func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		return "/"
	}
	return next
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if !sameOrigin(r) {
		http.Error(w, "refused: the request comes from another site", http.StatusForbidden)
		return
	}
	role := c.tokens.roleOf(strings.TrimSpace(r.PostFormValue("token")))
	if role == RoleNone {
		c.log.Warn("console: login refused", "remote", r.RemoteAddr)
		c.renderLogin(w, r, http.StatusUnauthorized, "That token is neither the viewer's nor the operator's.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: c.sess.issue(role, time.Now()), Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: int(sessionLife.Seconds())})
	c.log.Info("console: logged in", "role", string(role), "remote", r.RemoteAddr)
	http.Redirect(w, r, safeNext(r.PostFormValue("next")), http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "refused: the request comes from another site", http.StatusForbidden)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
