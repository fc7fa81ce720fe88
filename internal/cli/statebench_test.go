package cli

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/natstest"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/wire"
)

// BenchmarkHostMemory is the issue's "memory of a host watching 1 store of 100 stays flat
// as the others grow": a real `compactor run` process serving store s00 (1,000 sessions,
// swept every second), on a nats-server of this test process with 100 stores set up, while
// the sweep records of the 99 other stores grow from 1,000 to 10,000 to 100,000 (written as
// their hosts' sweeps would). At each size, after three more sweeps of s00: the worker's
// heap in use and resident memory (its /metrics; the median of 5 samples a second apart),
// and the messages the server delivered to the worker's connection since the start. A host
// that watched the whole bucket would be delivered every record and hold it in its memo:
// for scale, the heap of a worker of all 100 stores at 100,000 records is measured last.
// Run: make bench-state (or go test -run '^$' -bench HostMemory -benchtime 1x ./internal/cli).
func BenchmarkHostMemory(b *testing.B) {
	for range b.N {
		hostMemory(b)
	}
}

func hostMemory(b *testing.B) {
	ns := natstest.StartServer(b)
	url := ns.ClientURL()
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	stores := make([]string, 100)
	for i := range stores {
		stores[i] = fmt.Sprintf("s%02d", i)
	}
	if _, err := fleetops.Setup(ctx, nc, fleetops.SetupConfig{Stores: stores}, false, false, nil); err != nil {
		b.Fatal(err)
	}
	const own = 1000
	dir, _ := overBudgetStore(b, own)
	bin, _ := compactorBinary(b)
	port := natstest.FreePorts(b, 1)[0]
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", port)
	worker := startProcess(b, bin, "run", "--nats-url", url, "--store", "s00="+dir, "--sweep-every", "1s", "--context-window", "2000000",
		"--metrics-addr", metricsAddr, "--data-dir", b.TempDir(), "--log-format", "json")
	metric := func(name string) float64 {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		total, found := 0.0, false
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if rest, ok := strings.CutPrefix(line, name); ok && rest != "" && (rest[0] == ' ' || rest[0] == '{') {
				f := strings.Fields(line)
				v, _ := strconv.ParseFloat(f[len(f)-1], 64)
				total += v
				found = true
			}
		}
		if !found {
			return -1
		}
		return total
	}
	swept := func() float64 {
		return metric(`compactor_sweep_files_total{result="assessed",store="s00"}`) + metric(`compactor_sweep_files_total{result="unchanged",store="s00"}`)
	}
	waitFor := func(what string, cond func() bool) {
		waitfor.UntilGuard(b, 3*time.Minute, what, func() bool {
			if worker.Exited() {
				b.Fatalf("the worker exited (%d) while waiting for %s", worker.Code(), what)
			}
			return cond()
		})
	}
	waitFor("the first sweep of s00", func() bool { return metric(`compactor_sweep_files_total{result="assessed",store="s00"}`) >= own })
	delivered := func() (msgs, bytes int64) {
		cz, err := ns.Connz(&server.ConnzOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range cz.Conns {
			if strings.HasPrefix(c.Name, "compactor ") {
				msgs, bytes = msgs+c.OutMsgs, bytes+c.OutBytes
			}
		}
		return msgs, bytes
	}
	kv := "$KV." + wire.BucketSweep + "."
	written := 0
	type row struct {
		others          int
		heapMB, rssMB   float64
		msgs, kilobytes int64
	}
	var rows []row
	for _, level := range []int{1000, 10000, 100000} {
		for ; written < level; written++ {
			st := stores[1+written%99]
			rec := fmt.Sprintf(`{"v":1,"path":"--home-u-p%d--/2026-01-01T00-00-00-000Z_%08d.jsonl","size":%d,"mtimeNs":1767225600000000000,"sessionId":"019d0000-0000-7000-8000-%012d","leafId":"%08x","tokens":%d,"contextWindow":200000,"at":"2026-01-01T00:00:00Z","settings":"v1:0:16384:tiktoken:nearest:20000"}`,
				written%50, written, 1000+written, written, written, 3000+written)
			if _, err := js.PublishAsync(kv+st+"."+fmt.Sprintf("%040x", written), []byte(rec)); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(2 * time.Minute):
			b.Fatal("the records were not all stored")
		}
		next := swept() + 3*own
		waitFor("three sweeps of s00", func() bool { return swept() >= next })
		var heap, rss []float64
		for range 5 {
			heap, rss = append(heap, metric("go_memstats_heap_inuse_bytes")), append(rss, metric("process_resident_memory_bytes"))
			time.Sleep(time.Second)
		}
		slices.Sort(heap)
		slices.Sort(rss)
		msgs, bytes := delivered()
		rows = append(rows, row{others: level, heapMB: heap[2] / 1e6, rssMB: rss[2] / 1e6, msgs: msgs, kilobytes: bytes / 1000})
	}
	worker.signal(b, 15)
	worker.Await(b)
	// For scale: a host that holds every store's records in its memo, a worker of all 100
	// stores (the other 99 with empty directories), at 100,000 records.
	args := []string{"run", "--nats-url", url, "--store", "s00=" + dir, "--sweep-every", "1s", "--context-window", "2000000",
		"--metrics-addr", metricsAddr, "--data-dir", b.TempDir(), "--log-format", "json"}
	for _, st := range stores[1:] {
		args = append(args, "--store", st+"="+b.TempDir())
	}
	worker = startProcess(b, bin, args...)
	waitFor("the all-stores worker's first sweeps", func() bool { return swept() >= 3*own })
	var allHeap []float64
	for range 5 {
		allHeap = append(allHeap, metric("go_memstats_heap_inuse_bytes"))
		time.Sleep(time.Second)
	}
	slices.Sort(allHeap)
	worker.signal(b, 15)
	worker.Await(b)
	var out strings.Builder
	fmt.Fprintf(&out, "a worker of store s00 (%d sessions, swept every second) while 99 other stores' sweep records grow:\n", own)
	fmt.Fprintf(&out, "  %-16s %-14s %-12s %s\n", "others' records", "heap in use", "RSS", "delivered to the worker since its start")
	for _, r := range rows {
		fmt.Fprintf(&out, "  %-16d %-14s %-12s %d messages, %d kB\n", r.others, fmt.Sprintf("%.1f MB", r.heapMB), fmt.Sprintf("%.1f MB", r.rssMB), r.msgs, r.kilobytes)
	}
	fmt.Fprintf(&out, "  for scale, a worker of all 100 stores (every record in its memo) at %d records: heap in use %.1f MB\n", written, allHeap[2]/1e6)
	b.Log(out.String())
	first, last := rows[0], rows[len(rows)-1]
	b.ReportMetric(last.heapMB-first.heapMB, "heap-growth-MB")
	b.ReportMetric(last.rssMB-first.rssMB, "rss-growth-MB")
	b.ReportMetric(float64(last.msgs-first.msgs), "msgs-delivered-during-growth")
	if grew := last.msgs - first.msgs; grew > int64(last.others-first.others)/10 {
		b.Errorf("the worker was delivered %d messages while %d records of other stores were written: it watches more than its store", grew, last.others-first.others)
	}
}
