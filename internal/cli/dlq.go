package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor-dev/compactor/internal/visible"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/wire"
)

func init() {
	register(&Command{Name: "dlq", Summary: "list, show, retry or purge dead-lettered jobs", Run: runDLQ})
}

// dlqUsage follows the program name in the usage line.
const dlqUsage = "list|show|retry|purge [SEQ...] [flags]"

const dlqHelp = `
Dead letters are the jobs that were refused (bad payload, unsafe path), failed for good, or
ran out of attempts; they are kept in COMPACTOR_DLQ (30 days) with the job, the reason and
the last error.

  list    the dead letters the filters select, oldest first
  show    the dead letters SEQ... in full (the job, the reason, the error)
  retry   publish each selected job again (the original request, with a new id so that it
          is not taken for a duplicate) and remove its dead letter; --wait waits for the
          results. A session with another job pending is left for later. A job that
          carries summary instructions (written by whoever published it, a store's key) is
          left too, unless --allow-instructions: then each is logged with this operator's
          identity (docs/security.md, "Instructions are data").
  purge   delete the selected dead letters

retry and purge act on SEQ... or on the filters; with neither they need --all. A dead
letter is retried only into the store of its subject: one whose job (or job subject) names
another store is refused, naming both, and nothing is published (docs/security.md).

Dead letters are a NATS account's: the operator's key of the account (--nkey), or
--credentials DIR (compactor auth's) with --store to pick the account.
Without --nats-url, the NATS of the compactor run on --data-dir is used (else
nats://127.0.0.1:4222).

Exit codes: 0 done, 1 a retry was not queued or its job failed, 2 bad usage.

Examples:
  compactor dlq list --reason "max deliveries" --newer-than 24h
  compactor dlq show 42 --json
  compactor dlq retry --store team --reason "llm transient" --wait
  compactor dlq purge --older-than 720h --dry-run`

// dlqFlags are the flags of every dlq subcommand.
type dlqFlags struct {
	nats          pipeline.NATSConfig
	filter        pipeline.DeadLetterFilter
	asJSON        bool
	all           bool
	dryRun        bool
	wait          bool
	timeout       time.Duration
	configFile    *string
	ops           *opsFlags
	allowUnserved *bool
	allowInstr    bool
	credentials   string
	// account: the NATS settings acted with (the account's operator), for the log of who
	// passed instructions on.
	account pipeline.NATSConfig
}

func runDLQ(ctx context.Context, env *Env) error {
	fs := newFlagSet(env, "dlq", dlqUsage, dlqHelp)
	var f dlqFlags
	bindNATSFlags(fs.FlagSet, &f.nats, env.Getenv)
	f.ops = bindOpsFlags(fs.FlagSet, env, opsClient)
	f.configFile = configFlag(fs.FlagSet, env)
	fs.StringVar(&f.filter.Store, "store", "", "only dead letters of this store")
	fs.StringVar(&f.filter.SessionID, "session", "", "only dead letters of this session id")
	fs.StringVar(&f.filter.Reason, "reason", "", "only dead letters whose reason or error contains this text (any case)")
	fs.DurationVar(&f.filter.OlderThan, "older-than", 0, "only dead letters at least this old")
	fs.DurationVar(&f.filter.NewerThan, "newer-than", 0, "only dead letters at most this old")
	fs.BoolVar(&f.asJSON, "json", false, "print JSON instead of a table")
	fs.BoolVar(&f.all, "all", false, "retry or purge: act on every dead letter (when no SEQ or filter is given)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "retry or purge: list what would be done, do nothing")
	fs.BoolVar(&f.wait, "wait", false, "retry: wait for each retried job's final event")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "retry --wait: how long to wait for each job")
	f.allowUnserved = allowUnservedFlag(fs)
	fs.BoolVar(&f.allowInstr, "allow-instructions", false, "retry: also publish jobs that carry summary instructions, passing them on as they are (each logged with the operator's identity); without it such a dead letter stays")
	fs.StringVar(&f.credentials, "credentials", "", "the fleet's credentials directory (compactor auth --credentials): act in the account of --store with its operator's seed")
	pos, err := fs.parse(env.Args)
	if err != nil {
		return err
	}
	if err := applyConfigFile(fs.FlagSet, *f.configFile); err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageErrorf("need a subcommand: list, show, retry or purge (see --help)")
	}
	action := pos[0]
	for _, a := range pos[1:] {
		seq, err := strconv.ParseUint(a, 10, 64)
		if err != nil || seq == 0 {
			return usageErrorf("%q is not a dead letter sequence (the SEQ column of compactor dlq list)", a)
		}
		f.filter.Seqs = append(f.filter.Seqs, seq)
	}
	switch action {
	case "list":
		if len(f.filter.Seqs) > 0 {
			return usageErrorf("list takes no SEQ (use show)")
		}
	case "show":
		if len(f.filter.Seqs) == 0 {
			return usageErrorf("show needs SEQ... (see compactor dlq list)")
		}
	case "retry", "purge":
		if f.filter.Empty() && !f.all {
			return usageErrorf("%s needs SEQ..., a filter (--store, --session, --reason, --older-than, --newer-than) or --all", action)
		}
	default:
		return usageErrorf("unknown dlq subcommand %q: want list, show, retry or purge", action)
	}
	if f.filter.Store != "" {
		if err := wire.ValidateStoreName(f.filter.Store); err != nil {
			return usageErrorf("--store: %v", err)
		}
	}
	ncfg, err := f.ops.operatorAccount(f.nats, f.credentials, "dlq", f.filter.Store, "dead letters")
	if err != nil {
		return err
	}
	f.account = ncfg
	nc, err := ncfg.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	q, err := pipeline.OpenDLQ(ctx, nc)
	if err != nil {
		return err
	}
	recs, err := q.List(ctx, f.filter)
	if err != nil {
		return err
	}
	switch {
	case action == "list" || f.dryRun:
		if f.dryRun {
			fmt.Fprintf(env.Stderr, "dry run: %s would act on %d dead letters\n", action, len(recs))
		}
		return writeDeadLetters(env.Stdout, recs, f.asJSON)
	case action == "show":
		return showDeadLetters(env.Stdout, recs, f.asJSON)
	case action == "purge":
		n, err := q.Delete(ctx, recs)
		if f.asJSON {
			_ = json.NewEncoder(jsonOut(env.Stdout)).Encode(map[string]int{"purged": n})
		} else {
			fmt.Fprintf(env.Stdout, "purged %d dead letters\n", n)
		}
		return err
	}
	results, err := retryServed(ctx, env.Stderr, nc, q, recs, &f)
	if err != nil {
		return err
	}
	failed := writeRetries(env.Stdout, results, f.asJSON)
	if failed > 0 {
		return &ExitError{Code: ExitFailed, Err: fmt.Errorf("%d of %d dead letters not retried or failed again", failed, len(results))}
	}
	return nil
}

