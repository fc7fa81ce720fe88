package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/wire"
)

func init() {
	register(&Command{Name: "enqueue", Summary: "ask a running compactor to compact (or branch-summarize) one session (--wait: for its result)", Run: runEnqueue})
}

const enqueueHelp = `Publish a job for the Pi session FILE. FILE must lie inside a store: --store-dir DIR (with
--store NAME, default "default"), or one of the stores in COMPACTOR_STORES
("NAME=DIR,NAME2=DIR2"; default: store "default" at Pi's session directory,
$PI_CODING_AGENT_DIR/sessions or ~/.pi/agent/sessions, as the Pi extension's), chosen by
--store or by which one contains FILE. The job carries the store name, FILE's path relative to the store, and the
session id and leaf read from FILE.

A second request for a session that already has a pending job of that kind is answered
"already queued" (exit 0); with --wait, the pending job's result is awaited.

A request is identified by everything that changes its outcome (path, leaf, --force, the
overrides): the same request twice within the duplicate window is stored once, a different
one is a new job. With --wait, a different request pending for the session is waited for
first; without it, this request is not queued (exit 1).

With --wait the job's result event is printed as JSON on stdout (docs/json-output.md); a
wait that times out says whether the job is still queued and whether a worker serves its
store.

A job for a store that no worker serves now is not queued (exit 1; the stores that are
served are named), unless --allow-unserved. enqueue never creates or changes a stream:
without the ones 'compactor run' sets up it says which is missing (exit 1).

Exit codes: 0 queued or done/skipped/superseded, 1 the job failed, was not queued, or waiting
timed out, 2 bad usage or input.

Examples:
  enqueue ~/.pi/agent/sessions/--home-u-proj--/2026-05-07T10-11-12-345Z_0196....jsonl --store-dir ~/.pi/agent/sessions
  enqueue s.jsonl --store-dir ./sessions --force --wait --timeout 10m     # compact my own session now, then reload it
  enqueue s.jsonl --kind branch_summary --to 3c40a090 --wait
  COMPACTOR_STORES=team=/srv/sessions enqueue /srv/sessions/a/b.jsonl --nats-url nats://nats:4222 --creds nats.creds

(The same command is 'compactor enqueue'.)`

