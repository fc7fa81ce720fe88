package pipeline

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/compactor-dev/compactor/wire"
)

// Who may do what on a fleet's NATS (docs/security.md). Every subject and key a store owns
// carries the store's name at a fixed place, so that one permission says "this store
// only"; these are the permissions of each role, from which `compactor auth` writes the
// server's configuration, and against which a refusal is explained ("it needs ...").

// Role is what a NATS user of a fleet may do.
type Role string

// The roles.
const (
	// RoleAdmin sets up and changes the streams, buckets and consumers (compactor setup,
	// run --setup, the embedded server's own service).
	RoleAdmin Role = "admin"
	// RoleOperator reads across stores and handles dead letters (compactor dlq).
	RoleOperator Role = "operator"
	// RoleWorker of store S fetches and answers S's jobs, holds S's leases, writes S's
	// prepared values, events, sweep records and dead letters, and answers S's bridge and
	// hook subjects (compactor run, compactor sweep).
	RoleWorker Role = "worker"
	// RoleAgent of store S enqueues jobs and asks for preparations for S, reads S's
	// prepared values and events, and asks S's bridge (enqueue, the Pi extension).
	RoleAgent Role = "agent"
)

// Roles are every role, in the order a refusal names them.
var Roles = []Role{RoleWorker, RoleAgent, RoleOperator, RoleAdmin}

// ParseRole reads a role's name.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("role %q: want worker, agent, operator or admin", s)
}

// PerStore reports whether the role's permissions are a store's (worker, agent).
func (r Role) PerStore() bool { return r == RoleWorker || r == RoleAgent }

// Permissions are a NATS user's publish and subscribe allow lists. AllowResponses lets the
// user answer the requests it receives (a worker answers bridge requests).
type Permissions struct {
	Publish        []string `json:"publish"`
	Subscribe      []string `json:"subscribe"`
	AllowResponses bool     `json:"allowResponses,omitempty"`
}

// storeToken stands for a store's name in the permission templates below.
const storeToken = "{store}"

// inboxPrefixRoot starts every compactor client's inbox prefix: a root of its own, so that
// no permission on the server's default _INBOX.> can read a compactor client's replies.
const inboxPrefixRoot = "_INBOX_"

// InboxPrefix is where a client of role for stores receives replies (nats.CustomInboxPrefix,
// nats.js's inboxPrefix): _INBOX_<role>_<store> for a store's roles, the first of its stores
// in sorted order; _INBOX_<role> for the others. A user of several stores may use the
// prefix of any of them.
func InboxPrefix(role Role, stores []string) string {
	if !role.PerStore() || len(stores) == 0 {
		return inboxPrefixRoot + string(role)
	}
	return inboxPrefixRoot + string(role) + "_" + slices.Min(stores)
}

// Subjects and API subjects the templates use.
const (
	apiPre       = "$JS.API."
	directGetPre = apiPre + "DIRECT.GET."
)

// kvKeys is the subject of a bucket's keys under a store: $KV.<bucket>.<store>.>
func kvKeys(bucket string) string { return wire.KVSubjectRoot + bucket + "." + storeToken + ".>" }

// kvDirect is the direct get of a bucket's keys under a store.
func kvDirect(bucket string) string { return directGetPre + "KV_" + bucket + "." + kvKeys(bucket) }

// storeBuckets are the buckets whose keys are a store's (<store>.<...>).
var storeBuckets = []string{BucketLeases, BucketAttempts, BucketSweep, wire.BucketPrepared, BucketWorkers, BucketSpend}

// spendFleetKeys are the fleet-wide spend counts (=fleet.<window>), which every worker with
// a fleet limit adds to: a worker may write them (the worst it can do is fill the fleet's
// window, which delays jobs and reveals nothing).
var spendFleetKeys = wire.KVSubjectRoot + BucketSpend + "." + spendFleetScope + ".>"

