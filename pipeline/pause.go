package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Pausing a store: an operator (compactor pause, the console) writes a record in
// COMPACTOR_SETTINGS under paused.<store>; the store's workers read it before each fetch
// (at most every pauseCheckEvery) and, while it says paused, fetch nothing: the jobs they
// hold run to their end, the queue keeps what it has (sweeps and agents still enqueue), and
// /readyz, /metrics (compactor_store_paused), the workers' beats (status) and the console
// say so. Resuming writes the record again with Paused false. Only the operator and the
// admin may write the record; a worker may read its own store's (docs/security.md).

// pauseKeyPrefix starts a store's pause key in COMPACTOR_SETTINGS: paused.<store>.
const pauseKeyPrefix = "paused."

// pauseCheckEvery is how often a worker reads its stores' pause records: a pause stops its
// fetches within this plus one fetch's wait (fetchWait).
const pauseCheckEvery = time.Second

// pauseV is the schema version of a pause record.
const pauseV = 1

// PauseRecord is a store's pause record.
type PauseRecord struct {
	V      int       `json:"v"`
	Store  string    `json:"store"`
	Paused bool      `json:"paused"`
	Reason string    `json:"reason,omitempty"`
	By     string    `json:"by,omitempty"` // who wrote it: a host and process, or the console's user
	At     time.Time `json:"at"`
}

// pauseKey is the record's key.
func pauseKey(store string) string { return pauseKeyPrefix + store }

// SetPaused writes a store's pause record (the operator's or the admin's right). by says who
// paused it, reason why (both shown by status and the console).
func SetPaused(ctx context.Context, nc *nats.Conn, store string, paused bool, reason, by string) (PauseRecord, error) {
	if err := wire.ValidateStoreName(store); err != nil {
		return PauseRecord{}, err
	}
	if by == "" {
		host, _ := os.Hostname()
		by = fmt.Sprintf("%s pid %d", host, os.Getpid())
	}
	rec := PauseRecord{V: pauseV, Store: store, Paused: paused, Reason: reason, By: by, At: time.Now().UTC()}
	b, err := json.Marshal(rec)
	if err != nil {
		return rec, err
	}
	return guard(ctx, nc, func(ctx context.Context) (PauseRecord, error) {
		// A pause is read by the workers of the account it is written in: a store of
		// another account would never see it (docs/security.md, "The design").
		f, err := readFleet(ctx, nc)
		if err != nil {
			return rec, fmt.Errorf("pause record of store %s: %w", store, err)
		}
		if !slices.Contains(f.Stores, store) {
			return rec, fmt.Errorf("store %s is not set up in this account (its stores: %s): its workers would never read this pause record; nothing was written (the store's account's operator key, or --credentials, pauses it)",
				store, strings.Join(f.Stores, ", "))
		}
		js, err := jetstream.New(nc)
		if err != nil {
			return rec, err
		}
		if _, err := openBucket(js, BucketSettings).Put(ctx, pauseKey(store), b); err != nil {
			if unavailable(err) {
				err = diagnose(ctx, js, "KV_"+BucketSettings, err)
			}
			return rec, fmt.Errorf("pause record of store %s: %w", store, err)
		}
		return rec, nil
	})
}

// ReadPaused reads a store's pause record; a store never paused has none (nil, nil).
func ReadPaused(ctx context.Context, nc *nats.Conn, store string) (*PauseRecord, error) {
	m, err := directLast(ctx, nc, "KV_"+BucketSettings, wire.KVSubjectRoot+BucketSettings+"."+pauseKey(store))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pause record of store %s: %w", store, err)
	}
	if opOf(m.Header) != jetstream.KeyValuePut {
		return nil, nil
	}
	return pauseOf(store, m.Data)
}

// pauseOf reads a pause record. One of a newer schema is taken as paused (what a newer
// compactor wrote there is a pause, whatever else it says).
func pauseOf(store string, data []byte) (*PauseRecord, error) {
	if v, ok := recordV(data); ok && v > pauseV {
		return &PauseRecord{V: v, Store: store, Paused: true, Reason: "a newer compactor's pause record"}, nil
	}
	var r PauseRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("pause record of store %s: %w", store, err)
	}
	r.Store = store
	return &r, nil
}

// pauses is what a worker last read of its stores' pause records.
type pauses struct {
	mu sync.Mutex
	st map[string]*pauseState
	// held counts the fetch loops' turns spent paused (a test waits for some).
	held atomic.Uint64
}

type pauseState struct {
	at     time.Time    // when it was read last
	rec    *PauseRecord // nil: not paused
	logged bool         // the pause was logged
}

// paused reports whether store is paused, reading its record at most every
// pauseCheckEvery. A record that cannot be read leaves the last answer (a worker that lost
// NATS fetches nothing anyway).
func (s *Service) paused(ctx context.Context, store string) *PauseRecord {
	return s.pausedWithin(ctx, store, pauseCheckEvery)
}

// pausedWithin is paused with an answer at most maxAge old.
func (s *Service) pausedWithin(ctx context.Context, store string, maxAge time.Duration) *PauseRecord {
	p := &s.pauses
	p.mu.Lock()
	if p.st == nil {
		p.st = map[string]*pauseState{}
	}
	st := p.st[store]
	if st == nil {
		st = &pauseState{}
		p.st[store] = st
	}
	if time.Since(st.at) < maxAge {
		defer p.mu.Unlock()
		return st.rec
	}
	p.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	rec, err := ReadPaused(rctx, s.nc, store)
	cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil && s.sayEvery("pause-read-"+store, time.Minute) {
			s.log.Warn("cannot read the store's pause record; keeping the last answer", "store", store, "err", err)
		}
		st.at = time.Now()
		return st.rec
	}
	if rec != nil && !rec.Paused {
		rec = nil
	}
	switch {
	case rec != nil && !st.logged:
		s.log.Warn("store paused: taking no more jobs; the jobs held run to their end, the queue keeps the rest",
			"store", store, "by", rec.By, "reason", rec.Reason, "since", rec.At)
		st.logged = true
	case rec == nil && st.logged:
		s.log.Info("store resumed: taking jobs again", "store", store)
		st.logged = false
	}
	st.at, st.rec = time.Now(), rec
	v := 0.0
	if rec != nil {
		v = 1
	}
	s.m.paused.WithLabelValues(store).Set(v)
	return rec
}

// pausedNow is the last answer of paused, without reading the record.
func (s *Service) pausedNow(store string) *PauseRecord {
	s.pauses.mu.Lock()
	defer s.pauses.mu.Unlock()
	if st := s.pauses.st[store]; st != nil {
		return st.rec
	}
	return nil
}
