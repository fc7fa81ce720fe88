package pipeline

import (
	"sync"
	"testing"

	"github.com/compactor-dev/compactor/fleetops"
)

// Processes that start together on a new root agree on one marker, and none reads a marker
// another is still writing (it was created empty, then written: a reader in between was
// refused with "is not a compactor store marker").
func TestStoreMarkerWrittenWhole(t *testing.T) {
	t.Parallel()
	for trial := range 50 {
		root := t.TempDir()
		const n = 8
		ids := make([]fleetops.StoreIdentity, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { ids[i], errs[i] = fleetops.Identify("default", root, false) })
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("trial %d: %v", trial, errs[i])
			}
			if ids[i].Marker == "" || ids[i].Marker != ids[0].Marker {
				t.Fatalf("trial %d: markers %q and %q", trial, ids[i].Marker, ids[0].Marker)
			}
		}
	}
}
