package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/natstest"
	"github.com/compactor-dev/compactor/internal/proctest"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/sweep"
	"github.com/compactor-dev/compactor/wire"
)

// A worker serving many stores sweeps them all and works what its sweep enqueues. Its
// sweeps' memo watches each store's sweep records with a consumer of its own (the filter
// a worker's permissions allow is one store's keys), so the sweep records' bucket must
// hold a watch per store: it allowed 64 whatever the stores, and the sweep of a worker of
// more stores failed, "nats: maximum consumers limit reached", and enqueued nothing.
func TestWorkerOfManyStoresSweepsAndWorks(t *testing.T) {
	t.Parallel()
	const n = 80
	b := newBundle(t)
	h := &fakeHandler{}
	cfg := b.config(h)
	cfg.Assessor = leafAssessor
	cfg.Stores = nil
	for i := range n {
		cfg.Stores = append(cfg.Stores, Store{Name: fmt.Sprintf("s%02d", i), Dir: t.TempDir()})
	}
	last := cfg.Stores[n-1]
	writeSession(t, last.Dir, "a.jsonl")
	s := b.service(cfg)
	b.run(s)

	st := sweepAndWait(t, b, s)
	if st.Enqueued != 1 {
		t.Fatalf("the sweep of %d stores: %+v, want one session enqueued", n, st)
	}
	if c := countType(t, filepath.Join(last.Dir, "a.jsonl"), "compaction"); c != 1 {
		t.Fatalf("%d compactions in store %s's session, want 1", c, last.Name)
	}
	stream, err := b.js.Stream(context.Background(), "KV_"+wire.BucketSweep)
	if err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, "a watch of each store's sweep records", func() bool {
		info, err := stream.Info(context.Background())
		return err == nil && info.State.Consumers == n
	})
}