// templates are each role's permissions, with {store} for the store's name.
func templates(role Role) Permissions {
	fleet := directGetPre + "KV_" + BucketSettings + "." + wire.KVSubjectRoot + BucketSettings + "." + settingsKey
	// A store's pause record (pause.go): its workers read it, the operator writes it.
	pauseRecord := wire.KVSubjectRoot + BucketSettings + "." + pauseKeyPrefix + storeToken
	jobsInfo := apiPre + "CONSUMER.INFO." + wire.StreamJobs + "." + consumerPfx + storeToken
	// A batched direct get names its subjects in its body, not its subject: any of the
	// account's workers' keys (the account is one host's: docs/security.md).
	workersBatch := directGetPre + "KV_" + BucketWorkers
	switch role {
	case RoleWorker:
		// No allow_responses: a user that may answer whatever reply subject its requests
		// name may publish anywhere (the store's agent names the reply, the worker answers
		// there). A worker answers the bridge requests of its stores' agents, in their
		// inboxes alone.
		p := Permissions{}
		p.Publish = []string{
			inboxPrefixRoot + string(RoleAgent) + "_" + storeToken + ".>",
			wire.JobsPrefix + storeToken + ".>", wire.EventsPrefix + storeToken + ".>", wire.DLQPrefix + storeToken + ".>",
			directGetPre + wire.StreamJobs + "." + wire.JobsPrefix + storeToken + ".>",
			jobsInfo,
			apiPre + "CONSUMER.MSG.NEXT." + wire.StreamJobs + "." + consumerPfx + storeToken,
			"$JS.ACK." + wire.StreamJobs + "." + consumerPfx + storeToken + ".>",
			"$JS.ACK.*.*." + wire.StreamJobs + "." + consumerPfx + storeToken + ".>",
			apiPre + "CONSUMER.INFO." + wire.StreamDLQ + "." + dlqConsumerPfx + storeToken,
			// The sweeps' memo: a watch of the store's records (kv.go's Watch), deleted when it
			// stops.
			apiPre + "CONSUMER.CREATE.KV_" + BucketSweep + ".*." + kvKeys(BucketSweep),
			apiPre + "CONSUMER.DELETE.KV_" + BucketSweep + ".*",
			// The workers' beats, read at once (a batched direct get: readBeats).
			workersBatch,
			"$JS.FC.KV_" + BucketSweep + ".>", "$JS.FC.*.*.KV_" + BucketSweep + ".>",
			fleet, directGetPre + "KV_" + BucketSettings + "." + pauseRecord,
		}
		for _, b := range storeBuckets {
			p.Publish = append(p.Publish, kvKeys(b), kvDirect(b))
		}
		p.Publish = append(p.Publish, spendFleetKeys, directGetPre+"KV_"+BucketSpend+"."+spendFleetKeys)
		p.Subscribe = []string{inboxPrefixRoot + string(role) + "_" + storeToken + ".>", wire.BridgePrefix + storeToken + ".*", wire.HooksPrefix + storeToken + ".*"}
		return p
	case RoleAgent:
		return Permissions{
			Publish: []string{
				wire.JobsPrefix + storeToken + ".>", wire.BridgePrefix + storeToken + ".*", wire.HooksPrefix + storeToken + ".*",
				kvDirect(wire.BucketPrepared), kvDirect(BucketWorkers), workersBatch, fleet,
				directGetPre + wire.StreamJobs + "." + wire.JobsPrefix + storeToken + ".>",
				directGetPre + wire.StreamEvents + "." + wire.EventsPrefix + storeToken + ".>",
				jobsInfo,
			},
			Subscribe: []string{inboxPrefixRoot + string(role) + "_" + storeToken + ".>", wire.EventsPrefix + storeToken + ".>"},
		}
	case RoleOperator:
		return Permissions{
			Publish: []string{
				wire.JobsPrefix + ">",
				apiPre + "INFO", apiPre + "STREAM.NAMES", apiPre + "STREAM.LIST", apiPre + "STREAM.INFO.*",
				apiPre + "CONSUMER.NAMES.*", apiPre + "CONSUMER.LIST.*", apiPre + "CONSUMER.INFO.*.*",
				directGetPre + ">", apiPre + "STREAM.MSG.GET.*",
				apiPre + "STREAM.MSG.DELETE." + wire.StreamDLQ,
				apiPre + "CONSUMER.CREATE." + wire.StreamDLQ + ".>", apiPre + "CONSUMER.MSG.NEXT." + wire.StreamDLQ + ".*",
				apiPre + "CONSUMER.DELETE." + wire.StreamDLQ + ".*",
				// Pausing and resuming a store (pause.go).
				pauseRecord[:len(pauseRecord)-len(storeToken)] + "*",
				// What the console and status follow (fleetview.go): the events, the workers'
				// beats, the leases of running jobs and the pause records, by ordered consumers.
				apiPre + "CONSUMER.CREATE." + wire.StreamEvents + ".>", apiPre + "CONSUMER.MSG.NEXT." + wire.StreamEvents + ".*",
				apiPre + "CONSUMER.DELETE." + wire.StreamEvents + ".*",
				apiPre + "CONSUMER.CREATE.KV_" + BucketWorkers + ".>", apiPre + "CONSUMER.CREATE.KV_" + BucketLeases + ".>",
				apiPre + "CONSUMER.CREATE.KV_" + BucketSettings + ".>",
				apiPre + "CONSUMER.DELETE.KV_" + BucketWorkers + ".*", apiPre + "CONSUMER.DELETE.KV_" + BucketLeases + ".*",
				apiPre + "CONSUMER.DELETE.KV_" + BucketSettings + ".*",
				"$JS.FC.>",
			},
			Subscribe: []string{inboxPrefixRoot + string(RoleOperator) + ".>", wire.EventsPrefix + ">", wire.HooksPrefix + ">"},
		}
	case RoleAdmin:
		return Permissions{Publish: []string{">"}, Subscribe: []string{">"}}
	}
	return Permissions{}
}

