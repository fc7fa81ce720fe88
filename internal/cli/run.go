package cli

import (
	"context"
	"errors"
	"fmt"
	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/agents"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/operator"
	"github.com/compactor-dev/compactor/sweep"
	"github.com/compactor-dev/compactor/wire"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/compactor-dev/compactor/engine"
	"github.com/compactor-dev/compactor/internal/cli/command"
	"github.com/compactor-dev/compactor/internal/console"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/worker"
)

// NewPipelineHandler, when set (tests), replaces the real job Handler and sweep Assessor:
// otherwise worker.Handler and worker.Assessor, around the engine that the summarizer and
// planning flags build.
var NewPipelineHandler func(cfg pipeline.Config) (pipeline.Handler, sweep.Assessor, error)

func init() {
	command.Register(&command.Command{Name: "run", Summary: "work compaction jobs from NATS JetStream (--once: sweep, drain, report)", Run: runRun})
}

// serviceFlags are the flags shared by run and sweep.
type serviceFlags struct {
	stores          command.StoreFlag
	storePi         storePiFlag
	storeInstr      storeInstructionsFlag
	nats            access.NATSConfig
	dataDir         string
	concurrency     int
	idle            time.Duration
	sweepEvery      time.Duration
	once            bool
	asJSON          bool
	metricsAddr     string
	drainTimeout    time.Duration
	shutdownTimeout time.Duration // the former name of drainTimeout
	spend           command.SpendFlag
	logFormat       string
	logLevel        string
	sum             summarizerFlags
	eng             engineFlags
	configFile      *string
	worker          bool
	// live is the service's summarizer, which a reload replaces (compose builds it).
	live *liveSummarizer
	// logLevel of the service's log, which a reload changes.
	level         *slog.LevelVar
	setup         bool
	insecureLocal bool
	cleartext     bool
	serveTLSCert  string
	serveTLSKey   string
	shared        command.StringList
	console       bool
	consoleRemote bool
	metricsToken  string
}

