package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/wire"
)

// beatServing announces this worker for each of its stores now and every workerBeatEvery
// until the returned stop is called, renews the stores' owner keys, and reads the fleet's
// settings again (a lease TTL changed by setup applies from the next renewal). A failed
// put is logged; the next one may succeed. A store whose owner key another directory has
// taken meanwhile (this worker lost NATS for longer than workerBeatTTL) is said at error
// level at each beat: two directories serve it.
func (s *Service) beatServing(ctx context.Context) (stop func()) {
	host, _ := os.Hostname()
	started := time.Now().UTC()
	beat := func() {
		for _, st := range s.cfg.Stores {
			b, _ := json.Marshal(fleetops.WorkerBeat{V: fleetops.BeatV, Worker: s.worker, Store: st.Name, Host: host, Identity: s.ids[st.Name], Concurrency: s.cfg.Concurrency, Started: started, At: time.Now().UTC(),
				Version: s.cfg.Version, JobVersions: s.cfg.JobVersions, InFlight: s.running.count(), Paused: s.pausedNow(st.Name) != nil})
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := s.res.workers.Put(pctx, fleetops.WorkerKey(st.Name, s.worker), b)
			if err == nil {
				err = fleetops.CheckOwner(pctx, s.res.workers, s.ids[st.Name], true, func(err error) { s.foreign(st.Name, foreignOwner, err) })
			}
			cancel()
			var oe *fleetops.OwnerError
			switch {
			case errors.As(err, &oe):
				s.log.Error("another directory has taken this store's name: two directories serve it; stop one of them", "store", st.Name, "err", err)
			case err != nil && ctx.Err() == nil:
				s.log.Warn("cannot report this worker as serving its store; clients may refuse to queue for it", "store", st.Name, "bucket", wire.BucketWorkers, "err", err)
			}
		}
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var newer *fleetops.NewerRecordError
		switch f, err := fleetops.ReadFleet(fctx, s.nc); {
		case err == nil:
			s.follow(*f)
		case errors.As(err, &newer) && s.sayEvery("settings-newer", time.Hour):
			s.log.Warn("the fleet's settings were rewritten by a newer compactor: this worker keeps those it started with; upgrade it", "err", err)
		case ctx.Err() == nil:
			s.log.Debug("fleet settings not read again", "err", err)
		}
		cancel()
	}
	beat()
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(fleetops.WorkerBeatEvery)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				beat()
			}
		}
	}()
	return func() { close(quit); <-done }
}

// identities identifies the service's stores.
func (s *Service) identities() (map[string]fleetops.StoreIdentity, error) {
	out := map[string]fleetops.StoreIdentity{}
	for _, st := range s.cfg.Stores {
		id, err := fleetops.Identify(st.Name, s.roots[st.Name], slices.Contains(s.cfg.SharedStores, st.Name))
		if err != nil {
			return nil, err
		}
		out[st.Name] = id
	}
	return out, nil
}
