package pipeline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// A store has one owner. Two hosts that keep the default store name take each other's
// jobs, resolve their paths under their own roots, find nothing and dead-letter them. So a
// worker identifies its store's directory (a marker file with a random id in the root, and
// the root's device and inode) and claims the store's name in COMPACTOR_WORKERS
// (<store>._owner, renewed with every beat, gone when no worker has renewed it for
// workerBeatTTL); a worker whose directory is another refuses to start and names the
// owner's host, unless the store is declared shared (one directory mounted on several
// hosts: Config.SharedStores).

// markerFile is the store's marker, in its root.
const markerFile = ".compactor-store"

// StoreIdentity is what makes a store's directory itself, as a worker reports it.
type StoreIdentity struct {
	Store  string `json:"store"`
	Marker string `json:"marker,omitempty"` // the id in <root>/.compactor-store ("" when none could be written)
	Host   string `json:"host"`
	Root   string `json:"root"`
	Dev    uint64 `json:"dev"`
	Ino    uint64 `json:"ino"`
	Shared bool   `json:"shared,omitempty"`
}

// sameDir reports whether two identities are one directory seen from one machine: the
// same marker, device and inode (a restart, a container of the same host with the
// directory mounted, a second process). The same marker under another device or inode is
// the directory seen through another mount (a shared file system on another host) or a
// copy of it: a store must be declared shared for that.
func (a StoreIdentity) sameDir(b StoreIdentity) bool {
	if a.Marker == "" || b.Marker == "" {
		return a.Marker == b.Marker && a.Host == b.Host && a.Dev == b.Dev && a.Ino == b.Ino
	}
	return a.Marker == b.Marker && a.Dev == b.Dev && a.Ino == b.Ino
}

func (a StoreIdentity) String() string {
	s := fmt.Sprintf("host %s, root %s (device %d, inode %d", a.Host, a.Root, a.Dev, a.Ino)
	if a.Marker != "" {
		s += ", marker " + a.Marker
	}
	return s + ")"
}

type marker struct {
	ID      string    `json:"id"`
	Store   string    `json:"store"`
	Created time.Time `json:"created"`
}

// identify reads (or writes, the first time) the marker of a store's root.
func identify(store, root string, shared bool) (StoreIdentity, error) {
	host, _ := os.Hostname()
	id := StoreIdentity{Store: store, Host: host, Root: root, Shared: shared}
	fi, err := os.Stat(root)
	if err != nil {
		return id, fmt.Errorf("store %s: %w", store, err)
	}
	id.Dev, id.Ino = devIno(fi)
	p := filepath.Join(root, markerFile)
	for range 2 {
		b, err := os.ReadFile(p)
		if err == nil {
			var m marker
			if json.Unmarshal(b, &m) != nil || m.ID == "" {
				return id, fmt.Errorf("store %s: %s is not a compactor store marker (remove it to have a new one written)", store, p)
			}
			id.Marker = m.ID
			return id, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return id, fmt.Errorf("store %s: %w", store, err)
		}
		var r [16]byte
		_, _ = rand.Read(r[:])
		b, _ = json.Marshal(marker{ID: hex.EncodeToString(r[:]), Store: store, Created: time.Now().UTC()})
		// Written whole beside it, then linked into place: the link fails if another
		// process was first, and a reader never sees a marker half written.
		tmp, err := os.CreateTemp(root, markerFile+".*")
		if err != nil {
			return id, nil // a root this process may not write: it is known by its device and inode
		}
		_, werr := tmp.Write(append(b, '\n'))
		if cerr := tmp.Close(); werr == nil {
			werr = cerr
		}
		if werr == nil {
			werr = os.Link(tmp.Name(), p)
		}
		_ = os.Remove(tmp.Name())
		if errors.Is(werr, os.ErrExist) {
			continue // written by another process meanwhile: read it
		}
		if werr != nil {
			return id, nil
		}
	}
	return id, nil
}

// ownerRecord is the value of a store's owner key: the owner's identity, with the
// record's schema version.
type ownerRecord struct {
	V int `json:"v"` // ownerV
	StoreIdentity
}

