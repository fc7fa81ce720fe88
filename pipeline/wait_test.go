package pipeline

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go"
)

// gatedDialer dials NATS while open, and refuses while shut: a connection cut then stays
// away until the test opens the gate again.
type gatedDialer struct {
	open    atomic.Bool
	refused atomic.Int32
}

func (d *gatedDialer) Dial(network, address string) (net.Conn, error) {
	if !d.open.Load() {
		d.refused.Add(1)
		return nil, errors.New("gate shut by the test")
	}
	return net.Dial(network, address)
}

// A waiter whose connection was away when its job's final event was published (core NATS
// keeps nothing for it) still gets that event once it is back: it reads the events stream,
// not only its subscription. An enqueue --wait across a reconnect once waited out its
// whole timeout so ("the job has left the queue ... but its final event was not seen").
func TestEnqueueWaitSeesEventPublishedWhileAway(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	sid, leaf := writeSession(t, b.dir, "s.jsonl")
	s := b.service(b.config(&fakeHandler{})) // streams set up, no worker yet
	d := &gatedDialer{}
	d.open.Store(true)
	wc, err := nats.Connect(b.url, nats.SetCustomDialer(d), nats.ReconnectWait(10*time.Millisecond), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wc.Close)

	type answer struct {
		r   fleetops.EnqueueResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := fleetops.Enqueue(context.Background(), wc, wire.Job{Kind: wire.KindCompact, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf}, true, waitfor.HangGuard)
		done <- answer{r, err}
	}()
	jobs := func() uint64 {
		st, err := b.js.Stream(context.Background(), wire.StreamJobs)
		if err != nil {
			return 0
		}
		return st.CachedInfo().State.Msgs
	}
	// Queued: the waiter subscribed to the events before it published the job.
	waitfor.Until(t, "the job queued", func() bool { return jobs() == 1 })

	d.open.Store(false)
	cid, err := wc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ns.DisconnectClientByID(cid); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, "the waiter's connection cut", func() bool { return !wc.IsConnected() })

	// The job ends (its event published just before its ack) while the waiter is away.
	b.run(s)
	waitfor.Until(t, "the job answered", func() bool { return jobs() == 0 })
	// The gate was shut before the cut: still away now is away the whole time.
	if wc.IsConnected() {
		t.Fatal("the waiter was not away while the job ended")
	}
	t.Logf("the job ended while the waiter was away (%d dials refused)", d.refused.Load())

	d.open.Store(true)
	select {
	case a := <-done:
		if a.err != nil || a.r.Event == nil || a.r.Event.Outcome != OutcomeDone {
			t.Fatalf("enqueue --wait after the reconnect: %+v, %v", a.r, a.err)
		}
	case <-time.After(waitfor.HangGuard + 10*time.Second):
		t.Fatalf("enqueue --wait did not return within %s", waitfor.HangGuard+10*time.Second)
	}
}
