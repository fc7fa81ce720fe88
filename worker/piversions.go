package worker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/pipeline"
)

// Which Pi a session follows. A session file does not say which Pi wrote it, and the
// releases read, plan and write differently (pi.Release): a store says which Pi its
// agents run (--pi-version for all, --store-pi for one), the newest by default, and a job
// from an agent may say it itself (the extension sends the Pi it runs in). A release
// compactor has not proven is never served silently: the policy (--pi-unknown) says what
// happens.

// The policies for a Pi release compactor does not know (--pi-unknown).
const (
	// PiUnknownWarn serves an unknown release with the rules its number falls in (a newer
	// one: the newest known release's), with a warning, the metric
	// compactor_pi_version_unknown_total and the job's event saying so (piUnknown).
	PiUnknownWarn = "warn"
	// PiUnknownRefuse skips a job for an unknown release (the reason names it) and refuses
	// such a flag.
	PiUnknownRefuse = "refuse"
)

// PiVersions says which Pi each store follows, and applies the policy for an unknown
// release to the version a job or a bridge request names. The zero value serves every
// store with the newest release and warns of an unknown one.
type PiVersions struct {
	def     string            // --pi-version ("" = the newest)
	byStore map[string]string // --store-pi
	roots   []storeRoot       // to find a file's store (sweeps assess files)
	policy  string            // --pi-unknown
	log     *slog.Logger
	warned  *sync.Map // "store\x00version" → true: each unknown release is logged at Warn once
}

type storeRoot struct{ name, dir string }

// NewPiVersions is the selection of a worker serving stores: def is the release every store
// follows ("" = the newest known), byStore a store's own release where it has one, policy
// PiUnknownWarn or PiUnknownRefuse; log (nil: slog.Default()) is told of each unknown
// release a job names, once per store. The versions are not checked here: the command
// that reads them from its flags does that, naming the flag.
func NewPiVersions(def string, byStore map[string]string, policy string, stores []pipeline.Store, log *slog.Logger) PiVersions {
	if log == nil {
		log = slog.Default()
	}
	pv := PiVersions{def: def, byStore: byStore, policy: policy, log: log, warned: &sync.Map{}}
	for _, st := range stores {
		dir := st.Dir
		if abs, err := filepath.Abs(dir); err == nil {
			dir = abs
		}
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			dir = real
		}
		pv.roots = append(pv.roots, storeRoot{st.Name, dir})
	}
	// The deepest root first: a store inside another belongs to itself.
	sort.SliceStable(pv.roots, func(i, j int) bool { return len(pv.roots[i].dir) > len(pv.roots[j].dir) })
	return pv
}

// of is the Pi version of a store.
func (pv PiVersions) of(store string) string {
	if v, ok := pv.byStore[store]; ok {
		return v
	}
	return pv.def
}

// forRequest is the Pi release a job or bridge request of the store is served with: the
// one it names (the agent's), else the store's. unknown is the release when compactor does
// not know it ("" otherwise), refusal the skip reason when --pi-unknown refuse turns it
// away. A malformed version is an error (wire.Job.Validate refuses one before).
func (pv PiVersions) forRequest(store, named string) (version, unknown, refusal string, err error) {
	version = named
	if version == "" {
		version = pv.of(store)
	}
	r, err := pi.ParseRelease(version)
	if err != nil {
		return "", "", "", fmt.Errorf("piVersion: %w", err)
	}
	why := r.Unproven()
	if why == "" {
		return version, "", "", nil
	}
	unknown = r.String()
	if pv.policy == PiUnknownRefuse {
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
func (pv PiVersions) forFile(file string) string {
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
func (pv PiVersions) fingerprint() string {
	var parts []string
	for name, v := range pv.byStore {
		parts = append(parts, name+"="+v)
	}
	sort.Strings(parts)
	return pv.def + "[" + strings.Join(parts, ",") + "]"
}
