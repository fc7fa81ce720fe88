package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// applyConfigFile sets every flag named in a JSON config file that was not given on the
// command line. Keys are flag names ("store", "context-window", "idle", ...); values are
// strings, numbers, booleans, or arrays for repeatable flags. Keys starting with "_" are
// comments. The command line always wins over the file, so one file can serve a fleet and
// a flag can still override it for one run. Keys for which skip (if given) reports true
// are left alone: a sweep reads the service's file and skips what only the service takes.
func applyConfigFile(fs *flag.FlagSet, path string, skip ...func(key string) bool) error {
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return usageErrorf("--config: %v", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return usageErrorf("--config %s: not a JSON object: %v", path, err)
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
			return usageErrorf("--config %s: unknown setting %q (settings are this command's flag names; see --help)", path, key)
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
				return usageErrorf("--config %s: %s: %v", path, key, err)
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

// configFlag registers --config (default from COMPACTOR_CONFIG).
func configFlag(fs *flag.FlagSet, env *Env) *string {
	return fs.String("config", env.Getenv("COMPACTOR_CONFIG"), fmt.Sprintf("JSON file of settings keyed by flag name; flags given on the command line win (env %s)", "COMPACTOR_CONFIG"))
}

// serviceSetting reports whether key is a flag of `compactor run`: a sweep given the
// service's --config file skips the settings only the service takes (the summarizer, the
// streams' replicas and timings), so that one file serves both.
func serviceSetting(key string) bool {
	serviceSettings.once.Do(func() {
		serviceSettings.names = map[string]bool{}
		env := &Env{Args: []string{"--help"}, Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard,
			Getenv: func(string) string { return "" }}
		var sets []*flag.FlagSet
		env.onFlagSet = func(fs *flag.FlagSet, _, _ string) { sets = append(sets, fs) }
		_ = runRun(context.Background(), env) // --help: declares the flags and returns
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
