package cli

import (
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/compactor-dev/compactor/internal/cli/command"
	"github.com/compactor-dev/compactor/pipeline"
)

// SIGHUP: `compactor run` reads its settings again (the command line and the --config
// file, as at the start) and applies those that can change without a restart: the
// summarizer (endpoint, model, key, headers, timeouts, concurrency and rate) is built again
// from them and replaces the running one for the next summaries (the key file is read again
// even when nothing else changed: a rotated key is picked up), the log level, the drain
// limit and the spend limits. A setting that needs a restart and differs from the running one is named in a
// warning; a configuration that does not parse or build is refused with the reason, and the
// running settings are kept.

// reloadable are the flags a reload applies.
var reloadable = []string{
	"summarizer", "base-url", "model", "api-key-env", "api-key-file", "organization", "header",
	"llm-timeout", "max-tokens-field", "llm-max-input-tokens", "llm-concurrency", "llm-rps", "summary-budget",
	"log-level", "drain-timeout", "shutdown-timeout", "spend-limit",
}

// flagValues is every flag's value as text, by name.
func flagValues(fs *flag.FlagSet) map[string]string {
	out := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { out[f.Name] = f.Value.String() })
	return out
}

// reloadOnHangup reloads the settings at every SIGHUP until the returned stop is called.
// running are the flag values the service runs with. Only a process started by Main
// handles the signal (a command run in process by a test does not).
func (f *serviceFlags) reloadOnHangup(env *Env, running map[string]string, svc *pipeline.Service) (stop func()) {
	if !env.Signals {
		return func() {}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-quit:
				return
			case <-hup:
				running = f.reload(env, running, svc)
			}
		}
	})
	return func() {
		signal.Stop(hup)
		close(quit)
		wg.Wait()
	}
}

// reload reads the settings again and applies what it can (see above); it returns the
// flag values the service runs with now.
func (f *serviceFlags) reload(env *Env, running map[string]string, svc *pipeline.Service) map[string]string {
	log := svc.Config().Logger
	quiet := *env
	quiet.OnFlagSet = nil
	fs := command.NewFlagSet(&quiet, "run", runUsage, runHelp)
	g, _ := bindRun(fs, &quiet)
	var err error
	if _, err = fs.ParseArgs(env.Args); err == nil {
		err = command.ApplyConfigFile(fs.FlagSet, *g.configFile)
	}
	if err != nil {
		log.Error("reload refused: the settings do not parse; the running ones are kept", "err", err)
		return running
	}
	read := flagValues(fs.FlagSet)
	var applied, restart []string
	for name, v := range read {
		if running[name] == v {
			continue
		}
		if slices.Contains(reloadable, name) {
			applied = append(applied, "--"+name)
		} else {
			restart = append(restart, "--"+name)
		}
	}
	slices.Sort(applied)
	slices.Sort(restart)
	b, err := g.sum.buildLive(env.Getenv, log)
	var drain time.Duration
	if err == nil {
		drain, err = g.drain(log)
	}
	level := new(slog.LevelVar)
	if err == nil {
		err = command.ParseLevel(g.logLevel, level)
	}
	if err == nil {
		if err = svc.SetSpendLimits(g.spend); err != nil {
			err = command.FlagError(err)
		}
	}
	if err != nil {
		log.Error("reload refused: the settings do not build; the running ones are kept", "err", err)
		return running
	}
	f.live.cur.Store(b)
	svc.SetDrainTimeout(drain)
	// Said before the new level applies: a reload is told whatever the level becomes.
	attrs := append([]any{"changed", applied, "log_level", level.Level().String(), "drain_timeout_s", seconds(drain)}, g.sum.logAttrs(g.eng)...)
	log.Info("settings reloaded: the summarizer was built again (its key read again), the log level, drain limit and spend limits set", attrs...)
	if len(restart) > 0 {
		log.Warn("settings changed that take effect at the next restart only; the running ones are kept", "settings", restart)
	}
	f.level.Set(level.Level())
	next := map[string]string{}
	for name, v := range running {
		next[name] = v
		if slices.Contains(reloadable, name) {
			next[name] = read[name]
		}
	}
	return next
}