func runEnqueue(ctx context.Context, env *Env) error {
	fs := newFlagSet(env, "enqueue", "FILE [flags]", enqueueHelp)
	var (
		store      = fs.String("store", "", "store name (default: the store containing FILE, or \"default\" with --store-dir)")
		storeDir   = fs.String("store-dir", "", "root directory of the store")
		kind       = fs.String("kind", wire.KindCompact, "job kind: compact or branch_summary")
		to         = fs.String("to", "", "branch_summary: the entry id being navigated to")
		from       = fs.String("from", "", "branch_summary: the entry id the branch is left from (default: the leaf)")
		force      = fs.Bool("force", false, "run even if the session was modified recently (the worker's --idle); a turn in progress is never compacted")
		onlyOver   = fs.Bool("only-over-budget", false, "compact only if the session is over its model's budget (default: compact now, as compactor compact and Pi's /compact do)")
		wait       = fs.Bool("wait", false, "wait for the job's result event, print it as JSON, exit 1 if it failed")
		timeout    = fs.Duration("timeout", 10*time.Minute, "with --wait: how long to wait")
		reason     = fs.String("reason", "on-demand", "why the job was requested (shown in logs)")
		policy     = fs.String("policy", "", "cut-point policy override")
		keepRecent = fs.Int("keep-recent-tokens", 0, "keepRecentTokens override")
		instr      = instructionsFlag(fs.FlagSet, "; a store's worker may refuse them (--store-instructions)")
		dataDir    = fs.String("data-dir", pipeline.DefaultDataDir(env.Getenv), "without --nats-url: the data directory of a compactor run on this machine, whose NATS address it records (env COMPACTOR_DATA_DIR)")
		ncfg       pipeline.NATSConfig
	)
	allowUnserved := allowUnservedFlag(fs)
	bindNATSFlags(fs.FlagSet, &ncfg, env.Getenv)
	pos, err := fs.parse(env.Args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("need exactly one session FILE (got %d arguments; see --help)", len(pos))
	}
	file := pos[0]
	if *kind != wire.KindCompact && *kind != wire.KindBranchSummary {
		return usageErrorf("--kind %q: want compact or branch_summary", *kind)
	}
	if *kind == wire.KindBranchSummary && *to == "" {
		return usageErrorf("--kind branch_summary needs --to ID")
	}
	if *keepRecent < 0 {
		return usageErrorf("--keep-recent-tokens %d: must not be negative", *keepRecent)
	}
	if *timeout < 0 {
		return usageErrorf("--timeout %s: must not be negative", *timeout)
	}
	if err := checkInstructionsFlag(*instr); err != nil {
		return err
	}

	st, err := pickStore(file, *store, *storeDir, env.Getenv)
	if err != nil {
		return err
	}
	rel, err := pipeline.RelPath(st.Dir, file)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return err
		}
		return &UsageError{Err: err} // not in the store, or no such file
	}
	sess, err := sessionio.ReadFile(file)
	if err != nil {
		return inputError(err) // the error names the file
	}
	if sess.Header.ID == "" {
		return usageErrorf("%s: no session id in the header", file)
	}
	job := wire.Job{Kind: *kind, Store: st.Name, Path: rel, SessionID: sess.Header.ID, Reason: *reason,
		ExpectLeafID: sess.LeafID(), TargetID: *to, FromID: *from, Force: *force, OnlyOverBudget: *onlyOver, Policy: *policy,
		KeepRecentTokens: *keepRecent, Instructions: *instr}

	ncfg = pipeline.LocalNATS(*dataDir, ncfg)
	ncfg.Name, ncfg.Role, ncfg.Stores = "compactor enqueue", pipeline.RoleAgent, []string{st.Name}
	nc, err := ncfg.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := checkServed(ctx, env.Stderr, nc, []string{st.Name}, *allowUnserved); err != nil {
		return err
	}
	res, err := pipeline.Enqueue(ctx, nc, job, *wait, *timeout, pipeline.OnWaiting(func(id string, seq uint64) {
		fmt.Fprintf(env.Stderr, "waiting: another request's job %s (seq %d) is pending on this session; this one is queued when it ends\n", id, seq)
	}))
	if err != nil {
		return err
	}
	for _, id := range res.WaitedFor {
		fmt.Fprintf(env.Stderr, "waited for another request's job %s on this session to end first\n", id)
	}
	switch {
	case res.AlreadyQueued && res.Other:
		fmt.Fprintf(env.Stderr, "not queued: another request (job %s, seq %d) is pending for session %s; run again when it ends, or use --wait to queue this one after it\n", res.JobID, res.Seq, job.SessionID)
		return &ExitError{Code: ExitFailed}
	case res.AlreadyQueued:
		fmt.Fprintf(env.Stderr, "already queued: job %s (seq %d) is pending for session %s\n", res.JobID, res.Seq, job.SessionID)
	case res.Duplicate:
		fmt.Fprintf(env.Stderr, "duplicate: the same request is already stored as job %s (seq %d)\n", res.JobID, res.Seq)
	default:
		fmt.Fprintf(env.Stderr, "queued: job %s (seq %d) for session %s\n", res.JobID, res.Seq, job.SessionID)
	}
	if !*wait {
		return nil
	}
	b, _ := json.Marshal(res.Event)
	fmt.Fprintln(jsonOut(env.Stdout), string(b))
	switch res.Event.Outcome {
	case pipeline.OutcomeFailed:
		return &ExitError{Code: ExitFailed}
	case pipeline.OutcomeDone:
		if res.Event.EntryID != "" {
			fmt.Fprintln(env.Stderr, "note: a running Pi keeps its leaf in memory: reload the session (RPC switch_session, /resume) before its next prompt, or its next entry leaves the new one on a side branch")
		}
	}
	return nil
}

// pickStore chooses the store for file: --store-dir (named --store or "default"), or the
// configured stores (COMPACTOR_STORES) by --store or by which one contains file.
func pickStore(file, name, dir string, getenv func(string) string) (pipeline.Store, error) {
	if dir != "" {
		if name == "" {
			name = pipeline.DefaultStoreName
		}
		if err := wire.ValidateStoreName(name); err != nil {
			return pipeline.Store{}, usageErrorf("--store: %v", err)
		}
		return pipeline.Store{Name: name, Dir: dir}, nil
	}
	stores, spec, err := envStores(getenv)
	if err != nil {
		return pipeline.Store{}, err
	}
	for _, st := range stores {
		if name != "" && st.Name != name {
			continue
		}
		if _, err := pipeline.RelPath(st.Dir, file); err == nil {
			return st, nil
		}
		if name != "" {
			return pipeline.Store{}, usageErrorf("%s is not inside store %s (%s)", file, st.Name, st.Dir)
		}
	}
	if name != "" {
		return pipeline.Store{}, usageErrorf("--store %q is not configured (COMPACTOR_STORES=%q); give --store-dir", name, spec)
	}
	return pipeline.Store{}, usageErrorf("%s is in none of the stores %q; give --store-dir", file, spec)
}