// PermissionsFor are the permissions of a user of role for stores (a store's roles need
// at least one store; the others take none).
func PermissionsFor(role Role, stores []string) (Permissions, error) {
	t := templates(role)
	if t.Publish == nil {
		return Permissions{}, fmt.Errorf("unknown role %q", role)
	}
	if !role.PerStore() {
		if len(stores) > 0 {
			return Permissions{}, fmt.Errorf("role %s is not a store's: it takes no store", role)
		}
		return t, nil
	}
	if len(stores) == 0 {
		return Permissions{}, fmt.Errorf("role %s needs a store", role)
	}
	for _, st := range stores {
		if err := wire.ValidateStoreName(st); err != nil {
			return Permissions{}, err
		}
	}
	out := Permissions{AllowResponses: t.AllowResponses}
	expand := func(list []string) []string {
		var all []string
		for _, s := range list {
			if !strings.Contains(s, storeToken) {
				if !slices.Contains(all, s) {
					all = append(all, s)
				}
				continue
			}
			for _, st := range stores {
				all = append(all, strings.ReplaceAll(s, storeToken, st))
			}
		}
		return all
	}
	out.Publish, out.Subscribe = expand(t.Publish), expand(t.Subscribe)
	return out, nil
}

// Needs says which roles may do op ("publish" or "subscribe") on subject: "worker of store
// B", "agent of store B or operator", "admin (compactor setup)"; "no compactor role" when
// none may.
func Needs(op, subject string) string {
	var who []string
	for _, role := range Roles {
		t := templates(role)
		list := t.Publish
		if op == "subscribe" {
			list = t.Subscribe
		}
		for _, pat := range list {
			store, ok := matchTemplate(pat, subject)
			if !ok {
				continue
			}
			name := string(role)
			switch {
			case store != "":
				name += " of store " + store
			case role == RoleAdmin:
				if len(who) > 0 {
					continue // everyone's: the admin adds nothing to what is said
				}
				name += " (compactor setup)"
			}
			if !slices.Contains(who, name) {
				who = append(who, name)
			}
			break
		}
	}
	switch len(who) {
	case 0:
		return "no compactor role"
	case 1:
		return who[0]
	}
	return strings.Join(who[:len(who)-1], ", ") + " or " + who[len(who)-1]
}

// matchTemplate matches subject against a permission template (NATS wildcards, and
// {store} standing for a store's name within a token) and returns the store it names.
func matchTemplate(pattern, subject string) (store string, ok bool) {
	pt, st := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, p := range pt {
		if p == ">" {
			return store, i < len(st)
		}
		if i >= len(st) {
			return "", false
		}
		switch {
		case p == "*":
		case strings.Contains(p, storeToken):
			pre, post, _ := strings.Cut(p, storeToken)
			tok := st[i]
			if len(tok) <= len(pre)+len(post) || !strings.HasPrefix(tok, pre) || !strings.HasSuffix(tok, post) {
				return "", false
			}
			name := tok[len(pre) : len(tok)-len(post)]
			if wire.ValidateStoreName(name) != nil || (store != "" && store != name) {
				return "", false
			}
			store = name
		case p != st[i]:
			return "", false
		}
	}
	return store, len(pt) == len(st)
}

// PermissionError is a refusal by the NATS server: this process's user may not publish
// (or subscribe) there.
type PermissionError struct {
	Op      string // "publish" or "subscribe"
	Subject string
	Role    Role     // what this process acts as ("" when unknown)
	Stores  []string // the stores it acts for
}

func (e *PermissionError) Error() string {
	needs := Needs(e.Op, e.Subject)
	if e.Role == "" {
		return fmt.Sprintf("not permitted: %s (%s refused to this user; it needs %s; see docs/security.md)", e.Subject, e.Op, needs)
	}
	who := string(e.Role)
	if len(e.Stores) > 0 {
		ss := slices.Clone(e.Stores)
		sort.Strings(ss)
		who += " of store " + strings.Join(ss, ", ")
	}
	for _, n := range strings.Split(strings.ReplaceAll(needs, " or ", ", "), ", ") {
		if n == who || strings.TrimSuffix(n, " (compactor setup)") == who {
			// The process acts as a role that may do it: its credentials are another's.
			return fmt.Sprintf("not permitted: %s (%s refused: this process acts as %s, but its NATS user is not that role's; give the credentials `compactor auth` made for %s; see docs/security.md)",
				e.Subject, e.Op, who, who)
		}
	}
	return fmt.Sprintf("not permitted: %s (%s refused for role %s; it needs %s; see docs/security.md)", e.Subject, e.Op, who, needs)
}