// The room setup gives the watches of the sweep records follows the stores of the account
// (8 each, at least 64): a setup of more stores later counts those set up before (the
// fleet's settings keep them) and logs the change. The bucket and the limit are the
// account's: an account that fills its own sweep records' consumers takes nothing from
// another's. An account whose max_consumers is lower than its stores need gets that much,
// and setup says what to raise; a worker refused a watch then says the same.
func TestSweepWatchesFollowTheAccountsStores(t *testing.T) {
	t.Parallel()
	const n = 80
	stores := make([]string, n)
	for i := range stores {
		stores[i] = fmt.Sprintf("s%02d", i)
	}
	dir := t.TempDir()
	conf := fmt.Sprintf("host: 127.0.0.1\nport: -1\njetstream { store_dir: %q }\naccounts {\n", filepath.Join(dir, "js"))
	for name, limit := range map[string]int{"A": fleetops.AccountConsumers(n), "B": fleetops.AccountConsumers(1), "OLD": 2*n + 64 + 24} {
		conf += fmt.Sprintf("  %s: { jetstream: { max_file: %d, max_mem: 0, max_consumers: %d }, users: [ {user: %s, password: pw} ] }\n", name, fleetops.AccountStorage(1), limit, name)
	}
	conf += "}\n"
	if err := os.WriteFile(filepath.Join(dir, "server.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(filepath.Join(dir, "server.conf"))
	if err != nil {
		t.Fatal(err)
	}
	url := natstest.StartServerWith(t, opts).ClientURL()
	ctx := context.Background()
	sweepLimit := func(js jetstream.JetStream) (limit, consumers int) {
		t.Helper()
		info := streamInfoOf(t, js, "KV_"+wire.BucketSweep)
		return info.Config.MaxConsumers, info.State.Consumers
	}

	ncA, jsA := connectAs(t, url, "A")
	var log proctest.Buffer
	for _, part := range [][]string{stores[:n/2], stores[n/2:]} {
		if _, err := fleetops.Setup(ctx, ncA, fleetops.SetupConfig{Stores: part}, false, false, logger(&log)); err != nil {
			t.Fatal(err)
		}
	}
	if limit, _ := sweepLimit(jsA); limit != fleetops.SweepWatches(n) || limit != 8*n {
		t.Fatalf("account A of %d stores, set up in two halves: the sweep records allow %d consumers, want %d", n, limit, 8*n)
	}
	if want := fmt.Sprintf("setting=max_consumers old=%d new=%d", 8*n/2, 8*n); !strings.Contains(log.String(), want) {
		t.Errorf("the second setup did not log %q:\n%s", want, log.String())
	}

	ncB, jsB := connectAs(t, url, "B")
	if _, err := fleetops.Setup(ctx, ncB, fleetops.SetupConfig{Stores: []string{"hostB"}}, false, false, nil); err != nil {
		t.Fatal(err)
	}
	limitB, _ := sweepLimit(jsB)
	if limitB != 64 {
		t.Fatalf("account B of one store: the sweep records allow %d consumers, want 64", limitB)
	}
	// B fills its own sweep records' consumers (durable: they stay).
	for i := range limitB {
		if _, err := jsB.CreateConsumer(ctx, "KV_"+wire.BucketSweep, jetstream.ConsumerConfig{Durable: fmt.Sprintf("fill-%d", i), FilterSubject: wire.KVSubjectRoot + wire.BucketSweep + ".hostB.>"}); err != nil {
			t.Fatalf("B's consumer %d of %d: %v", i+1, limitB, err)
		}
	}
	if _, err := jsB.CreateConsumer(ctx, "KV_"+wire.BucketSweep, jetstream.ConsumerConfig{Durable: "one-more"}); err == nil || !strings.Contains(err.Error(), "maximum consumers") {
		t.Fatalf("B's consumer beyond its limit: %v", err)
	}
	// A watches each of its stores meanwhile.
	kvA := fleetops.OpenBucket(jsA, wire.BucketSweep)
	for _, st := range stores {
		w, err := kvA.Watch(ctx, st)
		if err != nil {
			t.Fatalf("A's watch of store %s while B is full: %v", st, err)
		}
		defer func() { _ = w.Stop() }()
	}
	if _, consumers := sweepLimit(jsA); consumers != n {
		t.Fatalf("A holds %d watches, want %d", consumers, n)
	}

	// An account whose max_consumers an older auth counted (64 watches whatever its
	// stores): the server applies it to each stream, so the bucket gets all of it, which
	// holds the watches of three workers of its 80 stores but not of a fourth.
	ncOld, jsOld := connectAs(t, url, "OLD")
	var oldLog proctest.Buffer
	if _, err := fleetops.Setup(ctx, ncOld, fleetops.SetupConfig{Stores: stores}, false, false, logger(&oldLog)); err != nil {
		t.Fatal(err)
	}
	oldLimit := 2*n + 64 + 24
	if limit, _ := sweepLimit(jsOld); limit != oldLimit {
		t.Fatalf("an account of %d stores with an older auth's max_consumers (%d): the sweep records allow %d consumers, want all of it", n, oldLimit, limit)
	}
	if !strings.Contains(oldLog.String(), "--max-consumers") || !strings.Contains(oldLog.String(), fmt.Sprintf("needed_account_max_consumers=%d", fleetops.AccountConsumers(n))) {
		t.Errorf("setup in an account with too few consumers did not say what to raise:\n%s", oldLog.String())
	}
	for i := range oldLimit/n + 1 {
		m, err := sweep.OpenMemo(ctx, fleetops.OpenBucket(jsOld, wire.BucketSweep), stores, slog.New(slog.DiscardHandler), nil)
		if i < oldLimit/n {
			if err != nil {
				t.Fatalf("memo %d of %d stores in an account with room for %d watches: %v", i+1, n, oldLimit, err)
			}
			defer m.Close()
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "maximum consumers limit reached") || !strings.Contains(err.Error(), "compactor setup") {
			t.Fatalf("memo %d of %d stores in an account with room for %d watches: %v", i+1, n, oldLimit, err)
		}
		t.Logf("refused: %v", err)
	}
}
