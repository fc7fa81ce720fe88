package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/compactor-dev/compactor/internal/engine"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/sessionio"
)

// Which Pi a session follows. A session file does not say which Pi wrote it, and the
// releases read, plan and write differently (sessionio.Dialect): a store says which Pi its
// agents run (--pi-version for all, --store-pi for one), the newest by default, and a job
// from an agent may say it itself (the extension sends the Pi it runs in).

// piVersionFlag registers --pi-version (env COMPACTOR_PI_VERSION; default the newest Pi).
func piVersionFlag(fs *flag.FlagSet, dst *string, getenv func(string) string) {
	fs.StringVar(dst, "pi-version", getenv("COMPACTOR_PI_VERSION"),
		fmt.Sprintf("the Pi release whose rules sessions follow: %s (default: %s, the newest; env COMPACTOR_PI_VERSION); see docs/compatibility.md",
			strings.Join(piVersionNames(), " or "), sessionio.DialectLatest))
}

// checkPiVersion refuses a version compactor does not follow, naming the flag.
func checkPiVersion(flagName, v string) error {
	if _, err := sessionio.ParseDialect(v); err != nil {
		return usageErrorf("%s: %v", flagName, err)
	}
	return nil
}

func piVersionNames() []string {
	var out []string
	for _, d := range sessionio.Dialects() {
		out = append(out, d.String())
	}
	return out
}

// storePiFlag collects repeatable --store-pi NAME=VERSION flags.
type storePiFlag map[string]string

func (s *storePiFlag) String() string {
	var parts []string
	for name, v := range *s {
		parts = append(parts, name+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (s *storePiFlag) Set(v string) error {
	name, version, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("%q: want NAME=VERSION (for example host1=0.73.1)", v)
	}
	if _, err := sessionio.ParseDialect(version); err != nil {
		return fmt.Errorf("%q: %w", v, err)
	}
	if *s == nil {
		*s = storePiFlag{}
	}
	(*s)[name] = version
	return nil
}

// piVersions says which Pi each store follows.
type piVersions struct {
	def     string            // --pi-version ("" = the newest)
	byStore map[string]string // --store-pi
	roots   []storeRoot       // to find a file's store (sweeps assess files)
}

type storeRoot struct{ name, dir string }

func newPiVersions(def string, byStore map[string]string, stores []pipeline.Store) (piVersions, error) {
	pv := piVersions{def: def, byStore: byStore}
	known := map[string]bool{}
	for _, st := range stores {
		known[st.Name] = true
		dir := st.Dir
		if abs, err := filepath.Abs(dir); err == nil {
			dir = abs
		}
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			dir = real
		}
		pv.roots = append(pv.roots, storeRoot{st.Name, dir})
	}
	for name := range byStore {
		if !known[name] {
			return pv, usageErrorf("--store-pi %s: no store of that name (stores: %s)", name, storeNames(stores))
		}
	}
	// The deepest root first: a store inside another belongs to itself.
	sort.SliceStable(pv.roots, func(i, j int) bool { return len(pv.roots[i].dir) > len(pv.roots[j].dir) })
	return pv, nil
}

func storeNames(stores []pipeline.Store) string {
	var names []string
	for _, st := range stores {
		names = append(names, st.Name)
	}
	return strings.Join(names, ", ")
}

// of is the Pi version of a store.
func (pv piVersions) of(store string) string {
	if v, ok := pv.byStore[store]; ok {
		return v
	}
	return pv.def
}

// forFile is the Pi version of the store whose directory holds file.
func (pv piVersions) forFile(file string) string {
	abs := file
	if a, err := filepath.Abs(file); err == nil {
		abs = a
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	for _, r := range pv.roots {
		if abs == r.dir || strings.HasPrefix(abs, r.dir+string(os.PathSeparator)) {
			return pv.of(r.name)
		}
	}
	return pv.def
}

// fingerprint names the versions, for the sweeps' settings fingerprint.
func (pv piVersions) fingerprint() string {
	var parts []string
	for name, v := range pv.byStore {
		parts = append(parts, name+"="+v)
	}
	sort.Strings(parts)
	return pv.def + "[" + strings.Join(parts, ",") + "]"
}

// piSettingsFlag registers --pi-settings: Pi's own settings.json, whose compaction block
// gives the general reserveTokens and keepRecentTokens (where the flags do not set them)
// and the per-model compaction.modelOverrides Pi 1.x applies.
func piSettingsFlag(fs *flag.FlagSet, dst *string, getenv func(string) string) {
	fs.StringVar(dst, "pi-settings", getenv("COMPACTOR_PI_SETTINGS"),
		"Pi's settings.json (e.g. ~/.pi/agent/settings.json): its compaction.reserveTokens and keepRecentTokens where the flags do not set them, and compaction.modelOverrides (Pi 1.x: per provider/modelId) (env COMPACTOR_PI_SETTINGS)")
}

// piSettings is the part of Pi's settings.json compactor reads.
type piSettings struct {
	Compaction struct {
		ReserveTokens    *int                            `json:"reserveTokens"`
		KeepRecentTokens *int                            `json:"keepRecentTokens"`
		ModelOverrides   map[string]engine.ModelOverride `json:"modelOverrides"`
	} `json:"compaction"`
}

// applyPiSettings reads --pi-settings (file; "" = none) into keep and reserve where fs did
// not set --keep-recent-tokens and --reserve-tokens, and returns the model overrides.
func applyPiSettings(fs *flag.FlagSet, file string, keep, reserve *int) (map[string]engine.ModelOverride, error) {
	if file == "" {
		return nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, usageErrorf("--pi-settings: %v", err)
	}
	var ps piSettings
	if err := json.Unmarshal(b, &ps); err != nil {
		return nil, usageErrorf("--pi-settings %s: not Pi's settings JSON: %v", file, err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	c := ps.Compaction
	if c.KeepRecentTokens != nil && !set["keep-recent-tokens"] {
		*keep = *c.KeepRecentTokens
	}
	if c.ReserveTokens != nil && !set["reserve-tokens"] {
		*reserve = *c.ReserveTokens
	}
	for model, o := range c.ModelOverrides {
		if o.ReserveTokens != nil && *o.ReserveTokens < 0 || o.KeepRecentTokens != nil && *o.KeepRecentTokens < 0 {
			return nil, usageErrorf("--pi-settings %s: compaction.modelOverrides[%q]: token settings must not be negative", file, model)
		}
	}
	return c.ModelOverrides, nil
}
