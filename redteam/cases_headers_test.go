//go:build redteam

package redteam

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/wire"
)

// Every JetStream header that acts beyond its own message (nats-server v2.15.2's
// stream.go; docs/security.md, "Headers"), on every subject hostA's roles write with
// JetStream.

var storeBuckets = []string{pipeline.BucketLeases, pipeline.BucketSweep, pipeline.BucketAttempts, wire.BucketPrepared,
	pipeline.BucketWorkers, pipeline.BucketSpend}

// ownSubjects are the subjects a's role may publish to that a stream takes.
func ownSubjects(a *Attacker) []string {
	jobs := wire.JobSubject("hostA", "rt-x", wire.KindCompact)
	if a.Role == pipeline.RoleAgent {
		return []string{jobs}
	}
	out := []string{jobs, wire.JobEventSubject("hostA", "rt-x", 1), wire.DLQSubject("hostA", "rt-x")}
	for _, b := range storeBuckets {
		out = append(out, "$KV."+b+".hostA.rt-x")
	}
	return out
}

var agentAndWorker = []pipeline.Role{pipeline.RoleWorker, pipeline.RoleAgent}

// refusedEverywhere is a case whose header must be refused on every subject hostA writes.
func refusedEverywhere(name string, h Header) Case {
	return Case{Name: name, Roles: agentAndWorker, Attack: func(ctx context.Context, a *Attacker) (func(), error) {
		for _, subj := range ownSubjects(a) {
			_, err := a.Publish(ctx, subj, h, []byte(`{"v":1}`))
			if e := a.Refused(err, fmt.Sprintf("%v on %s", h, subj)); e != nil {
				return nil, e
			}
		}
		return nil, nil
	}}
}