// retryServed retries the dead letters of the stores a worker serves. Those of a store
// that no worker serves are left where they are, each with the reason in its result,
// unless --allow-unserved.
func retryServed(ctx context.Context, w io.Writer, nc *nats.Conn, q *pipeline.DLQ, recs []pipeline.DeadLetterRecord, f *dlqFlags) ([]pipeline.RetryResult, error) {
	var stores []string
	for _, r := range recs {
		if !slices.Contains(stores, r.Store) {
			stores = append(stores, r.Store)
		}
	}
	if len(stores) == 0 {
		return nil, nil
	}
	var ue *pipeline.UnservedError
	if err := checkServed(ctx, w, nc, stores, *f.allowUnserved); err != nil {
		if !errors.As(err, &ue) {
			return nil, err
		}
		fmt.Fprintln(w, err)
	}
	var serve []pipeline.DeadLetterRecord
	held := map[uint64]string{} // dead letters left for their instructions, with the reason
	for _, r := range recs {
		if ue != nil && slices.Contains(ue.Stores, r.Store) {
			continue
		}
		if why := f.passInstructions(w, r); why != "" {
			held[r.Seq] = why
			continue
		}
		serve = append(serve, r)
	}
	done := q.Retry(ctx, serve, f.wait, f.timeout)
	out := make([]pipeline.RetryResult, 0, len(recs))
	for _, r := range recs {
		if len(done) > 0 && done[0].Seq == r.Seq {
			out, done = append(out, done[0]), done[1:]
			continue
		}
		why, ok := held[r.Seq]
		if !ok {
			why = fmt.Sprintf("not queued: no worker serves store %s (give --allow-unserved to queue anyway)", r.Store)
		}
		out = append(out, pipeline.RetryResult{Seq: r.Seq, Store: r.Store, SessionID: r.SessionID, Path: r.Path, Error: why})
	}
	return out, nil
}

