// Command enqueue publishes a compaction (or branch summary) job for one Pi session file to
// a compactor's NATS JetStream, and with --wait waits for its result. See README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/sessionio"
)

const usage = `Usage: enqueue FILE [flags]

Publish a job for the Pi session FILE. FILE must lie inside a store: --store-dir DIR (with
--store NAME, default "default"), or one of the stores in COMPACTOR_STORES
("name=DIR,name2=DIR2"; default default=./sessions), chosen by --store or by which one
contains FILE. The job carries the store name, FILE's path relative to the store, and the
session id and leaf read from FILE.

A second request for a session that already has a pending job of that kind is answered
"already queued" (exit 0); with --wait, the pending job's result is awaited.

A request is identified by everything that changes its outcome (path, leaf, --force, the
overrides): the same request twice within the duplicate window is stored once, a different
one is a new job. With --wait, a different request pending for the session is waited for
first; without it, this request is not queued (exit 1).

Exit codes: 0 queued or done/skipped/superseded, 1 the job failed, was not queued, or waiting
timed out, 2 bad usage or input.

Examples:
  enqueue ~/.pi/agent/sessions/--home-u-proj--/2026-05-07T10-11-12-345Z_0196....jsonl --store-dir ~/.pi/agent/sessions
  enqueue s.jsonl --store-dir ./sessions --force --wait --timeout 10m     # compact my own session now, then reload it
  enqueue s.jsonl --kind branch_summary --to 3c40a090 --wait
  COMPACTOR_STORES=team=/srv/sessions enqueue /srv/sessions/a/b.jsonl --nats-url nats://nats:4222 --creds nats.creds

Flags:
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("enqueue", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		store      = fs.String("store", "", "store name (default: the store containing FILE, or \"default\" with --store-dir)")
		storeDir   = fs.String("store-dir", "", "root directory of the store")
		kind       = fs.String("kind", pipeline.KindCompact, "job kind: compact or branch_summary")
		to         = fs.String("to", "", "branch_summary: the entry id being navigated to")
		from       = fs.String("from", "", "branch_summary: the entry id the branch is left from (default: the leaf)")
		force      = fs.Bool("force", false, "run even if the session was modified recently (the worker's --idle); a turn in progress is never compacted")
		onlyOver   = fs.Bool("only-over-budget", false, "compact only if the session is over its model's budget (default: compact now, as compactor compact and Pi's /compact do)")
		wait       = fs.Bool("wait", false, "wait for the job's result event, print it as JSON, exit 1 if it failed")
		timeout    = fs.Duration("timeout", 10*time.Minute, "with --wait: how long to wait")
		reason     = fs.String("reason", "on-demand", "why the job was requested (shown in logs)")
		policy     = fs.String("policy", "", "cut-point policy override")
		keepRecent = fs.Int("keep-recent-tokens", 0, "keepRecentTokens override")
		instr      = fs.String("instructions", "", "custom summary instructions")
		ncfg       pipeline.NATSConfig
		dataDir    = fs.String("data-dir", pipeline.DefaultDataDir(getenv), "without --nats-url: the data directory of a compactor run on this machine, whose NATS address it records (env COMPACTOR_DATA_DIR)")
	)
	pipeline.BindNATSFlags(fs, &ncfg, getenv)
	fs.Usage = func() {
		fmt.Fprint(stdout, usage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.Usage()
				return 0
			}
			fmt.Fprintf(stderr, "enqueue: %v (see --help)\n", err)
			return 2
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		if rest[0] == "--" {
			pos = append(pos, rest[1:]...)
			break
		}
		pos, rest = append(pos, rest[0]), rest[1:]
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "enqueue: "+format+"\n", a...)
		return 2
	}
	if len(pos) != 1 {
		return bad("need exactly one session FILE (got %d arguments; see --help)", len(pos))
	}
	file := pos[0]
	if *kind != pipeline.KindCompact && *kind != pipeline.KindBranchSummary {
		return bad("--kind %q: want compact or branch_summary", *kind)
	}
	if *kind == pipeline.KindBranchSummary && *to == "" {
		return bad("--kind branch_summary needs --to ID")
	}

	st, err := pickStore(file, *store, *storeDir, getenv)
	if err != nil {
		return bad("%v", err)
	}
	rel, err := pipeline.RelPath(st.Dir, file)
	if err != nil {
		return bad("%v", err)
	}
	sess, err := sessionio.ReadFile(file)
	if err != nil {
		return bad("%s: %v", file, err)
	}
	if sess.Header.ID == "" {
		return bad("%s: no session id in the header", file)
	}
	job := pipeline.Job{Kind: *kind, Store: st.Name, Path: rel, SessionID: sess.Header.ID, Reason: *reason,
		ExpectLeafID: sess.LeafID(), TargetID: *to, FromID: *from, Force: *force, OnlyOverBudget: *onlyOver, Policy: *policy,
		KeepRecentTokens: *keepRecent, Instructions: *instr}

	if ncfg.URL == "" {
		ncfg.URL = pipeline.LocalClientURL(*dataDir)
	}
	ncfg.Name = "compactor enqueue"
	nc, err := ncfg.Connect()
	if err != nil {
		fmt.Fprintf(stderr, "enqueue: %v\n", err)
		return 1
	}
	defer nc.Close()
	res, err := pipeline.Enqueue(ctx, nc, job, *wait, *timeout)
	if err != nil {
		fmt.Fprintf(stderr, "enqueue: %v\n", err)
		return 1
	}
	for _, id := range res.WaitedFor {
		fmt.Fprintf(stderr, "waited for another request's job %s on this session to end first\n", id)
	}
	switch {
	case res.AlreadyQueued && res.Other:
		fmt.Fprintf(stderr, "not queued: another request (job %s, seq %d) is pending for session %s; run again when it ends, or use --wait to queue this one after it\n", res.JobID, res.Seq, job.SessionID)
		return 1
	case res.AlreadyQueued:
		fmt.Fprintf(stderr, "already queued: job %s (seq %d) is pending for session %s\n", res.JobID, res.Seq, job.SessionID)
	case res.Duplicate:
		fmt.Fprintf(stderr, "duplicate: the same request is already stored as job %s (seq %d)\n", res.JobID, res.Seq)
	default:
		fmt.Fprintf(stderr, "queued: job %s (seq %d) for session %s\n", res.JobID, res.Seq, job.SessionID)
	}
	if !*wait {
		return 0
	}
	b, _ := json.Marshal(res.Event)
	fmt.Fprintln(stdout, string(b))
	switch res.Event.Outcome {
	case pipeline.OutcomeFailed:
		return 1
	case pipeline.OutcomeDone:
		if res.Event.EntryID != "" {
			fmt.Fprintln(stderr, "note: a running Pi keeps its leaf in memory: reload the session (RPC switch_session, /resume) before its next prompt, or its next entry leaves the new one on a side branch")
		}
	}
	return 0
}

// pickStore chooses the store for file: --store-dir (named --store or "default"), or the
// configured stores (COMPACTOR_STORES, default default=./sessions) by --store or by which
// one contains file.
func pickStore(file, name, dir string, getenv func(string) string) (pipeline.Store, error) {
	if dir != "" {
		if name == "" {
			name = pipeline.DefaultStoreName
		}
		if err := pipeline.ValidateStoreName(name); err != nil {
			return pipeline.Store{}, fmt.Errorf("--store: %w", err)
		}
		return pipeline.Store{Name: name, Dir: dir}, nil
	}
	spec := getenv("COMPACTOR_STORES")
	if spec == "" {
		spec = "default=./sessions"
	}
	var stores []pipeline.Store
	for _, part := range strings.FieldsFunc(spec, func(r rune) bool { return r == ',' || r == ';' }) {
		st, err := pipeline.ParseStore(strings.TrimSpace(part))
		if err != nil {
			return pipeline.Store{}, fmt.Errorf("COMPACTOR_STORES: %w", err)
		}
		stores = append(stores, st)
	}
	for _, st := range stores {
		if name != "" && st.Name != name {
			continue
		}
		if _, err := pipeline.RelPath(st.Dir, file); err == nil {
			return st, nil
		}
		if name != "" {
			return pipeline.Store{}, fmt.Errorf("%s is not inside store %s (%s)", file, st.Name, st.Dir)
		}
	}
	if name != "" {
		return pipeline.Store{}, fmt.Errorf("--store %q is not configured (COMPACTOR_STORES=%q); give --store-dir", name, spec)
	}
	return pipeline.Store{}, fmt.Errorf("%s is in none of the stores %q; give --store-dir", file, spec)
}
