package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/operator"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/compactor-dev/compactor/internal/cli/command"
	"github.com/compactor-dev/compactor/internal/visible"
)

// Command is compactor status.
var Command = &command.Command{Name: "status", Summary: "each store's workers (host, version, jobs in flight), queue (depth and oldest job by kind), running jobs and pause; version skew", Run: run}

const statusHelp = `
Store by store: whether it is paused (compactor pause); its queue: jobs queued, in flight
and dead-lettered, and the jobs by kind with the age of the oldest; the jobs running now
(session, kind, worker, attempt, elapsed); and the workers that reported in the last 30 s
(COMPACTOR_WORKERS): their host, the version they run, the job schema versions they work,
their jobs in flight and when they last reported (every 10 s). A warning line says when
the workers run different versions, or when the workers of a store do not all work the
same job versions (a job of a version only some of them understand waits for those:
docs/upgrading.md). Reading the queues is the operator's (or the admin's) right; with
other credentials status shows the workers and says what it could not read.

Each host of a fleet has a NATS account of its own: with an account's operator's key,
status shows every store of that account; with a store's worker or agent key, that store's
(--store); with --credentials DIR (compactor auth's), every account's, each with its
operator's key. A key that may not read them is said at once ("not permitted").

Without --nats-url, the NATS of the compactor run on --data-dir is used (else
nats://127.0.0.1:4222).

Examples:
  compactor status
  compactor status --nats-url nats://nats.internal:4222 --credentials /etc/nats/compactor
  compactor status --nats-url nats://nats.internal:4222 --nkey agent-hostA.nk --store hostA --json`

// Report is what status prints with --json.
type Report struct {
	Stores   []StoreStatus `json:"stores"`
	Warnings []string      `json:"warnings"`
}

// StoreStatus is one store of a Report.
type StoreStatus struct {
	Store   string                `json:"store"`
	Account string                `json:"account,omitempty"`
	Workers []fleetops.WorkerBeat `json:"workers"`
	// Queue, Running and Paused: what the operator's view reads (absent when it could not).
	Queue   *operator.StoreQueue  `json:"queue,omitempty"`
	Running []operator.RunningJob `json:"running,omitempty"`
	Paused  *fleetops.PauseRecord `json:"paused,omitempty"`
}

func run(ctx context.Context, env *command.Env) error {
	fs := command.NewFlagSet(env, "status", "[flags]", statusHelp)
	var n access.NATSConfig
	command.BindNATSFlags(fs.FlagSet, &n, env.Getenv)
	ops := command.BindOpsFlags(fs.FlagSet, env, command.OpsClient)
	configFile := command.ConfigFlag(fs.FlagSet, env)
	store := fs.String("store", "", "only this store's workers (with a store's worker or agent credentials: its own)")
	credentials := fs.String("credentials", "", "the fleet's credentials directory (compactor auth --credentials): every account's workers (or those of --store), with each operator's seed")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if _, err := fs.ParseConfigured(env.Args, configFile, false); err != nil {
		return err
	}
	var stores []string
	if *store != "" {
		stores = append(stores, *store)
	}
	ncfg := ops.ClientNATS(n)
	ncfg.Name = "compactor status"
	accounts := []command.FleetAccount{{NATS: ncfg, Stores: stores}}
	if *credentials != "" {
		var err error
		if accounts, err = command.FleetAccounts(*credentials, access.RoleOperator, stores, ncfg); err != nil {
			return err
		}
	}
	rep, err := readStatus(ctx, accounts, *store)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(command.JSONOut(env.Stdout))
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	writeStatus(env.Stdout, rep, time.Now())
	return nil
}

