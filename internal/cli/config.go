package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
)

// applyConfigFile sets every flag named in a JSON config file that was not given on the
// command line. Keys are flag names ("store", "context-window", "idle", ...); values are
// strings, numbers, booleans, or arrays for repeatable flags. Keys starting with "_" are
// comments. The command line always wins over the file, so one file can serve a fleet and
// a flag can still override it for one run.
func applyConfigFile(fs *flag.FlagSet, path string) error {
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