// bind registers the flags. worker: run's flags (summarizer, data dir, concurrency, ...);
// otherwise sweep's, a client's.
func (f *serviceFlags) bind(fs *command.FlagSet, env *Env, worker bool) {
	f.worker = worker
	fs.Var(&f.stores, "store", "session store `NAME=DIR` (repeatable; default: env COMPACTOR_STORES or "+command.DefaultStores+")")
	fs.Var(&f.storePi, "store-pi", "the Pi release a store's agents run, `NAME=VERSION` (repeatable; default --pi-version)")
	command.BindNATSFlags(fs.FlagSet, &f.nats, env.Getenv)
	fs.DurationVar(&f.idle, "idle", pipeline.DefaultIdle, "sessions modified more recently are active and left alone (0: no idle check)")
	fs.StringVar(&f.logFormat, "log-format", "", "log format text|json (default: text on a terminal, json otherwise; JSON durations are in seconds)")
	level := "info"
	if !worker {
		level = "warn" // a client: its output is the summary, not the service's log
	}
	fs.StringVar(&f.logLevel, "log-level", level, "log level debug|info|warn|error")
	fs.BoolVar(&f.asJSON, "json", false, "print the result as JSON (docs/json-output.md)")
	f.configFile = command.ConfigFlag(fs.FlagSet, env)
	f.eng.register(fs.FlagSet, env.Getenv)
	if !worker {
		return
	}
	f.sum.register(fs.FlagSet)
	f.eng.registerPreparation(fs.FlagSet)
	fs.Var(&f.storeInstr, "store-instructions", "whether a store's jobs may carry summary instructions, `NAME=POLICY`, POLICY allow or refuse (repeatable; NAME * for every store; default allow): a job with instructions for a store that refuses them ends skipped, saying why (docs/security.md)")
	dd := env.Getenv("COMPACTOR_DATA_DIR")
	if dd == "" {
		if home, err := os.UserHomeDir(); err == nil {
			dd = filepath.Join(home, ".compactor")
		}
	}
	fs.StringVar(&f.dataDir, "data-dir", dd, "data directory of the embedded NATS server (env COMPACTOR_DATA_DIR)")
	fs.IntVar(&f.concurrency, "concurrency", pipeline.DefaultConcurrency, "jobs run at once by this worker")
	fs.DurationVar(&f.sweepEvery, "sweep-every", 0, "sweep the stores this often (0: never)")
	fs.BoolVar(&f.once, "once", false, "sweep, process everything queued, print a report and exit")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "serve /metrics, /healthz and /readyz on this address (e.g. 127.0.0.1:9464), and the web console at / (see --console)")
	fs.StringVar(&f.metricsToken, "metrics-token-file", "", "a file holding the bearer token /metrics requires (its content, trimmed): for a --metrics-addr a central scraper reaches (Prometheus' authorization.credentials_file); /healthz and /readyz stay open")
	fs.BoolVar(&f.console, "console", true, "serve the web console at / of --metrics-addr when this process sets up its NATS (the embedded server, or --setup) and the address is loopback; its tokens are generated into --data-dir (docs/operations.md, \"The console\")")
	fs.BoolVar(&f.consoleRemote, "console-remote", false, "serve the console on a --metrics-addr that is not loopback too (put TLS in front: the tokens travel in its requests)")
	fs.DurationVar(&f.drainTimeout, "drain-timeout", 0, "on SIGTERM, how long the summaries in flight may finish before they are handed back (0: --llm-timeout, so that a summary whose request started just before the stop can end)")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 0, "the former name of --drain-timeout (deprecated: give --drain-timeout)")
	fs.Var(&f.spend, "spend-limit", "a limit on the LLM input tokens the fleet starts paying for: `[STORE=]TOKENS/hour` or [STORE=]TOKENS/day, every store's or STORE's (repeatable; counted in COMPACTOR_SPEND for every worker that has it: give every worker the same); over it, jobs wait for the window to end")
	fs.BoolVar(&f.setup, "setup", false, "with --nats-url: also set up the streams, buckets, consumers and the fleet's settings from this process's flags, as `compactor setup` does (the admin's right; implied without --nats-url)")
	fs.BoolVar(&f.insecureLocal, "insecure-local", false, "without --nats-url: the embedded server takes any connection from this machine, without the token it otherwise generates into --data-dir")
	fs.BoolVar(&f.cleartext, "insecure-cleartext-auth", false, "without --nats-url: let the embedded server listen beyond loopback (--listen) without TLS, its token or password crossing the network in clear text (refused otherwise: give --serve-tls-cert)")
	fs.StringVar(&f.serveTLSCert, "serve-tls-cert", "", "without --nats-url: the embedded server speaks TLS only, with this certificate (clients on this machine trust it by default)")
	fs.StringVar(&f.serveTLSKey, "serve-tls-key", "", "the key of --serve-tls-cert")
	fs.Var(&f.shared, "shared-store", "a store served from one directory on several hosts (a shared file system): its workers need not be on one host (repeatable; docs/security.md)")
}

// drain is the drain limit: --drain-timeout, else the deprecated --shutdown-timeout, else
// the LLM timeout (one request of a summary started just before the stop can end).
func (f *serviceFlags) drain(log *slog.Logger) (time.Duration, error) {
	switch {
	case f.drainTimeout < 0:
		return 0, command.Usagef("--drain-timeout %s: must not be negative", f.drainTimeout)
	case f.shutdownTimeout < 0:
		return 0, command.Usagef("--shutdown-timeout %s: must not be negative", f.shutdownTimeout)
	case f.shutdownTimeout > 0 && f.drainTimeout > 0:
		return 0, command.Usagef("--shutdown-timeout is the former name of --drain-timeout: give only --drain-timeout")
	case f.drainTimeout > 0:
		return f.drainTimeout, nil
	case f.shutdownTimeout > 0:
		log.Warn("--shutdown-timeout is deprecated: it is now --drain-timeout (default: --llm-timeout)", "drain_timeout_s", seconds(f.shutdownTimeout))
		return f.shutdownTimeout, nil
	}
	return f.sum.timeout, nil
}

// parse parses the command line, fills what it left unset from --config, refuses
// positional arguments, checks the flags and returns the pipeline configuration.
func (f *serviceFlags) parse(fs *command.FlagSet, env *Env) (pipeline.Config, error) {
	pos, err := fs.ParseArgs(env.Args)
	if err != nil {
		return pipeline.Config{}, err
	}
	var skip []func(string) bool
	if !f.worker {
		skip = append(skip, command.ServiceSetting)
	}
	if err := command.ApplyConfigFile(fs.FlagSet, *f.configFile, skip...); err != nil {
		return pipeline.Config{}, err
	}
	if len(pos) > 0 {
		return pipeline.Config{}, command.Usagef("unexpected argument %q (stores are given with --store NAME=DIR)", pos[0])
	}
	if err := f.eng.check(); err != nil {
		return pipeline.Config{}, err
	}
	return f.config(env)
}