// readStatus reads the accounts through the operator's view of them (their queues, running
// jobs and pauses). Without --credentials the one account the NATS flags reach is read as
// the operator; when those credentials are not the operator's, the workers alone are read
// with them (a store's worker or agent key, for its store), with a warning.
func readStatus(ctx context.Context, accounts []command.FleetAccount, store string) (Report, error) {
	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var conns []operator.FleetAccount
	defer func() {
		for _, c := range conns {
			c.Conn.Close()
		}
	}()
	for _, a := range accounts {
		c := a.NATS
		if c.Role == "" && c.InboxPrefix == "" {
			c.Role = access.RoleOperator
		}
		nc, err := c.Connect()
		if err != nil {
			return Report{}, command.AccountErr(a.Account, err)
		}
		conns = append(conns, operator.FleetAccount{Name: a.Account, Conn: nc, Stores: a.Stores})
	}
	if len(accounts) == 1 && accounts[0].Account == "" {
		// One account: every store its records name (with --store, that one).
		conns[0].Stores = nil
	}
	v, verr := operator.OpenFleetView(vctx, conns, operator.FleetViewOptions{})
	if verr != nil {
		var pe *access.PermissionError
		if len(accounts) > 1 || accounts[0].Account != "" || !errors.As(verr, &pe) {
			return Report{}, verr
		}
		// Not the operator's credentials: the workers, as the role they are.
		beats, foreign, err := accountWorkers(ctx, accounts[0].NATS, accounts[0].Stores)
		if err != nil {
			return Report{}, err
		}
		rep := statusOf(beats, store)
		rep.Warnings = append(rep.Warnings, "queues, running jobs and pauses not read: they are the operator's to read ("+verr.Error()+")")
		return withForeign(rep, foreign), nil
	}
	defer v.Close()
	snap := v.Snapshot()
	var beats []fleetops.WorkerBeat
	for _, st := range snap.Stores {
		beats = append(beats, st.Workers...)
	}
	rep := statusOf(beats, store)
	// Every store set up is listed, with or without workers.
	var out []StoreStatus
	for _, st := range snap.Stores {
		if store != "" && st.Store != store {
			continue
		}
		ss := StoreStatus{Store: st.Store, Account: st.Account, Workers: st.Workers, Running: st.Running, Paused: st.Paused}
		q := st.Queue
		ss.Queue = &q
		out = append(out, ss)
		if len(st.Workers) == 0 {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("store %s: no worker has reported in the last 30s", st.Store))
		}
		if q.Err != "" {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("store %s: %s", st.Store, q.Err))
		}
	}
	if out == nil {
		out = []StoreStatus{}
	}
	rep.Stores = out
	leftOut := 0
	for _, a := range snap.Accounts {
		leftOut += int(a.LeftOut)
		if a.Err != "" {
			rep.Warnings = append(rep.Warnings, command.AccountErr(a.Name, errors.New(a.Err)).Error())
		}
	}
	return withForeign(rep, leftOut), nil
}

// withForeign says how many records were left out.
func withForeign(rep Report, n int) Report {
	if n > 0 {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s left out: they name another store, worker or session than their key or subject, or a store of another account (docs/security.md, \"Records are trusted only within their store\")",
			command.Plural(n, "record", "records")))
	}
	return rep
}

// accountWorkers reads the workers of stores (none: every store) in one account. One
// batched read of the workers' keys (the operator's, or a store's worker's or agent's for
// its own stores); a refusal ends it at once, naming who may. A user's replies come to its
// role's inbox, which the credentials alone do not tell: without --inbox-prefix the
// operator's is tried, then (with --store) the store's worker's and agent's, each refusal
// at once.
func accountWorkers(ctx context.Context, ncfg access.NATSConfig, stores []string) ([]fleetops.WorkerBeat, int, error) {
	candidates := []access.NATSConfig{ncfg}
	if ncfg.Role == "" && ncfg.InboxPrefix == "" {
		candidates = nil
		for _, role := range []access.Role{access.RoleOperator, access.RoleWorker, access.RoleAgent} {
			if role.PerStore() && len(stores) == 0 {
				continue
			}
			c := ncfg
			c.Role = role
			if role.PerStore() {
				c.Stores = stores
			}
			candidates = append(candidates, c)
		}
	}
	var lastErr error
	for _, c := range candidates {
		beats, foreign, err := workersAs(ctx, c, stores)
		var pe *access.PermissionError
		if errors.As(err, &pe) && pe.Op == "subscribe" && strings.HasPrefix(pe.Subject, "_INBOX") {
			lastErr = err // not this role's inbox: the next
			continue
		}
		return beats, foreign, err
	}
	if len(stores) == 0 {
		return nil, 0, fmt.Errorf("%w (with a store's worker or agent credentials, give --store: the store whose workers to show)", lastErr)
	}
	return nil, 0, lastErr
}

func workersAs(ctx context.Context, ncfg access.NATSConfig, stores []string) ([]fleetops.WorkerBeat, int, error) {
	nc, err := ncfg.Connect()
	if err != nil {
		return nil, 0, err
	}
	defer nc.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return fleetops.Workers(rctx, nc, stores...)
}