func init() {
	// Rollups: where a stream allows them, one publish with Nats-Rollup: all to hostA's own
	// key wipes every store's values; no stream of compactor's allows them.
	register(refusedEverywhere("Nats-Rollup: all on every subject hostA writes", Header{"Nats-Rollup": "all"}))
	register(refusedEverywhere("Nats-Rollup: sub on every subject hostA writes", Header{"Nats-Rollup": "sub"}))
	// Repeated once a second while hostB works (with rollups allowed: every lease of every
	// store lost).
	register(Case{Name: "Nats-Rollup: all on hostA's lease, once a second during hostB's flows", Roles: []pipeline.Role{pipeline.RoleWorker},
		Attack: func(ctx context.Context, a *Attacker) (func(), error) {
			stop := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				t := time.NewTicker(time.Second)
				defer t.Stop()
				for {
					_, err := a.Publish(ctx, "$KV."+pipeline.BucketLeases+".hostA.rt-x", Header{"Nats-Rollup": "all"}, []byte("{}"))
					if e := a.Refused(err, "a rollup on hostA's lease"); e != nil {
						done <- e
						return
					}
					select {
					case <-stop:
						done <- nil
						return
					case <-t.C:
					}
				}
			}()
			return func() { close(stop); <-done }, nil
		}})
	// Counters, schedules (their target named hostB's subject), atomic batches, a stream
	// source, a schedule's purge: features no stream enables.
	register(refusedEverywhere("Nats-Incr (a counter)", Header{"Nats-Incr": "1"}))
	register(Case{Name: "Nats-Schedule with hostB's job as its target", Roles: agentAndWorker, Attack: func(ctx context.Context, a *Attacker) (func(), error) {
		for _, subj := range ownSubjects(a) {
			_, err := a.Publish(ctx, subj, Header{"Nats-Schedule": "@every 1s", "Nats-Schedule-Target": a.B.Jobs, "Nats-Schedule-TTL": "1s"}, []byte(`{"v":1}`))
			if e := a.Refused(err, "a schedule on "+subj); e != nil {
				return nil, e
			}
		}
		return nil, nil
	}})
	register(refusedEverywhere("Nats-Batch-Id (an atomic batch)", Header{"Nats-Batch-Id": "rt", "Nats-Batch-Sequence": "1", "Nats-Batch-Commit": "1"}))
	register(refusedEverywhere("Nats-Stream-Source on a client's publish", Header{"Nats-Stream-Source": "COMPACTOR_JOBS"}))
	register(refusedEverywhere("Nats-Schedule-Next: purge with a Nats-Scheduler", Header{"Nats-Schedule-Next": "purge", "Nats-Scheduler": "compactor.jobs.hostB.x.compact"}))
	register(refusedEverywhere("Nats-Expected-Stream naming another stream", Header{"Nats-Expected-Stream": "COMPACTOR_JOBS_hostB"}))
	// Message TTLs: only the sweep records' bucket takes them (its own markers).
	register(Case{Name: "Nats-TTL on every subject hostA writes", Roles: agentAndWorker, Attack: func(ctx context.Context, a *Attacker) (func(), error) {
		for _, subj := range ownSubjects(a) {
			_, err := a.Publish(ctx, subj, Header{"Nats-TTL": "never"}, []byte(`{"v":1}`))
			if strings.Contains(subj, pipeline.BucketSweep) {
				continue // hostA's own sweep records: a marker that never expires, in hostA's bucket, within its limits
			}
			if e := a.Refused(err, "a TTL on "+subj); e != nil {
				return nil, e
			}
		}
		return nil, nil
	}})
	// Headers a reader interprets (and one the server checks on API requests and batches,
	// kept with a plain publish's message): on hostA's own subjects, hostA's alone.
	register(Case{Name: "KV-Operation, Nats-Marker-Reason and Nats-Required-Api-Level on hostA's own subjects", Roles: agentAndWorker,
		Attack: func(ctx context.Context, a *Attacker) (func(), error) {
			for _, subj := range ownSubjects(a) {
				for _, h := range []Header{{"KV-Operation": "PURGE"}, {"KV-Operation": "DEL"}, {"Nats-Marker-Reason": "Remove"}, {"Nats-Marker-Reason": "MaxAge"},
					{"Nats-Required-Api-Level": "999"}} {
					_, _ = a.Publish(ctx, subj, h, nil)
				}
			}
			return nil, nil
		}})
	// Expected-last-* with a subject: they answered with another store's sequences.
	register(Case{Name: "Nats-Expected-Last-Subject-Sequence-Subject naming hostB's subjects", Roles: agentAndWorker,
		Attack: func(ctx context.Context, a *Attacker) (func(), error) {
			var targets []string
			for _, k := range a.B.Keys {
				targets = append(targets, k, strings.TrimSuffix(k, k[strings.LastIndexByte(k, '.'):])+".>")
			}
			targets = append(targets, a.B.Jobs, "compactor.jobs.hostB.>", a.B.Events, "compactor.events.hostB.>", a.B.DLQ, "compactor.dlq.hostB.>")
			for _, subj := range ownSubjects(a) {
				for _, target := range targets {
					// The same question about a store that exists nowhere: the answers must be
					// alike, or the answer says something of hostB's.
					none := strings.ReplaceAll(target, "hostB", "zz-none")
					got, gerr := a.Publish(ctx, subj, Header{"Nats-Expected-Last-Subject-Sequence": "1", "Nats-Expected-Last-Subject-Sequence-Subject": target}, []byte(`{"v":1}`))
					want, werr := a.Publish(ctx, subj, Header{"Nats-Expected-Last-Subject-Sequence": "1", "Nats-Expected-Last-Subject-Sequence-Subject": none}, []byte(`{"v":1}`))
					if fmt.Sprint(gerr) != strings.ReplaceAll(fmt.Sprint(werr), "zz-none", "hostB") || (got == nil) != (want == nil) {
						if a.heldByHostA(ctx, target) {
							continue // hostA's own messages on that subject (an earlier case's relay): its own
						}
						return nil, fmt.Errorf("leak: %s with %s answered %v, with a store of none %v", subj, target, gerr, werr)
					}
				}
			}
			return nil, nil
		}})
	register(Case{Name: "Nats-Expected-Last-Msg-Id and Nats-Expected-Last-Sequence", Roles: agentAndWorker,
		Attack: func(ctx context.Context, a *Attacker) (func(), error) {
			ids := hostBJobIDs(ctx, a)
			for _, subj := range ownSubjects(a) {
				for _, h := range []Header{{"Nats-Expected-Last-Msg-Id": "rt-none"}, {"Nats-Expected-Last-Sequence": "999999"}} {
					_, err := a.Publish(ctx, subj, h, []byte(`{"v":1}`))
					for _, id := range ids {
						if err != nil && strings.Contains(err.Error(), id) {
							return nil, fmt.Errorf("leak: %v on %s answered hostB's job id %s: %v", h, subj, id, err)
						}
					}
				}
			}
			return nil, nil
		}})
	// A job of hostA's with hostB's next preparation's message id: hostB's preparation
	// was dropped as a duplicate before (it shared the jobs stream's window).
	register(Case{Name: "Nats-Msg-Id of hostB's next preparation on hostA's job", Roles: agentAndWorker,
		Attack: func(ctx context.Context, a *Attacker) (func(), error) {
			subj := wire.JobSubject("hostA", "rt-dup", wire.KindPrepare)
			_, _ = a.Publish(ctx, subj, Header{jetstream.MsgIDHeader: a.B.NextPrepareID}, []byte(`{"v":99}`))
			return nil, a.InHostA(ctx, wire.StreamJobs, subj)
		}})
	// Message tracing: the destination is checked against the publisher's permissions,
	// and a trace to its own inbox shows where its own message went.
	register(Case{Name: "Nats-Trace-Dest: hostB's subjects, then hostA's own inbox", Roles: agentAndWorker,
		Attack: func(ctx context.Context, a *Attacker) (func(), error) {
			for _, dest := range []string{a.B.Hook, a.B.Jobs, "$KV." + wire.BucketPrepared + ".hostB.x"} {
				_, err := a.Publish(ctx, wire.JobSubject("hostA", "rt-x", wire.KindCompact), Header{"Nats-Trace-Dest": dest, "Nats-Trace-Only": "true"}, []byte(`{"v":1}`))
				_ = err // refused, or the trace dropped: hostB's snapshot says whether anything reached it
			}
			inbox := a.NC.NewInbox()
			sub, err := a.Subscribe(ctx, inbox)
			if err != nil {
				return nil, err
			}
			defer func() { _ = sub.Unsubscribe() }()
			_, _ = a.Publish(ctx, wire.JobSubject("hostA", "rt-x", wire.KindCompact), Header{"Nats-Trace-Dest": inbox, "Nats-Trace-Only": "true"}, []byte(`{"v":1}`))
			for {
				m, err := sub.NextMsg(500 * time.Millisecond)
				if err != nil {
					return nil, nil // no more traces
				}
				if strings.Contains(string(m.Data), "hostB") {
					return nil, fmt.Errorf("leak: a trace names hostB: %s", m.Data)
				}
			}
		}})
}

