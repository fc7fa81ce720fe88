//go:build redteam

package redteam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor-dev/compactor/internal/visible"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/wire"
)

// What the operator reads: records hostA's keys write and hostA's operator (or the
// operators of both accounts) then reads in the terminal and in the console, and the
// pause records no store's key may write.

// termEscapes is a record's text that acts on a terminal printed raw: a screen clear, an
// OSC 8 link, a carriage return that overwrites the line, a right-to-left override, a C1
// CSI, a forged second line.
const termEscapes = "\x1b[2J\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07\rall good \u202elmth.exe\u009b1m\nFAKE LINE"

// markup is a record's text that would run in a page taken for markup.
const markup = `"'><img src=x onerror=alert(1)><script>alert(2)</script><a href="javascript:alert(3)">j</a><svg onload=alert(4)><iframe srcdoc="x"></iframe>` + "\x1b[31m\u202eRTL"

// forgeOperatorRecords publishes, with hostA's worker's key on hostA's own subjects and
// keys, a dead letter, an event and a worker's beat whose every text field is text, and
// returns the dead letter's sequence and the session they name.
func forgeOperatorRecords(ctx context.Context, a *Attacker, text string) (uint64, string, error) {
	sid := fmt.Sprintf("019a5d6f-0000-7000-8000-%012x", time.Now().UnixNano()&0xffffffffffff)
	job, _ := json.Marshal(wire.Job{V: 1, Kind: wire.KindCompact, Store: "hostA", Path: text + ".jsonl", SessionID: sid, Reason: text})
	dl, _ := json.Marshal(wire.DeadLetter{V: 1, Subject: wire.JobSubject("hostA", sid, wire.KindCompact), JobSeq: 1, Job: job,
		Reason: text, Error: text, Deliveries: 1, Worker: text, At: time.Now().UTC()})
	ack, err := a.Publish(ctx, wire.DLQSubject("hostA", sid), nil, dl)
	if err != nil {
		return 0, "", err
	}
	ev, _ := json.Marshal(wire.Event{V: 1, JobID: text, JobSeq: 424242, JobRef: wire.JobRef{Store: "hostA", SessionID: sid, Path: text, Kind: wire.KindCompact}, Tally: wire.Tally{Outcome: pipeline.OutcomeFailed, Reason: text, LLMTokens: 2, LLMInputTokens: 1, LLMOutputTokens: 1}, Error: text, Worker: text, LLMModel: text, Attempt: 1, At: time.Now().UTC()})
	if _, err := a.Publish(ctx, wire.JobEventSubject("hostA", sid, 424242), nil, ev); err != nil {
		return 0, "", err
	}
	beat, _ := json.Marshal(pipeline.WorkerBeat{V: 1, Worker: "rt-text", Store: "hostA", Host: text, Version: text, Concurrency: 1,
		Started: time.Now().UTC(), At: time.Now().UTC()})
	if _, err := a.Publish(ctx, "$KV."+pipeline.BucketWorkers+".hostA.rt-text", nil, beat); err != nil {
		return 0, "", err
	}
	return ack.Sequence, sid, nil
}

// rawLines names the lines of out that carry a raw control or formatting character.
func rawLines(out string) []string {
	var bad []string
	for i, line := range strings.Split(out, "\n") {
		if !visible.Clean(line) {
			bad = append(bad, fmt.Sprintf("line %d %q", i+1, line))
		}
	}
	return bad
}