// config turns the flags into a pipeline.Config and builds the logger.
func (f *serviceFlags) config(env *Env) (pipeline.Config, error) {
	stores := []pipeline.Store(f.stores)
	source := "--store"
	if len(stores) == 0 {
		var err error
		if stores, _, err = command.EnvStores(env.Getenv); err != nil {
			return pipeline.Config{}, err
		}
		source = "COMPACTOR_STORES"
	}
	if err := checkStores(stores, source); err != nil {
		return pipeline.Config{}, err
	}
	f.level = new(slog.LevelVar)
	log, err := command.NewLogger(env.Stderr, f.logFormat, f.logLevel, f.level)
	if err != nil {
		return pipeline.Config{}, err
	}
	idle := f.idle
	if idle == 0 {
		idle = -1 // --idle 0 means: no idle check
	}
	cfg := pipeline.Config{
		Stores: stores, NATS: f.nats, DataDir: f.dataDir, Concurrency: f.concurrency, Idle: idle,
		SweepEvery: f.sweepEvery, MetricsAddr: f.metricsAddr, Logger: log, Version: command.Version(),
		Setup: f.setup, InsecureLocal: f.insecureLocal, InsecureCleartextAuth: f.cleartext, ServeTLSCert: f.serveTLSCert, ServeTLSKey: f.serveTLSKey, SharedStores: f.shared,
	}
	// A client (sweep) without --nats-url finds the local service's address through
	// --data-dir, which command.OpsFlags.config fills in afterwards; pipeline.New validates it then.
	if !f.worker {
		return cfg, nil
	}
	if cfg.ShutdownTimeout, err = f.drain(log); err != nil {
		return cfg, err
	}
	if cfg.MetricsToken, err = readMetricsToken(f.metricsToken); err != nil {
		return cfg, err
	}
	cfg.SpendLimits = f.spend
	if err := cfg.Validate(); err != nil {
		return cfg, &command.UsageError{Err: command.FlagError(err)}
	}
	return cfg, nil
}

// checkStores checks the stores with the flag that named them, before the pipeline's own
// validation (which names Config fields) sees them.
func checkStores(stores []pipeline.Store, source string) error {
	seen := map[string]bool{}
	for _, st := range stores {
		spec := st.Name + "=" + st.Dir
		if seen[st.Name] {
			return command.Usagef("%s %s: store %q is given twice", source, spec, st.Name)
		}
		seen[st.Name] = true
		fi, err := os.Stat(st.Dir)
		if err != nil {
			return command.Usagef("%s %s: %v", source, spec, errors.Unwrap(err))
		}
		if !fi.IsDir() {
			return command.Usagef("%s %s: %s is not a directory", source, spec, st.Dir)
		}
	}
	return nil
}

// serviceRef is the service of one `compactor run`, for its handler, which needs its
// resources once it has started (the bucket of prepared summaries). One per run, not one
// per process: a test runs several services in one process, each with its own user.
type serviceRef struct {
	atomic.Pointer[pipeline.Service]
}

func (r *serviceRef) prepared() agents.PreparedStore {
	if s := r.Load(); s != nil {
		return s.Prepared()
	}
	return nil
}

// follow queues a job the service's worker decided on (pipeline.Service.Follow).
func (r *serviceRef) follow(ctx context.Context, job wire.Job) (fleetops.EnqueueResult, error) {
	if s := r.Load(); s != nil {
		return s.Follow(ctx, job)
	}
	return fleetops.EnqueueResult{}, errors.New("the service has not started")
}

// queue queues a job the service's worker decided on, once (pipeline.Service.Queue).
func (r *serviceRef) queue(ctx context.Context, job wire.Job) (fleetops.EnqueueResult, error) {
	if s := r.Load(); s != nil {
		return s.Queue(ctx, job)
	}
	return fleetops.EnqueueResult{}, errors.New("the service has not started")
}