// statusOf groups beats by store (only store's, if given) and says what differs.
func statusOf(beats []fleetops.WorkerBeat, store string) Report {
	rep := Report{Stores: []StoreStatus{}, Warnings: []string{}}
	for _, b := range beats {
		if store != "" && b.Store != store {
			continue
		}
		if n := len(rep.Stores); n == 0 || rep.Stores[n-1].Store != b.Store {
			rep.Stores = append(rep.Stores, StoreStatus{Store: b.Store})
		}
		last := &rep.Stores[len(rep.Stores)-1]
		last.Workers = append(last.Workers, b)
	}
	// Versions across the fleet: a worker counts once, whatever its stores.
	versions := map[string]map[string]bool{} // version → workers
	for _, st := range rep.Stores {
		for _, b := range st.Workers {
			v := versionOf(b)
			if versions[v] == nil {
				versions[v] = map[string]bool{}
			}
			versions[v][b.Worker] = true
		}
	}
	if len(versions) > 1 {
		rep.Warnings = append(rep.Warnings, "the workers run different versions: "+countedList(versions))
	}
	for _, st := range rep.Stores {
		for _, b := range st.Workers {
			if b.Newer() {
				rep.Warnings = append(rep.Warnings, fmt.Sprintf("worker %s of store %s reports in a beat of schema version %d, which this compactor cannot read beyond its name: it runs a newer compactor (upgrade this one to see it)",
					b.Worker, st.Store, b.V))
			}
		}
	}
	// Job versions per store: a job goes to a worker of its store.
	for _, st := range rep.Stores {
		jv := map[string]map[string]bool{}
		for _, b := range st.Workers {
			k := jobVersionsText(b)
			if jv[k] == nil {
				jv[k] = map[string]bool{}
			}
			jv[k][b.Worker] = true
		}
		if len(jv) > 1 {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("store %s: its workers work different job schema versions: %s; a job of a version only some of them work waits for those (docs/upgrading.md)",
				st.Store, countedList(jv)))
		}
	}
	return rep
}

// versionOf is a beat's program version as status shows it.
func versionOf(b fleetops.WorkerBeat) string {
	if b.Newer() {
		return "newer"
	}
	return orUnknown(b.Version)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// jobVersionsText is a beat's job versions as "1,2"; a beat without them is from a
// worker that works version 1 only.
func jobVersionsText(b fleetops.WorkerBeat) string {
	if b.Newer() {
		return "?"
	}
	vs := b.JobVersions
	if len(vs) == 0 {
		vs = []int{1}
	}
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}

// countedList is "v1 (2 workers), v2 (1 worker)", sorted by key.
func countedList(m map[string]map[string]bool) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		keys[i] = fmt.Sprintf("%s (%s)", k, command.Plural(len(m[k]), "worker", "workers"))
	}
	return strings.Join(keys, ", ")
}

// writeStatus prints the report. Every text a store's key may write (a beat's worker,
// host and version, a running job's session and kind, a queue's kinds, a pause record's
// reason and author, the warnings that quote them) is escaped (visible.Line).
func writeStatus(w io.Writer, rep Report, now time.Time) {
	v := visible.Line
	if len(rep.Stores) == 0 {
		fmt.Fprintln(w, "no worker has reported in the last 30s")
	}
	for _, st := range rep.Stores {
		head := fmt.Sprintf("store %s: %s", v(st.Store), command.Plural(len(st.Workers), "worker", "workers"))
		if st.Account != "" {
			head += " (account " + v(st.Account) + ")"
		}
		if q := st.Queue; q != nil {
			head += fmt.Sprintf("; %d queued, %d in flight, %d dead letters", q.Pending, q.InFlight, q.DeadLetters)
			if !q.Oldest.IsZero() {
				head += fmt.Sprintf("; oldest job %s old", now.Sub(q.Oldest).Round(time.Second))
			}
		}
		fmt.Fprintln(w, head)
		if p := st.Paused; p != nil {
			line := fmt.Sprintf("  PAUSED since %s by %s", p.At.Local().Format(time.DateTime), v(p.By))
			if p.Reason != "" {
				line += ": " + v(p.Reason)
			}
			fmt.Fprintln(w, line+" (its workers take no jobs; compactor resume "+v(st.Store)+")")
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		if q := st.Queue; q != nil && len(q.Kinds) > 0 {
			fmt.Fprintln(tw, "  KIND\tJOBS\tOLDEST")
			for _, k := range q.Kinds {
				fmt.Fprintf(tw, "  %s\t%d\t%s\n", v(k.Kind), k.Jobs, now.Sub(k.Oldest).Round(time.Second))
			}
			_ = tw.Flush()
		}
		if len(st.Running) > 0 {
			fmt.Fprintln(tw, "  RUNNING\tKIND\tWORKER\tATTEMPT\tELAPSED")
			for _, r := range st.Running {
				sess := r.SessionID
				if sess == "" {
					sess = r.Token
				}
				attempt := "-"
				if r.Attempt > 0 {
					attempt = strconv.Itoa(r.Attempt)
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", v(sess), v(r.Kind), v(r.Worker), attempt, now.Sub(r.Since).Round(time.Second))
			}
			_ = tw.Flush()
		}
		if len(st.Workers) > 0 {
			fmt.Fprintln(tw, "  WORKER\tHOST\tVERSION\tJOB VERSIONS\tIN FLIGHT\tLAST BEAT")
			for _, b := range st.Workers {
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d/%d\t%s ago\n", v(b.Worker), v(b.Host), v(versionOf(b)), jobVersionsText(b),
					b.InFlight, b.Concurrency, now.Sub(b.At).Round(time.Second))
			}
			_ = tw.Flush()
		}
	}
	for _, warn := range rep.Warnings {
		fmt.Fprintln(w, "warning:", v(warn))
	}
}
