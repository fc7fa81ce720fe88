//go:build redteam

package redteam

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/wire"
)

// Every API request and subject a store's worker and agent keep (pipeline/permissions.go),
// aimed at hostB: the permission of hostB's store for each (refused), and the requests that
// name no store in their subject with a body or a reply that names hostB's (answered in
// hostA's account: nothing of hostB's).

// concrete makes a subject of a permission's pattern ('*' and '>' become a token).
func concrete(pattern string) string {
	parts := strings.Split(pattern, ".")
	for i, p := range parts {
		if p == "*" || p == ">" {
			parts[i] = "rt"
		}
	}
	return strings.Join(parts, ".")
}

func init() {
	for _, role := range agentAndWorker {
		register(Case{Name: "every subject of hostB's " + string(role) + " permissions, published and subscribed", Roles: agentAndWorker,
			Attack: func(ctx context.Context, a *Attacker) (func(), error) {
				perms, err := pipeline.PermissionsFor(role, []string{"hostB"})
				if err != nil {
					return nil, err
				}
				mine, _ := pipeline.PermissionsFor(a.Role, []string{"hostA"})
				for _, p := range perms.Publish {
					if !strings.Contains(p, "hostB") {
						continue // the same for every store: the next case's
					}
					_, err := a.Request(ctx, concrete(p), a.NC.NewInbox(), []byte(`{"v":1,"store":"hostB"}`))
					if e := a.Refused(err, "publish to "+p); e != nil {
						return nil, e
					}
				}
				for _, p := range perms.Subscribe {
					if !strings.Contains(p, "hostB") {
						continue
					}
					sub, err := a.Subscribe(ctx, p)
					if sub != nil {
						_ = sub.Unsubscribe()
					}
					if e := a.Refused(err, "subscribe to "+p); e != nil {
						return nil, e
					}
				}
				_ = mine
				return nil, nil
			}})
	}
	// The requests whose subject names no store: the batched read of the workers' keys
	// (its body names them), the fleet's settings, flow control.
	register(Case{Name: "requests whose body names hostB's keys: the workers' batched read, the settings", Roles: agentAndWorker,
		Attack: func(ctx context.Context, a *Attacker) (func(), error) {
			for _, filter := range []string{"$KV.COMPACTOR_WORKERS.hostB.>", "$KV.COMPACTOR_WORKERS.>", ">"} {
				body, _ := json.Marshal(map[string]any{"multi_last": []string{filter}, "batch": 1024})
				inbox := a.NC.NewInbox()
				sub, err := a.Subscribe(ctx, inbox)
				if err != nil {
					return nil, err
				}
				if _, err := a.Request(ctx, "$JS.API.DIRECT.GET.KV_"+pipeline.BucketWorkers, inbox, body); err != nil {
					_ = sub.Unsubscribe()
					continue
				}
				for {
					m, err := sub.NextMsgWithContext(ctx)
					if err != nil || m.Header.Get("Status") != "" {
						break
					}
					if strings.Contains(m.Header.Get("Nats-Subject"), "hostB") || strings.Contains(string(m.Data), `"store":"hostB"`) {
						_ = sub.Unsubscribe()
						return nil, fmt.Errorf("leak: a batched read answered hostB's %s", m.Header.Get("Nats-Subject"))
					}
				}
				_ = sub.Unsubscribe()
			}
			m, err := a.Request(ctx, "$JS.API.DIRECT.GET.KV_COMPACTOR_SETTINGS.$KV.COMPACTOR_SETTINGS.fleet", "", nil)
			if err == nil && strings.Contains(string(m.Data), "hostB") {
				return nil, fmt.Errorf("leak: the settings hostA reads name hostB: %s", m.Data)
			}
			for _, subj := range []string{"$JS.FC.KV_COMPACTOR_SWEEP.rt.rt", "$JS.FC.rt.rt.KV_COMPACTOR_SWEEP.rt"} {
				_, _ = a.Request(ctx, subj, a.NC.NewInbox(), nil)
			}
			return nil, nil
		}})
	// The worker's own consumer and its acknowledgements: acks of sequences it was never
	// given, a pull of a thousand messages, and the watch consumers it may create: durable,
	// pushing to hostB's subjects, or filtered on hostB's records.
	register(Case{Name: "hostA's consumers: forged acks, pulls, watches filtered on hostB or pushing to it", Roles: []pipeline.Role{pipeline.RoleWorker},
		Attack: func(ctx context.Context, a *Attacker) (func(), error) {
			for seq := 1; seq <= 20; seq++ {
				for _, ack := range []string{"+ACK", "-NAK", "+TERM", "+WPI"} {
					subj := fmt.Sprintf("$JS.ACK.COMPACTOR_JOBS.compactor-hostA.1.%d.%d.0.0", seq, seq)
					_, _ = a.Request(ctx, subj, a.NC.NewInbox(), []byte(ack))
				}
			}
			_, _ = a.Request(ctx, "$JS.API.CONSUMER.MSG.NEXT.COMPACTOR_JOBS.compactor-hostA", a.NC.NewInbox(), []byte(`{"batch":1000,"no_wait":true}`))
			for _, c := range []struct{ filter, deliver string }{
				{"$KV.COMPACTOR_SWEEP.hostB.>", ""},
				{"$KV.COMPACTOR_SWEEP.hostA.>", a.B.Jobs},
				{"$KV.COMPACTOR_SWEEP.hostA.>", a.B.Keys[wire.BucketPrepared]},
				{"$KV.COMPACTOR_SWEEP.hostA.>", a.B.Hook},
			} {
				cfg := map[string]any{"name": "rt-watch", "durable_name": "rt-watch", "filter_subject": c.filter, "ack_policy": "none", "deliver_policy": "all"}
				if c.deliver != "" {
					cfg["deliver_subject"] = c.deliver
				}
				body, _ := json.Marshal(map[string]any{"stream_name": "KV_COMPACTOR_SWEEP", "config": cfg})
				_, _ = a.Request(ctx, "$JS.API.CONSUMER.CREATE.KV_COMPACTOR_SWEEP.rt-watch."+c.filter, "", body)
				_, _ = a.Request(ctx, "$JS.API.CONSUMER.DELETE.KV_COMPACTOR_SWEEP.rt-watch", "", nil)
			}
			return nil, nil
		}})
}