// compose fills the Handler (workers) and the Assessor: the engine, the same code path as
// `compactor compact`, configured by the summarizer and planning flags. A sweep only
// checks budgets and needs no summarizer.
func (f *serviceFlags) compose(cfg pipeline.Config, env *Env, svc *serviceRef) (pipeline.Config, error) {
	if NewPipelineHandler != nil {
		h, a, err := NewPipelineHandler(cfg)
		if err != nil {
			return cfg, fmt.Errorf("job handler: %w", err)
		}
		cfg.Handler, cfg.Assessor = h, a
		return cfg, nil
	}
	var sum summarize.Summarizer = summarize.NewExtractive() // never called by a sweep
	if f.worker {
		b, err := f.sum.buildLive(env.Getenv, cfg.Logger)
		if err != nil {
			return cfg, err
		}
		f.live = newLiveSummarizer(b)
		sum = f.live
		cfg.ReadyProbes = append(cfg.ReadyProbes, f.live.readyProbe())
	}
	eng, err := engine.New(sum, f.eng.settings())
	if err != nil {
		return cfg, &command.UsageError{Err: err}
	}
	if f.eng.piWarning != "" {
		cfg.Logger.Warn("unknown Pi release", "pi_version", f.eng.pi.version, "warning", f.eng.piWarning)
	}
	eng.Roots = pipeline.StoreRoots(cfg.Stores)
	pv, err := newPiVersions(f.eng.pi, f.storePi, cfg.Stores, cfg.Logger)
	if err != nil {
		return cfg, err
	}
	cfg.Assessor = worker.Assessor(eng, pv)
	if err := f.storeInstr.check(cfg.Stores); err != nil {
		return cfg, err
	}
	if f.worker {
		var q worker.Queues
		if f.eng.rewriteExtracts {
			q = worker.Queues{Follow: svc.follow, Queue: svc.queue}
		}
		cfg.Handler = worker.RefuseInstructions(f.storeInstr, cfg.Logger, worker.Handler(eng, pv, svc.prepared, q))
		cfg.Bridger = worker.Bridger(eng, pv, svc.prepared, q, cfg.Logger)
		cfg.Logger.Info("summarizer", f.sum.logAttrs(f.eng)...)
	}
	return cfg, nil
}

// runUsage and runHelp are run's usage line and description.
const (
	runUsage = "[--store NAME=DIR]... [flags]"
	runHelp  = `
Work compaction jobs from NATS JetStream. Without --nats-url an embedded NATS server is
started (JetStream on, stored under --data-dir, listening on 127.0.0.1:4222, requiring a
token it generates into --data-dir, which enqueue, sweep and Pi's extension on this
machine find there) and this process sets everything up on it. With --nats-url the
streams, buckets and consumers are the admin's ('compactor setup', or --setup): a worker
checks that they are there, says what is missing or different, and follows the fleet's
settings (lease TTL, max deliver, ack wait); it never creates or changes them. A store
has one owner: a worker serving a store's name from another directory refuses to start
and names the other host (--shared-store for one directory mounted on several hosts).
Stop with SIGINT/SIGTERM: fetching stops, the summaries in flight get --drain-timeout
(default: --llm-timeout) to finish, jobs that have not started one and those still running
then are handed back at once. SIGHUP reloads the settings that can change safely
(docs/operations.md, "Reload").

With --once: sweep the stores, process everything queued, print a report (a table, or
JSON with --json) and exit: 0 when no job failed, 1 otherwise.

Examples:
  compactor run --store default=$HOME/.pi/agent/sessions --concurrency 8 --sweep-every 10m
  compactor run --nats-url nats://nats:4222 --nkey /etc/compactor/worker-team.nk --store team=/srv/sessions
  compactor run --once --store default=./sessions     # sweep, process everything, print a report
  compactor run --once --config configs/example.json  # settings from a file (flags win)`
)

// bindRun registers run's flags on fs: the service's, then the operator's.
func bindRun(fs *command.FlagSet, env *Env) (*serviceFlags, *command.OpsFlags) {
	f := &serviceFlags{}
	f.bind(fs, env, true)
	return f, command.BindOpsFlags(fs.FlagSet, env, command.OpsWorker)
}

