package pipeline

import (
	"github.com/compactor-dev/compactor/sessionio"
)

// StoreRoots are the stores' roots as the service resolves them (rootOf): what an engine
// confines a store's files to (engine.Engine.Roots). A directory that cannot be resolved is
// left out: the service refuses to start with it (Config.Validate says why).
func StoreRoots(stores []Store) []string {
	var roots []string
	for _, st := range stores {
		if root, err := rootOf(st); err == nil {
			roots = append(roots, root)
		}
	}
	return roots
}

// logConfinement says once, at start, how session files are opened beneath the stores'
// roots, and why not with openat2 where it is not (docs/security.md).
func (s *Service) logConfinement() {
	switch mode, why := sessionio.Confinement(); mode {
	case sessionio.ConfineOpenat2:
		s.log.Info("session files confined to their store's root", "with", mode.String())
	default:
		s.log.Warn("session files confined to their store's root without openat2: symlinks inside a root are followed (escapes are refused; a file must stay the one first read)",
			"with", mode.String(), "why", why)
	}
}
