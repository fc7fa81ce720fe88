package cli

import (
	"context"
	"flag"
	"fmt"
	"github.com/compactor-dev/compactor/internal/engine"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/compactor-dev/compactor/pipeline"
)

// NewPipelineHandler, when set (tests), replaces the real job Handler and sweep Assessor,
// which are otherwise built from the summarizer and planning flags by internal/engine.
var NewPipelineHandler func(cfg pipeline.Config) (pipeline.Handler, pipeline.Assessor, error)

func init() {
	register(&Command{Name: "run", Summary: "work compaction jobs from NATS JetStream (--once: sweep, drain, report)", Run: runRun})
}

// serviceFlags are the flags shared by run and sweep.
type serviceFlags struct {
	stores          pipeline.StoreFlag
	nats            pipeline.NATSConfig
	dataDir         string
	concurrency     int
	idle            time.Duration
	sweepEvery      time.Duration
	once            bool
	metricsAddr     string
	shutdownTimeout time.Duration
	logFormat       string
	logLevel        string
	sum             summarizerFlags
	eng             engineFlags
	configFile      *string
}

func (f *serviceFlags) bind(fs *flag.FlagSet, env *Env, worker bool) {
	fs.Var(&f.stores, "store", "session store `name=DIR` (repeatable; default: env COMPACTOR_STORES or default=./sessions)")
	pipeline.BindNATSFlags(fs, &f.nats, env.Getenv)
	fs.DurationVar(&f.idle, "idle", pipeline.DefaultIdle, "sessions modified more recently are active and left alone")
	fs.StringVar(&f.logFormat, "log-format", "", "log format text|json (default: text on a terminal, json otherwise)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level debug|info|warn|error")
	f.configFile = configFlag(fs, env)
	f.eng.register(fs)
	if !worker {
		return
	}
	f.sum.register(fs)
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
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "serve /metrics and /healthz on this address (e.g. 127.0.0.1:9464)")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", pipeline.DefaultShutdownTimeout, "on stop, how long running jobs may finish before they are given back")
}

// parse parses the command line, fills what it left unset from --config, refuses
// positional arguments, and returns the pipeline configuration.
func (f *serviceFlags) parse(fs *flag.FlagSet, env *Env) (pipeline.Config, error) {
	pos, err := parseFlags(fs, env.Args)
	if err != nil {
		return pipeline.Config{}, err
	}
	if err := applyConfigFile(fs, *f.configFile); err != nil {
		return pipeline.Config{}, err
	}
	if len(pos) > 0 {
		return pipeline.Config{}, usageErrorf("unexpected argument %q", pos[0])
	}
	return f.config(env)
}

// config turns the flags into a pipeline.Config and builds the logger.
func (f *serviceFlags) config(env *Env) (pipeline.Config, error) {
	stores := []pipeline.Store(f.stores)
	if len(stores) == 0 {
		spec := env.Getenv("COMPACTOR_STORES")
		if spec == "" {
			spec = "default=./sessions"
		}
		for _, part := range strings.FieldsFunc(spec, func(r rune) bool { return r == ',' || r == ';' }) {
			st, err := pipeline.ParseStore(strings.TrimSpace(part))
			if err != nil {
				return pipeline.Config{}, usageErrorf("COMPACTOR_STORES: %v", err)
			}
			stores = append(stores, st)
		}
	}
	log, err := newLogger(env.Stderr, f.logFormat, f.logLevel)
	if err != nil {
		return pipeline.Config{}, err
	}
	idle := f.idle
	if idle == 0 {
		idle = -1 // --idle 0 means: no idle check
	}
	return pipeline.Config{
		Stores: stores, NATS: f.nats, DataDir: f.dataDir, Concurrency: f.concurrency, Idle: idle,
		SweepEvery: f.sweepEvery, MetricsAddr: f.metricsAddr, ShutdownTimeout: f.shutdownTimeout, Logger: log,
	}, nil
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usageErrorf("--log-level: %v", err)
	}
	if format == "" {
		format = "json"
		if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			format = "text"
		}
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageErrorf("--log-format: %q is not text or json", format)
}

// withImplementation fills Handler and Assessor: the engine (the same code path as
// `compactor compact`), configured by the summarizer and planning flags.
func withImplementation(cfg pipeline.Config, f *serviceFlags, env *Env) (pipeline.Config, error) {
	if NewPipelineHandler != nil {
		h, a, err := NewPipelineHandler(cfg)
		if err != nil {
			return cfg, fmt.Errorf("job handler: %w", err)
		}
		cfg.Handler, cfg.Assessor = h, a
		return cfg, nil
	}
	sum, err := f.sum.build(env.Getenv, cfg.Logger)
	if err != nil {
		return cfg, err
	}
	eng, err := engine.New(sum, f.eng.settings())
	if err != nil {
		return cfg, &UsageError{Err: err}
	}
	cfg.Handler, cfg.Assessor = jobHandler(eng), budgetAssessor(eng)
	cfg.Logger.Info("summarizer", "kind", f.sum.kind, "model", f.sum.model, "policy", f.eng.policy, "counter", f.eng.counter)
	return cfg, nil
}

func runRun(ctx context.Context, env *Env) error {
	fs := newFlagSet(env, "run", "compactor run [--store name=DIR]... [flags]", `
Work compaction jobs from NATS JetStream. Without --nats-url an embedded NATS server is
started (JetStream on, stored under --data-dir, listening on 127.0.0.1:4222) so that
enqueue and sweep on this machine reach it. Stop with SIGINT/SIGTERM: fetching stops,
running jobs get --shutdown-timeout to finish, the rest are given back.

Examples:
  compactor run --store default=$HOME/.pi/agent/sessions --concurrency 8 --sweep-every 10m
  compactor run --nats-url nats://nats:4222 --creds /etc/compactor/nats.creds --store team=/srv/sessions
  compactor run --once --store default=./sessions     # sweep, process everything, print a report
  compactor run --once --config configs/example.json  # settings from a file (flags win)`)
	var f serviceFlags
	f.bind(fs, env, true)
	cfg, err := f.parse(fs, env)
	if err != nil {
		return err
	}
	if f.once {
		cfg.Progress = env.Stdout
		if cfg.NATS.URL == "" {
			cfg.EmbeddedPort = -1 // a one-shot run must not take the port of a running worker
		}
	}
	if err := cfg.Validate(); err != nil {
		return &UsageError{Err: err}
	}
	cfg, err = withImplementation(cfg, &f, env)
	if err != nil {
		return err
	}
	svc, err := pipeline.New(cfg)
	if err != nil {
		return &UsageError{Err: err}
	}
	defer svc.Close()
	if f.once {
		rep, err := svc.RunOnce(ctx)
		if rep != nil {
			_ = rep.WriteTable(env.Stdout)
		}
		if err != nil {
			return err
		}
		if rep.Failed() > 0 {
			return &ExitError{Code: ExitFailed, Err: fmt.Errorf("%d jobs failed", rep.Failed())}
		}
		return nil
	}
	return svc.Run(ctx)
}