func runRun(ctx context.Context, env *Env) error {
	fs := command.NewFlagSet(env, "run", runUsage, runHelp)
	f, ops := bindRun(fs, env)
	parsed, err := f.parse(fs, env)
	// The values a reload compares with: the flags as parsed (command line and --config),
	// as a reload reads them, before anything below fills in a default.
	running := flagValues(fs.FlagSet)
	cfg, err := ops.Config(parsed, err)
	if err != nil {
		return err
	}
	var progress *sweepProgress
	if f.once {
		var summary io.Writer = env.Stdout
		if f.asJSON {
			summary = nil
		}
		progress = newSweepProgress(env.Stderr, summary)
		cfg.Progress = progress
		if cfg.NATS.URL == "" {
			cfg.EmbeddedPort = -1 // a one-shot run must not take the port of a running worker
		}
	} else if f.asJSON {
		return command.Usagef("--json goes with --once (a running worker logs; --log-format json)")
	}
	var ref serviceRef
	cfg, err = f.compose(cfg, env, &ref)
	if err != nil {
		return err
	}
	if !f.once && cfg.MetricsAddr != "" && f.console {
		mount, err := f.mountConsole(&cfg, &ref)
		if err != nil {
			return err
		}
		if mount != nil {
			defer mount.Close()
		}
	}
	svc, err := pipeline.New(cfg)
	if err != nil {
		return &command.UsageError{Err: command.FlagError(err)}
	}
	ref.Store(svc)
	defer svc.Close()
	if !f.once {
		stopReload := f.reloadOnHangup(env, running, svc)
		defer stopReload()
		return svc.Run(ctx)
	}
	rep, err := svc.RunOnce(ctx)
	if rep != nil {
		if f.asJSON {
			_ = writeReportJSON(env.Stdout, rep, progress.alone)
		} else {
			_ = writeReportTable(env.Stdout, rep, f.idle, progress.alone)
		}
	}
	if err != nil {
		return err
	}
	if n := rep.Failed(); n > 0 {
		return &command.ExitError{Code: ExitFailed, Err: fmt.Errorf("%s failed", command.Plural(n, "job", "jobs"))}
	}
	return nil
}

// mountConsole serves the web console at / of the HTTP listener, read through the service's
// own connection once it has started. Only a service that sets up its NATS (the embedded
// server's, or --setup: the admin's credentials) may read every store: a store's worker
// answers / with where the fleet's console is.
func (f *serviceFlags) mountConsole(cfg *pipeline.Config, ref *serviceRef) (*console.Console, error) {
	log := cfg.Logger
	host, _, err := net.SplitHostPort(cfg.MetricsAddr)
	if err == nil && !command.IsLoopback(host) && !f.consoleRemote {
		log.Info("web console not served: --metrics-addr is not a loopback address (give --console-remote, behind TLS, or use compactor console)", "addr", cfg.MetricsAddr)
		return nil, nil
	}
	if cfg.NATS.URL != "" && !cfg.Setup {
		cfg.HTTPHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "this worker's NATS credentials are a store's: the fleet's web console is `compactor console`, run with the operator's credentials (docs/operations.md, \"The console\")", http.StatusNotFound)
		})
		return nil, nil
	}
	tokens, files, err := console.LoadTokens(f.dataDir)
	if err != nil {
		return nil, err
	}
	dirs := map[string]string{}
	for _, st := range cfg.Stores {
		dirs[st.Name] = st.Dir
	}
	c, err := console.New(console.Options{
		Open: func(ctx context.Context) (*operator.FleetView, error) {
			svc := ref.Load()
			if svc == nil || svc.Conn() == nil {
				return nil, errors.New("the service is starting")
			}
			// The service's own account (the embedded server's, or --setup's with the
			// account's admin key): every store of it.
			return operator.OpenFleetView(ctx, []operator.FleetAccount{{Conn: svc.Conn()}}, operator.FleetViewOptions{Events: true, DeadLetters: true, Hooks: true, Logger: log})
		},
		Tokens: tokens, Stores: dirs, Name: "compactor run", Logger: log,
	})
	if err != nil {
		return nil, err
	}
	cfg.HTTPHandler = c
	log.Info("web console at / of the metrics listener", "addr", cfg.MetricsAddr, "token_files", files)
	return c, nil
}

// readMetricsToken reads --metrics-token-file: its content, trimmed, at least 16
// characters; none when no file is given.
func readMetricsToken(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", command.Usagef("--metrics-token-file: %v", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 {
		return "", command.Usagef("--metrics-token-file %s: want a token of at least 16 characters", path)
	}
	return tok, nil
}
