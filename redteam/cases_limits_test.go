//go:build redteam

package redteam

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor-dev/compactor/access"
)

// hostA at every one of its limits: its jobs (of a job version nobody works, handed back
// for ever: they are bounded by hostA's own jobs stream, its bytes, messages and age), its
// events, its dead letters, every bucket's bytes, the consumers it may create; its
// account's storage. Where one stream or bucket holds every store's, hostA filling it gets
// hostB's enqueue refused "stream is full", its writes "insufficient resources", its sweeps
// "maximum consumers limit reached". hostB's flows are timed while hostA stays full.

// fill publishes to subjects until the stream refuses (or n messages), asynchronously.
func fill(ctx context.Context, a *Attacker, n int, subject func(i int) string, h Header, body []byte) (taken int, refusal error) {
	for i := 0; i < n; i += 256 {
		var acks []jetstream.PubAckFuture
		for j := i; j < min(i+256, n); j++ {
			m := nats.NewMsg(subject(j))
			for k, v := range h {
				m.Header.Set(k, v)
			}
			m.Data = body
			f, err := a.JS.PublishMsgAsync(m)
			if err != nil {
				return taken, err
			}
			acks = append(acks, f)
		}
		select {
		case <-a.JS.PublishAsyncComplete():
		case <-ctx.Done():
			return taken, ctx.Err()
		case <-time.After(30 * time.Second):
			return taken, errors.New("publishes not acknowledged in 30 s")
		}
		for _, f := range acks {
			select {
			case <-f.Ok():
				taken++
			case err := <-f.Err():
				refusal = err
			}
		}
		if refusal != nil {
			return taken, refusal
		}
	}
	return taken, nil
}

func init() {
	register(Case{Name: "hostA at every one of its limits: jobs of an unknown version, events, dead letters, every bucket, consumers", Roles: []access.Role{access.RoleWorker}, Last: true,
		Attack: func(ctx context.Context, a *Attacker) (func(), error) {
			body := []byte(`{"v":99,"kind":"compact","store":"hostA","path":"p","sessionId":"s","id":"x","pad":"` + strings.Repeat("x", 900) + `"}`)
			var summary []string
			note := func(what string, n int, err error) {
				summary = append(summary, fmt.Sprintf("%s: %d taken, then %v", what, n, err))
			}
			n, err := fill(ctx, a, 100000, func(i int) string { return fmt.Sprintf("compactor.jobs.hostA.rt-%d.compact", i) }, nil, body)
			note("jobs", n, err)
			if err == nil {
				return nil, fmt.Errorf("taken: %d jobs and no limit", n)
			}
			n, err = fill(ctx, a, 5000, func(i int) string { return fmt.Sprintf("compactor.events.hostA.rt-%d.1", i) }, nil, body)
			note("events (the oldest go)", n, err)
			n, err = fill(ctx, a, 5000, func(i int) string { return fmt.Sprintf("compactor.dlq.hostA.rt-%d", i) }, nil, body)
			note("dead letters (the oldest go)", n, err)
			for _, b := range storeBuckets {
				n, err = fill(ctx, a, 100000, func(i int) string { return fmt.Sprintf("$KV.%s.hostA.rt-%d", b, i) }, nil, body)
				note(b, n, err)
				if err == nil {
					return nil, fmt.Errorf("taken: %d keys in %s and no limit", n, b)
				}
			}
			created := 0
			for i := range 1000 {
				cfg := fmt.Sprintf(`{"stream_name":"KV_COMPACTOR_SWEEP","config":{"name":"rt-%d","durable_name":"rt-%d","filter_subject":"$KV.COMPACTOR_SWEEP.hostA.>","ack_policy":"none"}}`, i, i)
				m, err := a.Request(ctx, fmt.Sprintf("$JS.API.CONSUMER.CREATE.KV_COMPACTOR_SWEEP.rt-%d.$KV.COMPACTOR_SWEEP.hostA.>", i), "", []byte(cfg))
				if err != nil || strings.Contains(string(m.Data), `"error"`) {
					note("durable consumers of the sweep records", created, fmt.Errorf("%v %s", err, m.Data))
					break
				}
				created++
			}
			if created >= 1000 {
				return nil, errors.New("taken: 1000 durable consumers and no limit")
			}
			js, _ := jetstream.New(a.adminA)
			if info, err := js.AccountInfo(ctx); err == nil {
				summary = append(summary, fmt.Sprintf("hostA's account: %d of %d bytes reserved, %d bytes stored, %d consumers of %d",
					info.Tier.ReservedStore, info.Limits.MaxStore, info.Store, info.Consumers, info.Limits.MaxConsumers))
			}
			fmt.Println("=== red team: hostA at its limits:\n    " + strings.Join(summary, "\n    "))
			return nil, nil
		}})
}
