package command

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/compactor-dev/compactor/access"
	"io"
	"os"
	"strings"
	"sync"
)

// ApplyConfigFile sets every flag named in a JSON config file that was not given on the
// command line. Keys are flag names ("store", "context-window", "idle", ...); values are
// strings, numbers, booleans, or arrays for repeatable flags. Keys starting with "_" are
// comments. The command line always wins over the file, so one file can serve a fleet and
// a flag can still override it for one run. Keys for which skip (if given) reports true
// are left alone: a sweep reads the service's file and skips what only the service takes.
func ApplyConfigFile(fs *flag.FlagSet, path string, skip ...func(key string) bool) error {
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Usagef("--config: %v", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return Usagef("--config %s: not a JSON object: %v", path, err)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for key, raw := range m {
		if strings.HasPrefix(key, "_") || given[key] {
			continue
		}
		if fs.Lookup(key) == nil && len(skip) > 0 && skip[0](key) {
			continue
		}
		if key == "config" || fs.Lookup(key) == nil {
			return Usagef("--config %s: unknown setting %q (settings are this command's flag names; see --help)", path, key)
		}
		var values []string
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) == nil {
			for _, v := range list {
				values = append(values, scalar(v))
			}
		} else {
			values = []string{scalar(raw)}
		}
		for _, v := range values {
			if err := fs.Set(key, v); err != nil {
				return Usagef("--config %s: %s: %v", path, key, err)
			}
		}
	}
	return nil
}

func scalar(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return strings.TrimSpace(string(raw))
}

// ConfigFlag registers --config (default from COMPACTOR_CONFIG).
func ConfigFlag(fs *flag.FlagSet, env *Env) *string {
	return fs.String("config", env.Getenv("COMPACTOR_CONFIG"), fmt.Sprintf("JSON file of settings keyed by flag name; flags given on the command line win (env %s)", "COMPACTOR_CONFIG"))
}

// ServiceSetting reports whether key is a flag of `compactor run`: a sweep given the
// service's --config file skips the settings only the service takes (the summarizer, the
// streams' replicas and timings), so that one file serves both. The run command is
// package cli's, found in the registry (this package cannot import cli).
func ServiceSetting(key string) bool {
	serviceSettings.once.Do(func() {
		serviceSettings.names = map[string]bool{}
		env := &Env{Args: []string{"--help"}, Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard,
			Getenv: func(string) string { return "" }}
		var sets []*flag.FlagSet
		env.OnFlagSet = func(fs *flag.FlagSet, _, _ string) { sets = append(sets, fs) }
		_ = Lookup("run").Run(context.Background(), env) // --help: declares the flags and returns
		for _, fs := range sets {
			fs.VisitAll(func(f *flag.Flag) { serviceSettings.names[f.Name] = true })
		}
	})
	return serviceSettings.names[key]
}

var serviceSettings struct {
	once  sync.Once
	names map[string]bool
}

// configFlags names the flag behind each pipeline.Config field, so a validation error
// reads "--concurrency: 0, need at least 1" rather than "config: Concurrency: ...".
var configFlags = map[string]string{
	"Stores":                     "--store",
	"DataDir":                    "--data-dir",
	"Concurrency":                "--concurrency",
	"Idle":                       "--idle",
	"SweepEvery":                 "--sweep-every",
	"MetricsAddr":                "--metrics-addr",
	"ShutdownTimeout":            "--drain-timeout",
	"SpendLimits":                "--spend-limit",
	"NATS":                       "--nats-user/--nats-token/--nkey/--creds",
	"NATS.User":                  "--nats-user",
	"NATS.NKeySeedFile":          "--nkey",
	"NATS.CredsFile":             "--creds",
	"NATS.TLSCA":                 "--tls-ca",
	"NATS.TLSCert":               "--tls-cert",
	"NATS.TLSKey":                "--tls-key",
	"NATS.TLSCert/TLSKey":        "--tls-cert/--tls-key",
	"NATS.TokenFile":             "--nats-token-file",
	"NATS.PasswordFile":          "--nats-password-file",
	"NATS.InboxPrefix":           "--inbox-prefix",
	"NATS.Password":              "--nats-password-file",
	"ServeTLSCert":               "--serve-tls-cert",
	"ServeTLSKey":                "--serve-tls-key",
	"ServeTLSCert/ServeTLSKey":   "--serve-tls-cert/--serve-tls-key",
	"ServeTLSCert/InsecureLocal": "--serve-tls-cert/--insecure-local",
	"InsecureLocal":              "--insecure-local",
	"InsecureCleartextAuth":      "--insecure-cleartext-auth",
	"EmbeddedHost":               "--listen",
	"DLQMaxBytes":                "--dlq-max-bytes",
	"RecordsMaxBytes":            "--records-max-bytes",
	"SharedStores":               "--shared-store",
	"EmbeddedSync":               "--nats-sync",
	"JobsMaxAge":                 "--jobs-max-age",
	"JobsMaxBytes":               "--jobs-max-bytes",
	"EventsMaxAge":               "--events-max-age",
	"EventsMaxBytes":             "--events-max-bytes",
}

// FlagError rewrites a pipeline.Config validation error to name the flag behind its
// field. Fields without a flag keep the pipeline's wording.
func FlagError(err error) error {
	var ce *access.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	field := ce.Field
	if i := strings.IndexByte(field, '['); i >= 0 {
		field = field[:i]
	}
	flag, ok := configFlags[strings.TrimSuffix(field, ".Dir")]
	if !ok {
		return err
	}
	return errors.New(flag + ": " + strings.ReplaceAll(ce.Err.Error(), "NATS.URL", "--nats-url"))
}