// ownerKey is the store's claim in COMPACTOR_WORKERS.
func ownerKey(store string) string { return store + "._owner" }

// OwnerError is a worker refused because its store is served from another directory.
type OwnerError struct {
	Mine, Other StoreIdentity
	Renewed     time.Duration // how long ago the owner renewed its claim
}

func (e *OwnerError) Error() string {
	why := "another directory"
	if e.Mine.Marker != "" && e.Mine.Marker == e.Other.Marker {
		why = "the same marker seen through another mount (a shared file system, or a copy)"
	}
	return fmt.Sprintf("store %s is already served from %s: %s, renewed %s ago; this worker's root is %s. A store has one owner: "+
		"give this directory another store name (--store NAME=DIR), stop the other worker, or, if both roots are one directory mounted on several hosts, declare the store shared (--shared-store %s)",
		e.Mine.Store, why, e.Other, e.Renewed.Round(time.Second), e.Mine, e.Mine.Store)
}

// checkOwner compares this process's identity of a store with the store's owner. claim:
// take the name when nobody owns it (a worker; a sweep only checks). It returns the
// owner's identity when another directory owns the store and it is not declared shared.
//
// A record under the store's key that names another store is no owner of it: onForeign (if
// not nil) is told, and it is claimed over.
//
// An owner record of a newer schema version cannot be compared: the store is refused (it
// may be served from another directory, which is what the record is there to prevent).
func checkOwner(ctx context.Context, kv *kvBucket, mine StoreIdentity, claim bool, onForeign func(error)) error {
	val, _ := json.Marshal(ownerRecord{V: ownerV, StoreIdentity: mine})
	for range 5 {
		e, err := kv.Get(ctx, ownerKey(mine.Store))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			if !claim {
				return nil
			}
			if _, err = kv.Create(ctx, ownerKey(mine.Store), val); errors.Is(err, jetstream.ErrKeyExists) {
				continue // claimed meanwhile: read whose it is
			}
			if err != nil {
				return fmt.Errorf("store %s: claim its name in %s: %w", mine.Store, BucketWorkers, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("store %s: read its owner in %s: %w", mine.Store, BucketWorkers, err)
		}
		if err := newerThan(BucketWorkers, ownerKey(mine.Store), e.Value(), ownerV); err != nil {
			return fmt.Errorf("store %s: its owner cannot be compared with this directory: %w; upgrade this compactor to the version of the store's workers (the record expires %s after they stop)",
				mine.Store, err, workerBeatTTL)
		}
		var other StoreIdentity
		readable := json.Unmarshal(e.Value(), &other) == nil
		if readable && other.Store != mine.Store {
			// A record under this store's key that names another store: not an owner of
			// this one (foreign.go); claimed over like a damaged record.
			if onForeign != nil {
				onForeign(&ForeignError{Kind: "owner record", Where: wire.KVSubjectRoot + BucketWorkers + "." + ownerKey(mine.Store), Store: mine.Store,
					NamesStore: other.Store})
			}
			readable = false
		}
		if !readable || mine.sameDir(other) || mine.Shared || other.Shared {
			if claim {
				if _, err = kv.Put(ctx, ownerKey(mine.Store), val); err != nil {
					return fmt.Errorf("store %s: renew its claim in %s: %w", mine.Store, BucketWorkers, err)
				}
			}
			return nil
		}
		return &OwnerError{Mine: mine, Other: other, Renewed: time.Since(e.Created())}
	}
	return fmt.Errorf("store %s: its owner key keeps changing", mine.Store)
}

// identities identifies the service's stores.
func (s *Service) identities() (map[string]StoreIdentity, error) {
	out := map[string]StoreIdentity{}
	for _, st := range s.cfg.Stores {
		id, err := identify(st.Name, s.roots[st.Name], slices.Contains(s.cfg.SharedStores, st.Name))
		if err != nil {
			return nil, err
		}
		out[st.Name] = id
	}
	return out, nil
}