// passInstructions decides on a dead letter whose job carries summary instructions:
// without --allow-instructions it is left (the reason is returned); with it the operator
// passes them on, and says so on w with its identity. Instructions are a store's key's
// text, not the operator's: replaying them is the operator's act, never a side effect of
// a filter that selected many dead letters. A dead letter whose job is another store's
// or session's is not decided on here: Retry refuses it whatever the flag, naming both
// stores, and nothing is passed on (nor said to be).
func (f *dlqFlags) passInstructions(w io.Writer, r pipeline.DeadLetterRecord) string {
	if r.Foreign != "" {
		return ""
	}
	job, err := wire.DecodeJob(r.Job)
	if err != nil || job.Instructions == "" {
		return "" // Retry says what is wrong with a job it cannot decode
	}
	if !f.allowInstr {
		return fmt.Sprintf("not queued: the job carries summary instructions (%s) that its publisher wrote; see them with `compactor dlq show %d`, then retry with --allow-instructions to pass them on", instructionsDigest(job.Instructions), r.Seq)
	}
	fmt.Fprintf(w, "dlq retry: passing summary instructions on to store %s (dead letter %d, session %s, %s), as %s\n",
		visible.Line(job.Store), r.Seq, visible.Line(job.SessionID), instructionsDigest(job.Instructions), operatorIdentity(f.account))
	return ""
}

func writeDeadLetters(w io.Writer, recs []pipeline.DeadLetterRecord, asJSON bool) error {
	if asJSON {
		if recs == nil {
			recs = []pipeline.DeadLetterRecord{}
		}
		enc := json.NewEncoder(jsonOut(w))
		enc.SetIndent("", "  ")
		return enc.Encode(recs)
	}
	if len(recs) == 0 {
		_, err := fmt.Fprintln(w, "no dead letters")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tAGE\tSTORE\tSESSION\tKIND\tDELIVERIES\tPATH\tREASON")
	now := time.Now()
	// Every text but the sequence and the age is what the store's worker wrote (or any
	// holder of its key): escaped (visible.Line), as in every command that prints records.
	v := visible.Line
	for _, r := range recs {
		reason := r.Reason
		if r.Foreign != "" {
			reason = "REFUSED: " + r.Foreign
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.Seq, age(now.Sub(r.At)), v(r.Store), v(clip(r.SessionID, 36)), v(orDash(r.Kind)),
			r.Deliveries, v(clip(orDash(r.Path), 60)), v(clip(reason, 80)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d dead letters\n", len(recs))
	return err
}

func showDeadLetters(w io.Writer, recs []pipeline.DeadLetterRecord, asJSON bool) error {
	if asJSON {
		return writeDeadLetters(w, recs, true)
	}
	for i, r := range recs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		v := visible.Line
		fmt.Fprintf(w, "dead letter %d (%s ago, %s)\n", r.Seq, age(time.Since(r.At)), r.At.Local().Format(time.RFC3339))
		fmt.Fprintf(w, "  store:      %s\n  session:    %s\n  path:       %s\n  kind:       %s\n", v(r.Store), v(r.SessionID), v(orDash(r.Path)), v(orDash(r.Kind)))
		fmt.Fprintf(w, "  job seq:    %d (%d deliveries, last worker %s)\n", r.JobSeq, r.Deliveries, v(orDash(r.Worker)))
		fmt.Fprintf(w, "  reason:     %s\n", v(r.Reason))
		if r.Error != "" && r.Error != r.Reason {
			fmt.Fprintf(w, "  error:      %s\n", v(r.Error))
		}
		if r.Foreign != "" {
			fmt.Fprintf(w, "  refused:    %s\n", v(r.Foreign))
		}
		if len(r.Job) > 0 {
			fmt.Fprintf(w, "  job:        %s\n", v(string(r.Job)))
		} else {
			fmt.Fprintf(w, "  payload:    %s (not a job: it cannot be retried)\n", v(r.JobText))
		}
	}
	return nil
}

// writeRetries prints the results and returns how many were not queued or failed again.
func writeRetries(w io.Writer, results []pipeline.RetryResult, asJSON bool) int {
	failed := 0
	for _, r := range results {
		if !r.Queued || r.Error != "" || (r.Event != nil && r.Event.Outcome == pipeline.OutcomeFailed) {
			failed++
		}
	}
	if asJSON {
		if results == nil {
			results = []pipeline.RetryResult{}
		}
		enc := json.NewEncoder(jsonOut(w))
		enc.SetIndent("", "  ")
		_ = enc.Encode(results)
		return failed
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tSTORE\tSESSION\tRESULT\tJOB SEQ\tDETAIL")
	for _, r := range results {
		result, detail := "queued", r.Error
		switch {
		case !r.Queued:
			result = "not queued"
		case r.Event != nil:
			result = string(r.Event.Outcome)
			if detail == "" {
				detail = r.Event.Reason
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", r.Seq, visible.Line(r.Store), visible.Line(clip(r.SessionID, 36)), visible.Line(result), orDash(seqText(r.JobSeq)), visible.Line(clip(detail, 80)))
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "%d retried, %d not queued or failed again\n", len(results)-failed, failed)
	return failed
}

func seqText(n uint64) string {
	if n == 0 {
		return ""
	}
	return strconv.FormatUint(n, 10)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func clip(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// age prints a duration the way an operator reads it: 45s, 12m, 5h, 3d.
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