func init() {
	// A forged dead letter's ESC [2J, OSC 8 link, CR and RTL override reached the
	// operator's terminal raw through dlq list and show (and events, status).
	register(Case{Name: "records carrying terminal escapes, read by hostA's operator (dlq list/show, events, status)", Roles: []pipeline.Role{pipeline.RoleWorker},
		Attack: func(ctx context.Context, a *Attacker) (func(), error) {
			seq, sid, err := forgeOperatorRecords(ctx, a, termEscapes)
			if err != nil {
				return nil, err
			}
			runs := [][]string{
				{"dlq", "list", "--store", "hostA", "--session", sid}, {"dlq", "list", "--store", "hostA", "--session", sid, "--json"},
				{"dlq", "show", strconv.FormatUint(seq, 10)}, {"dlq", "show", strconv.FormatUint(seq, 10), "--json"},
				{"events", "--store", "hostA", "--session", sid}, {"events", "--store", "hostA", "--session", sid, "--json"},
				{"status"}, {"status", "--json"},
			}
			for _, args := range runs {
				out, errOut, err := a.f.cli(ctx, "operator-hostA", args...)
				if err != nil {
					return nil, fmt.Errorf("compactor %s: %v\n%s", strings.Join(args, " "), err, errOut)
				}
				if bad := rawLines(out + errOut); len(bad) > 0 {
					return nil, fmt.Errorf("taken: compactor %s printed hostA's worker's control characters raw to its operator: %s", strings.Join(args, " "), strings.Join(bad, "; "))
				}
				if !strings.Contains(out, `\x1b[2J`) && !strings.Contains(out, `\u001b[2J`) {
					return nil, fmt.Errorf("compactor %s did not show the record (escaped):\n%s", strings.Join(args, " "), out)
				}
			}
			return nil, nil
		}})

	// Relays: hostA's worker writes, into its own account, records under hostB's names (a
	// beat, a running job's lease, a pause record, an event). The operators' view of both
	// accounts (fleet.json: hostB is the other account's) and hostA's operator's status
	// show none of them as hostB's.
	register(Case{Name: "records under hostB's names relayed into hostA's account, read by the operators' view of both accounts", Roles: []pipeline.Role{pipeline.RoleWorker},
		Attack: func(ctx context.Context, a *Attacker) (func(), error) {
			now := time.Now().UTC()
			relays := []struct {
				stream, target string
				value          any
			}{
				{"KV_" + pipeline.BucketWorkers, "$KV." + pipeline.BucketWorkers + ".hostB.rt-relay",
					pipeline.WorkerBeat{V: 1, Worker: "rt-relay", Store: "hostB", Host: "FORGED", Concurrency: 1, Started: now, At: now}},
				{"KV_" + pipeline.BucketLeases, a.B.Keys[pipeline.BucketLeases],
					map[string]any{"v": 1, "worker": "FORGED", "jobId": "x", "since": now, "sessionId": sourceID, "path": "FORGED"}},
				{"KV_" + pipeline.BucketSettings, "$KV." + pipeline.BucketSettings + ".paused.hostB",
					pipeline.PauseRecord{V: 1, Store: "hostB", Paused: true, Reason: "FORGED", By: "FORGED", At: now}},
				{wire.StreamEvents, wire.JobEventSubject("hostB", sourceID, 77),
					wire.Event{V: 1, JobSeq: 77, JobRef: wire.JobRef{Store: "hostB", SessionID: sourceID, Kind: wire.KindCompact}, Tally: wire.Tally{Outcome: pipeline.OutcomeFailed, Reason: "FORGED"}, At: now}},
			}
			for i, r := range relays {
				src := fmt.Sprintf("$KV.%s.hostA.rt-relay-%d", wire.BucketPrepared, i)
				b, _ := json.Marshal(r.value)
				if _, err := a.Publish(ctx, src, nil, b); err != nil {
					return nil, err
				}
				if _, err := a.Request(ctx, "$JS.API.DIRECT.GET.KV_"+wire.BucketPrepared+"."+src, r.target, nil); err != nil {
					return nil, err
				}
				if err := a.InHostA(ctx, r.stream, r.target); err != nil {
					return nil, err
				}
			}
			opA, opB := a.f.conn("operator-hostA", pipeline.RoleOperator), a.f.conn("operator-hostB", pipeline.RoleOperator)
			defer opA.Close()
			defer opB.Close()
			v, err := pipeline.OpenFleetView(ctx, []pipeline.FleetAccount{{Name: "compactor-hostA", Conn: opA, Stores: []string{"hostA"}},
				{Name: "compactor-hostB", Conn: opB, Stores: []string{"hostB"}}}, pipeline.FleetViewOptions{Events: true})
			if err != nil {
				return nil, err
			}
			defer v.Close()
			snap := v.Snapshot()
			for _, sv := range snap.Stores {
				if sv.Store != "hostB" {
					continue
				}
				if sv.Paused != nil {
					return nil, fmt.Errorf("taken: the operators' view shows hostB paused by hostA's relayed record: %+v", sv.Paused)
				}
				for _, w := range sv.Workers {
					if w.Worker == "rt-relay" {
						return nil, errors.New("taken: the operators' view shows hostA's relayed beat as a worker of hostB")
					}
				}
				for _, r := range sv.Running {
					if r.Worker == "FORGED" {
						return nil, errors.New("taken: the operators' view shows hostA's relayed lease as hostB's running job")
					}
				}
			}
			for _, ev := range v.Events().Session("hostB", sourceID) {
				if ev.Reason == "FORGED" {
					return nil, errors.New("taken: the operators' view shows hostA's relayed event in hostB's session")
				}
			}
			if snap.Accounts[0].LeftOut < uint64(len(relays)) {
				return nil, fmt.Errorf("hostA's account: %d records left out, want at least %d", snap.Accounts[0].LeftOut, len(relays))
			}
			// hostA's operator alone (no fleet.json): its account's settings name hostA only.
			out, errOut, err := a.f.cli(ctx, "operator-hostA", "status", "--json")
			if err != nil || strings.Contains(out, "FORGED") || strings.Contains(out, `"store": "hostB"`) {
				return nil, fmt.Errorf("taken: hostA's operator's status shows the relayed records as hostB's (%v):\n%s%s", err, out, errOut)
			}
			return nil, nil
		}})

	// Pause records: no store's key writes one, nor reads another store's; an account's
	// operator pauses only the stores set up in its account.
	register(Case{Name: "pause records: written by hostA's worker or agent, read for hostB, hostB paused by hostA's operator", Roles: []pipeline.Role{pipeline.RoleWorker, pipeline.RoleAgent, pipeline.RoleOperator},
		Attack: func(ctx context.Context, a *Attacker) (func(), error) {
			if a.Role == pipeline.RoleOperator {
				js, _ := jetstream.New(a.adminA)
				count := func() uint64 {
					s, err := js.Stream(ctx, "KV_"+pipeline.BucketSettings)
					if err != nil {
						return 0
					}
					info, err := s.Info(ctx)
					if err != nil {
						return 0
					}
					return info.State.LastSeq
				}
				before := count()
				out, errOut, err := a.CLI(ctx, "pause", "hostB", "--reason", "redteam")
				if err == nil || !strings.Contains(errOut, "not set up in this account") {
					return nil, fmt.Errorf("taken: hostA's operator paused hostB (%v):\n%s%s", err, out, errOut)
				}
				if after := count(); after != before {
					return nil, fmt.Errorf("taken: hostA's operator's refused pause wrote %d records", after-before)
				}
				return nil, nil
			}
			rec, _ := json.Marshal(pipeline.PauseRecord{V: 1, Store: "hostB", Paused: true, Reason: "redteam", At: time.Now().UTC()})
			for _, st := range []string{"hostA", "hostB"} {
				_, err := a.Publish(ctx, "$KV."+pipeline.BucketSettings+".paused."+st, nil, rec)
				if err := a.Refused(err, "a pause record of "+st+" written by hostA's "+string(a.Role)); err != nil {
					return nil, err
				}
			}
			m, err := a.Request(ctx, "$JS.API.DIRECT.GET.KV_"+pipeline.BucketSettings+".$KV."+pipeline.BucketSettings+".paused.hostB", "", nil)
			if err == nil && len(m.Data) > 0 && m.Header.Get("Status") == "" {
				return nil, fmt.Errorf("leak: hostA's %s read a pause record of hostB: %s", a.Role, m.Data)
			}
			return nil, nil
		}})
}
