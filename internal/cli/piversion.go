package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"

	"github.com/compactor-dev/compactor/engine"
	"github.com/compactor-dev/compactor/internal/cli/command"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/worker"
)

// The flags that say which Pi sessions follow (--pi-version, --store-pi) and what becomes of
// a release compactor does not know (--pi-unknown): checked here, naming the flag, and
// applied to jobs by package worker (worker.PiVersions).

// piFlags are --pi-version and --pi-unknown.
type piFlags struct {
	version string // "" = the newest known
	unknown string // worker.PiUnknownWarn or worker.PiUnknownRefuse
}

// piVersionFlag registers --pi-version (env COMPACTOR_PI_VERSION; default the newest Pi) and
// --pi-unknown (env COMPACTOR_PI_UNKNOWN).
func piVersionFlag(fs *flag.FlagSet, dst *piFlags, getenv func(string) string) {
	rs := pi.Releases()
	fs.StringVar(&dst.version, "pi-version", getenv("COMPACTOR_PI_VERSION"),
		fmt.Sprintf("the Pi release whose rules sessions follow: any x.y.z (compactor knows every release from %s to %s), x.y (its newest known patch) or latest (default: %s; env COMPACTOR_PI_VERSION); see docs/compatibility.md",
			rs[0], pi.Latest, pi.Latest))
	unknown := getenv("COMPACTOR_PI_UNKNOWN")
	if unknown == "" {
		unknown = worker.PiUnknownWarn
	}
	fs.StringVar(&dst.unknown, "pi-unknown", unknown,
		"a Pi release compactor does not know (a flag's, a store's or a job's): warn (serve it with the rules its number falls in, the newest known for a newer release, and say so in the log, the metric compactor_pi_version_unknown_total and the job's event) or refuse (skip the job, naming the release; refuse such a flag) (env COMPACTOR_PI_UNKNOWN)")
}

// check refuses a malformed --pi-version or --pi-unknown, and an unknown release under
// --pi-unknown refuse; an unknown release otherwise comes back as a warning to print.
func (p piFlags) check() (warning string, err error) {
	if p.unknown != worker.PiUnknownWarn && p.unknown != worker.PiUnknownRefuse {
		return "", command.Usagef("--pi-unknown %q: want %s or %s", p.unknown, worker.PiUnknownWarn, worker.PiUnknownRefuse)
	}
	return checkRelease("--pi-version", p.version, p.unknown)
}

// checkRelease checks the version a flag gives (what names the flag, "--store-pi host1" for
// instance) under the --pi-unknown policy.
func checkRelease(what, version, policy string) (warning string, err error) {
	r, err := pi.ParseRelease(version)
	if err != nil {
		return "", command.Usagef("%s: %v", what, err)
	}
	if why := r.Unproven(); why != "" {
		if policy == worker.PiUnknownRefuse {
			return "", command.Usagef("%s: %s; --pi-unknown refuse", what, why)
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
	if _, err := pi.ParseRelease(version); err != nil {
		return fmt.Errorf("%q: %w", v, err)
	}
	if *s == nil {
		*s = storePiFlag{}
	}
	(*s)[name] = version
	return nil
}

// newPiVersions checks --store-pi against the stores and every version under the policy
// (an unknown one is logged once, or refused with --pi-unknown refuse), and makes the
// selection the worker applies to jobs.
func newPiVersions(pi piFlags, byStore map[string]string, stores []pipeline.Store, log *slog.Logger) (worker.PiVersions, error) {
	if log == nil {
		log = slog.Default()
	}
	known := map[string]bool{}
	for _, st := range stores {
		known[st.Name] = true
	}
	for name, v := range byStore {
		if !known[name] {
			return worker.PiVersions{}, command.Usagef("--store-pi %s: no store of that name (stores: %s)", name, storeNames(stores))
		}
		warning, err := checkRelease("--store-pi "+name, v, pi.unknown)
		if err != nil {
			return worker.PiVersions{}, err
		}
		if warning != "" {
			log.Warn("unknown Pi release", "store", name, "pi_version", v, "warning", warning)
		}
	}
	return worker.NewPiVersions(pi.version, byStore, pi.unknown, stores, log), nil
}

func storeNames(stores []pipeline.Store) string {
	var names []string
	for _, st := range stores {
		names = append(names, st.Name)
	}
	return strings.Join(names, ", ")
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
		return nil, command.Usagef("--pi-settings: %v", err)
	}
	var ps piSettings
	if err := json.Unmarshal(b, &ps); err != nil {
		return nil, command.Usagef("--pi-settings %s: not Pi's settings JSON: %v", file, err)
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
			return nil, command.Usagef("--pi-settings %s: compaction.modelOverrides[%q]: token settings must not be negative", file, model)
		}
	}
	return c.ModelOverrides, nil
}
