package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/compactor-dev/compactor/internal/engine"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/sessionio"
)

// Which Pi a session follows. A session file does not say which Pi wrote it, and the
// releases read, plan and write differently (sessionio.Release): a store says which Pi its
// agents run (--pi-version for all, --store-pi for one), the newest by default, and a job
// from an agent may say it itself (the extension sends the Pi it runs in). A release
// compactor has not proven is never served silently: --pi-unknown says what happens.

// The --pi-unknown policies.
const (
	// piUnknownWarn serves an unknown release with the rules its number falls in (a newer
	// one: the newest known release's), with a warning, the metric
	// compactor_pi_version_unknown_total and the job's event saying so (piUnknown).
	piUnknownWarn = "warn"
	// piUnknownRefuse skips a job for an unknown release (the reason names it) and refuses
	// such a flag.
	piUnknownRefuse = "refuse"
)

// piFlags are --pi-version and --pi-unknown.
type piFlags struct {
	version string // "" = the newest known
	unknown string // piUnknownWarn or piUnknownRefuse
}

// piVersionFlag registers --pi-version (env COMPACTOR_PI_VERSION; default the newest Pi) and
// --pi-unknown (env COMPACTOR_PI_UNKNOWN).
func piVersionFlag(fs *flag.FlagSet, dst *piFlags, getenv func(string) string) {
	rs := sessionio.Releases()
	fs.StringVar(&dst.version, "pi-version", getenv("COMPACTOR_PI_VERSION"),
		fmt.Sprintf("the Pi release whose rules sessions follow: any x.y.z (compactor knows every release from %s to %s), x.y (its newest known patch) or latest (default: %s; env COMPACTOR_PI_VERSION); see docs/compatibility.md",
			rs[0], sessionio.Latest, sessionio.Latest))
	unknown := getenv("COMPACTOR_PI_UNKNOWN")
	if unknown == "" {
		unknown = piUnknownWarn
	}
	fs.StringVar(&dst.unknown, "pi-unknown", unknown,
		"a Pi release compactor does not know (a flag's, a store's or a job's): warn (serve it with the rules its number falls in, the newest known for a newer release, and say so in the log, the metric compactor_pi_version_unknown_total and the job's event) or refuse (skip the job, naming the release; refuse such a flag) (env COMPACTOR_PI_UNKNOWN)")
}

// check refuses a malformed --pi-version or --pi-unknown, and an unknown release under
// --pi-unknown refuse; an unknown release otherwise comes back as a warning to print.
func (p piFlags) check() (warning string, err error) {
	if p.unknown != piUnknownWarn && p.unknown != piUnknownRefuse {
		return "", usageErrorf("--pi-unknown %q: want %s or %s", p.unknown, piUnknownWarn, piUnknownRefuse)
	}
	return checkRelease("--pi-version", p.version, p.unknown)
}

// checkRelease checks the version a flag gives (what names the flag, "--store-pi host1" for
// instance) under the --pi-unknown policy.
func checkRelease(what, version, policy string) (warning string, err error) {
	r, err := sessionio.ParseRelease(version)
	if err != nil {
		return "", usageErrorf("%s: %v", what, err)
	}
	if why := r.Unproven(); why != "" {
		if policy == piUnknownRefuse {
			return "", usageErrorf("%s: %s; --pi-unknown refuse", what, why)
		}
		return fmt.Sprintf("%s: %s (docs/compatibility.md)", what, why), nil
	}
	return "", nil
}

// warnTo prints a check's warning, if any, to w.
func warnTo(w io.Writer, warning string) {
	if warning != "" {
		fmt.Fprintf(w, "compactor: warning: %s\n", warning)
	}
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
		return fmt.Errorf("%q: want NAME=VERSION (for example host1=0.80.3)", v)
	}
	if _, err := sessionio.ParseRelease(version); err != nil {
		return fmt.Errorf("%q: %w", v, err)
	}
	if *s == nil {
		*s = storePiFlag{}
	}
	(*s)[name] = version
	return nil
}

// piVersions says which Pi each store follows, and applies the --pi-unknown policy to the
// version a job or a bridge request names.
type piVersions struct {
	def     string            // --pi-version ("" = the newest)
	byStore map[string]string // --store-pi
	roots   []storeRoot       // to find a file's store (sweeps assess files)
	policy  string            // --pi-unknown
	log     *slog.Logger
	warned  *sync.Map // "store\x00version" → true: each unknown release is logged at Warn once
}

type storeRoot struct{ name, dir string }

// newPiVersions checks --store-pi against the stores and every version under the policy
// (an unknown one is logged once, or refused with --pi-unknown refuse).
func newPiVersions(pi piFlags, byStore map[string]string, stores []pipeline.Store, log *slog.Logger) (piVersions, error) {
	if log == nil {
		log = slog.Default()
	}
	pv := piVersions{def: pi.version, byStore: byStore, policy: pi.unknown, log: log, warned: &sync.Map{}}
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
	for name, v := range byStore {
		if !known[name] {
			return pv, usageErrorf("--store-pi %s: no store of that name (stores: %s)", name, storeNames(stores))
		}
		warning, err := checkRelease("--store-pi "+name, v, pv.policy)
		if err != nil {
			return pv, err
		}
		if warning != "" {
			log.Warn("unknown Pi release", "store", name, "pi_version", v, "warning", warning)
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

// forRequest is the Pi release a job or bridge request of the store is served with: the
// one it names (the agent's), else the store's. unknown is the release when compactor does
// not know it ("" otherwise), refusal the skip reason when --pi-unknown refuse turns it
// away. A malformed version is an error (pipeline.Job.Validate refuses one before).
func (pv piVersions) forRequest(store, named string) (version, unknown, refusal string, err error) {
	version = named
	if version == "" {
		version = pv.of(store)
	}
	r, err := sessionio.ParseRelease(version)
	if err != nil {
		return "", "", "", fmt.Errorf("piVersion: %w", err)
	}
	why := r.Unproven()
	if why == "" {
		return version, "", "", nil
	}
	unknown = r.String()
	if pv.policy == piUnknownRefuse {
		return version, unknown, why + " (--pi-unknown refuse)", nil
	}
	level, log := slog.LevelWarn, pv.log
	if pv.warned != nil {
		if _, seen := pv.warned.LoadOrStore(store+"\x00"+unknown, true); seen {
			level = slog.LevelDebug
		}
	}
	if log == nil {
		log = slog.Default()
	}
	log.Log(context.Background(), level, "unknown Pi release", "store", store, "pi_version", unknown, "warning", why)
	return version, unknown, "", nil
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
		"Pi's settings.json (e.g. ~/.pi/agent/settings.json): its compaction.reserveTokens and keepRecentTokens where the flags do not set them, and compaction.modelOverrides (Pi >= 0.86: per provider/modelId) (env COMPACTOR_PI_SETTINGS)")
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
