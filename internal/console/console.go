// Package console is compactor's web console: the fleet, a store, a session, the
// zero-wait hooks and charts over the last hours, read from what the fleet records (a
// pipeline.FleetView), with the operator's actions (retry and purge a dead letter, pause
// and resume a store). `compactor run` serves it on its HTTP listener beside /metrics;
// `compactor console` serves it alone, with the operator's NATS credentials.
//
// Its pages are rendered on the server and work without JavaScript; a small script,
// embedded like the style sheet, refreshes the page's content every second. Nothing is
// loaded from another origin (the Content-Security-Policy allows none), and the same
// data is served as JSON under /api/ (docs/json-output.md).
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/compactor-dev/compactor/operator"
)

//go:embed assets
var assets embed.FS

// Options configure a Console.
type Options struct {
	// Open opens the fleet view the console reads; it is called on the first request
	// (and again after a failure) and its view kept. A `compactor run` opens it on its
	// own connection once started.
	Open func(ctx context.Context) (*operator.FleetView, error)
	// Tokens are the viewer's and the operator's.
	Tokens Tokens
	// Stores are the directories of the stores this process can read (a session's
	// compactions and token chart come from its file); a store without one shows its
	// events only.
	Stores map[string]string
	// Name says who acts in the records an action writes (a pause's "by").
	Name   string
	Logger *slog.Logger
}

// Console serves the pages. It is an http.Handler.
type Console struct {
	opts   Options
	tokens Tokens
	sess   *sessions
	log    *slog.Logger
	tmpl   *template.Template
	mux    *http.ServeMux
	static http.Handler

	mu   sync.Mutex
	view *operator.FleetView
}

// New makes a console.
func New(opts Options) (*Console, error) {
	if opts.Open == nil {
		return nil, errors.New("console: Open is required")
	}
	if opts.Tokens.Viewer == "" && opts.Tokens.Operator == "" {
		return nil, errors.New("console: no token: nobody could log in")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tmpl, err := template.New("").Funcs(funcs).ParseFS(assets, "assets/*.html")
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		return nil, err
	}
	c := &Console{opts: opts, tokens: opts.Tokens, sess: newSessions(), log: log, tmpl: tmpl,
		static: http.StripPrefix("/static/", http.FileServerFS(static))}
	c.routes()
	return c, nil
}

// Close closes the fleet view.
func (c *Console) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.view != nil {
		c.view.Close()
		c.view = nil
	}
}

// Fleet returns the fleet view, opening it on first use.
func (c *Console) Fleet(ctx context.Context) (*operator.FleetView, error) { return c.fleet(ctx) }

// fleet returns the fleet view, opening it on first use.
func (c *Console) fleet(ctx context.Context) (*operator.FleetView, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.view != nil {
		return c.view, nil
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := c.opts.Open(octx)
	if err != nil {
		return nil, err
	}
	c.view = v
	return v, nil
}

// csp allows this origin only, and no markup written by a script but through the live
// view's one Trusted Types policy (console.js).
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; require-trusted-types-for 'script'; trusted-types console"

// securityHeaders are on every answer: no other origin, no framing, no sniffing, no
// referrer to another origin (the console's own forms keep their Origin header).
func securityHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

// ServeHTTP serves a request.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w)
	c.mux.ServeHTTP(w, r)
}

func (c *Console) routes() {
	m := http.NewServeMux()
	m.Handle("GET /static/", c.static)
	m.HandleFunc("GET /login", c.loginPage)
	m.HandleFunc("POST /login", c.login)
	m.HandleFunc("POST /logout", c.logout)
	m.HandleFunc("GET /{$}", c.page("fleet", c.fleetData))
	m.HandleFunc("GET /store/{store}", c.page("store", c.storeData))
	m.HandleFunc("GET /session", c.page("session", c.sessionData))
	m.HandleFunc("GET /zero-wait", c.page("zerowait", c.zeroWaitData))
	m.HandleFunc("GET /charts", c.page("charts", c.chartsData))
	m.HandleFunc("GET /deadletter", c.page("deadletter", c.deadLetterData))
	m.HandleFunc("POST /action/{action}", c.action)
	m.HandleFunc("GET /api/fleet", c.api(c.apiFleet))
	m.HandleFunc("GET /api/store", c.api(c.apiStore))
	m.HandleFunc("GET /api/session", c.api(c.apiSession))
	m.HandleFunc("GET /api/zero-wait", c.api(c.apiZeroWait))
	m.HandleFunc("GET /api/charts", c.api(c.apiCharts))
	m.HandleFunc("GET /api/deadletter", c.api(c.apiDeadLetter))
	m.HandleFunc("POST /api/{action}", c.action)
	c.mux = m
}