// heldByHostA reports whether any stream of hostA's account holds a message on subject
// (seen with hostA's admin's key).
func (a *Attacker) heldByHostA(ctx context.Context, subject string) bool {
	js, _ := jetstream.New(a.adminA)
	names := js.StreamNames(ctx)
	for n := range names.Name() {
		str, err := js.Stream(ctx, n)
		if err != nil {
			continue
		}
		if info, err := str.Info(ctx, jetstream.WithSubjectFilter(subject)); err == nil && len(info.State.Subjects) > 0 {
			return true
		}
	}
	return false
}

// hostBJobIDs are the ids of hostB's jobs so far (read by the harness with hostB's admin).
func hostBJobIDs(ctx context.Context, a *Attacker) []string {
	js, _ := jetstream.New(a.f.adminB)
	str, err := js.Stream(ctx, wire.StreamEvents)
	if err != nil {
		return nil
	}
	var out []string
	info := str.CachedInfo().State
	for seq := max(info.FirstSeq, 1); seq <= info.LastSeq; {
		m, err := msgGet(ctx, a.f.adminB, wire.StreamEvents, seq)
		if err != nil {
			break
		}
		var ev wire.Event
		if json.Unmarshal(m.Data, &ev) == nil && ev.JobID != "" {
			out = append(out, ev.JobID)
		}
		seq = m.Seq + 1
	}
	if a.B.NextPrepareID != "" {
		out = append(out, a.B.NextPrepareID)
	}
	return out
}
