package cli

import (
	"context"
	"errors"
	"fmt"
	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/operator"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/compactor-dev/compactor/internal/cli/command"
	"github.com/compactor-dev/compactor/internal/console"
	"github.com/compactor-dev/compactor/pipeline"
)

func init() {
	command.Register(&command.Command{Name: "console", Summary: "serve the web console of a whole fleet (the operator's NATS credentials), with /metrics for a central scraper", Run: runConsole})
}

const consoleHelp = `
Serve the web console for a fleet, for an operator who runs no worker: the fleet (stores
and hosts: workers, versions, queues and their oldest job, running jobs, dead letters,
spend, pauses), each store (queued, running and recent jobs, dead letters with show,
retry and purge, pause and resume), each session (every job and attempt; its compactions
and a chart of its tokens when --store gives its directory), the zero-wait hooks, and
charts over the last hours. /api/... serves the same as JSON (docs/json-output.md);
/metrics exports the fleet's figures no single worker has (the oldest job's age, the
workers per store and per version) for a central scraper.

Each host of a fleet has a NATS account of its own (docs/security.md): with --credentials
DIR (compactor auth's), the console reads every account of DIR/fleet.json, each with its
operator's key, and shows the whole fleet; with one account's operator key (--nkey,
--creds), that account's stores. A record of an account is shown only for the stores
fleet.json gives that account. Reading a page needs
the console's viewer or operator token, acting the operator's: the tokens are read from
--token-dir (console-viewer.token, console-operator.token), generated there on first use
(mode 0600; docs/operations.md, "The console"). It listens on the loopback interface
unless --remote is given (then put it behind TLS: the tokens travel in its requests).

Examples:
  compactor console --nats-url nats://nats.internal:4222 --credentials /etc/nats/compactor
  compactor console --nats-url nats://nats.internal:4222 --nkey operator-hostA.nk
  compactor console --listen 127.0.0.1:9470 --store team=/srv/sessions/team`

func runConsole(ctx context.Context, env *Env) error {
	fs := command.NewFlagSet(env, "console", "[flags]", consoleHelp)
	var n access.NATSConfig
	command.BindNATSFlags(fs.FlagSet, &n, env.Getenv)
	ops := command.BindOpsFlags(fs.FlagSet, env, command.OpsClient)
	configFile := command.ConfigFlag(fs.FlagSet, env)
	listen := fs.String("listen", "127.0.0.1:9470", "the `ADDRESS` to serve the console on (loopback unless --remote)")
	remote := fs.Bool("remote", false, "allow --listen on an address that is not loopback")
	tokenDir := fs.String("token-dir", "", "the `DIR` of the console's tokens (default: --data-dir)")
	metricsTokenFile := fs.String("metrics-token-file", "", "a file holding the bearer token /metrics requires (a central scraper's credentials_file)")
	credentials := fs.String("credentials", "", "the fleet's credentials directory (compactor auth --credentials): read every account of its fleet.json, each with its operator's seed")
	var stores command.StoreFlag
	fs.Var(&stores, "store", "a store's directory on this host, `NAME=DIR`, to show its sessions' compactions and token charts (repeatable)")
	logFormat := fs.String("log-format", "", "log format text|json (default: text on a terminal, json otherwise)")
	logLevel := fs.String("log-level", "info", "log level debug|info|warn|error")
	if _, err := fs.ParseConfigured(env.Args, configFile, false); err != nil {
		return err
	}
	if err := checkListen(*listen, *remote, "--listen", "--remote"); err != nil {
		return err
	}
	log, err := command.NewLogger(env.Stderr, *logFormat, *logLevel, new(slog.LevelVar))
	if err != nil {
		return err
	}
	dir := *tokenDir
	if dir == "" {
		dir = ops.DataDir()
	}
	tokens, files, err := console.LoadTokens(dir)
	if err != nil {
		return err
	}
	accounts, err := ops.OperatorAccounts(n, *credentials, "console", nil)
	if err != nil {
		return err
	}
	conns, err := connectAccounts(accounts)
	defer func() {
		for _, c := range conns {
			c.Conn.Close()
		}
	}()
	if err != nil {
		return err
	}
	dirs := map[string]string{}
	for _, st := range stores {
		dirs[st.Name] = st.Dir
	}
	c, err := newConsole(conns, tokens, dirs, "compactor console", log)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := readFleetOnce(ctx, c); err != nil {
		return err
	}
	metricsToken, err := readMetricsToken(*metricsTokenFile)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("console: listen %s: %w", *listen, err)
	}
	names := make([]string, 0, len(conns))
	for _, c := range conns {
		names = append(names, c.Name)
	}
	log.Info("console listening", "url", "http://"+ln.Addr().String()+"/", "token_files", files, "nats", conns[0].Conn.ConnectedUrlRedacted(), "accounts", names)
	return serveConsole(ctx, ln, consoleMux(c, conns, metricsToken))
}

// readFleetOnce opens the view now: a console that cannot read the fleet says so at once.
func readFleetOnce(ctx context.Context, c *console.Console) error {
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := c.Fleet(octx)
	return err
}

// connectAccounts connects to each account as its operator; on an error, the connections
// made so far are returned with it, for the caller to close.
func connectAccounts(accounts []command.FleetAccount) ([]operator.FleetAccount, error) {
	var conns []operator.FleetAccount
	for _, a := range accounts {
		nc, err := a.NATS.Connect(nats.MaxReconnects(-1))
		if err != nil {
			return conns, command.AccountErr(a.Account, err)
		}
		fa := operator.FleetAccount{Name: a.Account, Conn: nc, Stores: a.Stores}
		if a.Account == "" {
			fa.Stores = nil // one account: every store of it
		}
		conns = append(conns, fa)
	}
	return conns, nil
}

// consoleMux serves the console's pages, /metrics (the fleet's figures, behind
// metricsToken when set) and /healthz (every account connected).
func consoleMux(c *console.Console, conns []operator.FleetAccount, metricsToken string) *http.ServeMux {
	reg := prometheus.NewRegistry()
	reg.MustRegister(console.NewCollector(c.View))
	mux := http.NewServeMux()
	mux.Handle("/metrics", pipeline.RequireBearer(metricsToken, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		for _, c := range conns {
			if !c.Conn.IsConnected() {
				http.Error(w, command.AccountErr(c.Name, errors.New("unhealthy: not connected to NATS")).Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("/", c)
	return mux
}

// serveConsole serves h on ln until ctx ends.
func serveConsole(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("console: %w", err)
	}
	return nil
}

// newConsole makes the console of a fleet reached through its accounts' connections (the
// operator's or the admin's of each).
func newConsole(accounts []operator.FleetAccount, tokens console.Tokens, stores map[string]string, name string, log *slog.Logger) (*console.Console, error) {
	return console.New(console.Options{
		Open: func(ctx context.Context) (*operator.FleetView, error) {
			return operator.OpenFleetView(ctx, accounts, operator.FleetViewOptions{Events: true, DeadLetters: true, Hooks: true, Logger: log})
		},
		Tokens: tokens, Stores: stores, Name: name, Logger: log,
	})
}

// checkListen refuses an address that is not loopback unless allowed.
func checkListen(addr string, allowed bool, flagName, allowFlag string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return command.Usagef("%s %s: %v", flagName, addr, err)
	}
	if allowed || command.IsLoopback(host) {
		return nil
	}
	return command.Usagef("%s %s is not a loopback address: the console's tokens travel in its requests; give %s to serve it there (behind TLS)", flagName, addr, allowFlag)
}
