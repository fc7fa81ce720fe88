package cli

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/waitfor"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/visible"
	"github.com/compactor-dev/compactor/operator"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/wire"
)

// evilText is what a store's key may write into a record the operator reads: a screen
// clear and a colour (CSI), an OSC 8 link, a carriage return that overwrites the line with
// "all good", a right-to-left override, an isolate, a C1 CSI, DEL, a forged second line.
const evilText = "\x1b[2J\x1b[31mFAILED\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07\rall good \u202elmth.exe\u2066x\u2069\u009b1m\x7f\nFAKE LINE"

// Records written where a store's worker key may write them, with evilText in every field
// the operator's commands print: dlq list, show and retry, events, status and pause, as
// text and as JSON, print none of those characters raw, and show each as its escape
// (docs/security.md, "What the operator reads is shown, not obeyed").
func TestOperatorOutputIsInert(t *testing.T) {
	t.Parallel()
	data, store := t.TempDir(), t.TempDir()
	svc := startDLQService(t, store, data, pipeline.HandlerFunc(func(ctx context.Context, job wire.Job, f string) (wire.Result, error) {
		return wire.Result{}, errors.New("not called: the store is paused")
	}))
	ctx := context.Background()
	nc := svc.Conn()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const sid = "019a48fc-d300-72c8-a6b9-f316c6e7ba5e"
	publish := func(subject string, v any) {
		t.Helper()
		b, ok := v.([]byte)
		if !ok {
			b, _ = json.Marshal(v)
		}
		if _, err := js.Publish(ctx, subject, b); err != nil {
			t.Fatalf("publish %s: %v", subject, err)
		}
	}
	// A pause whose reason and author are evilText: the store's jobs then stay queued.
	if _, err := fleetops.SetPaused(ctx, nc, "default", true, evilText, evilText); err != nil {
		t.Fatal(err)
	}
	waitfor.Until(t, "the worker sees the pause", func() bool {
		beats, _, err := fleetops.Workers(ctx, nc)
		return err == nil && len(beats) == 1 && beats[0].Paused
	})
	job, _ := json.Marshal(wire.Job{V: 1, Kind: wire.KindCompact, Store: "default", Path: evilText + ".jsonl", SessionID: sid, Reason: evilText})
	publish(wire.DLQSubject("default", sid), wire.DeadLetter{V: 1, Subject: wire.JobSubject("default", sid, wire.KindCompact), JobSeq: 7,
		Job: job, Reason: evilText, Error: evilText, Deliveries: 3, Worker: evilText, At: time.Now().UTC()})
	publish(wire.DLQSubject("default", sid), wire.DeadLetter{V: 1, Subject: "compactor.jobs.other\x1b[31m.x.compact", JobSeq: 8,
		JobText: evilText, Reason: evilText, At: time.Now().UTC()})
	publish(wire.DLQSubject("default", sid), []byte(evilText)) // not even a dead letter
	publish(wire.JobEventSubject("default", sid, 7), wire.Event{V: 1, JobID: evilText, JobSeq: 7, JobRef: wire.JobRef{Store: "default", SessionID: sid, Path: evilText, Kind: wire.KindCompact}, Tally: wire.Tally{Outcome: pipeline.OutcomeFailed, Reason: evilText, EntryID: evilText, LLMTokens: 3, LLMInputTokens: 2, LLMOutputTokens: 1}, Error: evilText, Worker: evilText, LLMModel: evilText, Attempt: 1, At: time.Now().UTC()})
	beat, _ := json.Marshal(fleetops.WorkerBeat{V: 1, Worker: "w-forged", Store: "default", Host: evilText, Version: evilText, Concurrency: 1,
		Started: time.Now().UTC(), At: time.Now().UTC()})
	publish("$KV."+wire.BucketWorkers+".default.w-forged", beat)
	publish(wire.JobSubject("default", sid, "\x1b[31mkind"), wire.Job{V: 1, Kind: "x", Store: "default", SessionID: sid})

	dd := "--data-dir=" + data
	code, out, errOut := runCLI(t, "dlq", "list", dd, "--json")
	var recs []operator.DeadLetterRecord
	if code != ExitOK || json.Unmarshal([]byte(out), &recs) != nil || len(recs) != 3 {
		t.Fatalf("dlq list --json: exit %d\n%s\n%s", code, out, errOut)
	}
	if recs[0].Reason != evilText || recs[0].Path != evilText+".jsonl" {
		t.Errorf("dlq list --json does not decode to the record's text: %q", recs[0].Reason)
	}
	var seqs []string
	for _, r := range recs {
		seqs = append(seqs, strconv.FormatUint(r.Seq, 10))
	}
	// Each command's output, and what of evilText it shows (escaped, or as JSON escapes).
	const shownText, shownJSON = `\x1b[2J\x1b[31mFAILED\x1b]8;;https://evil.example/\aclick\x1b]8;;\a\rall good \u202elmth.exe`, `\u202elmth.exe`
	runs := []struct {
		args  []string
		shown string
	}{
		{[]string{"dlq", "list", dd}, `\x1b[2J\x1b[31mFAILED`}, // clipped to its column
		{[]string{"dlq", "list", dd, "--json"}, shownJSON},
		{append([]string{"dlq", "show", dd}, seqs...), shownText},
		{append([]string{"dlq", "show", dd, "--json"}, seqs...), shownJSON},
		{[]string{"dlq", "retry", dd, seqs[1]}, ""}, // the detail is clipped before the subject
		{[]string{"dlq", "retry", dd, seqs[1], "--json"}, `compactor.jobs.other\u001b[31m.x.compact`},
		{[]string{"events", "--store", "default", dd}, shownText},
		{[]string{"events", "--store", "default", "--json", dd}, shownJSON},
		{[]string{"status", dd}, shownText},
		{[]string{"status", "--json", dd}, shownJSON},
		{[]string{"pause", "default", "--reason", evilText, dd, "--json"}, shownJSON},
	}
	for _, run := range runs {
		_, out, errOut := runCLI(t, run.args...)
		cmd := strings.Join(run.args, " ")
		for _, stream := range []struct{ name, text string }{{"stdout", out}, {"stderr", errOut}} {
			for i, line := range strings.Split(stream.text, "\n") {
				if !visible.Clean(line) {
					t.Errorf("compactor %s: %s line %d carries a raw control or formatting character: %q", cmd, stream.name, i+1, line)
				}
			}
		}
		if !strings.Contains(out, run.shown) {
			t.Errorf("compactor %s: the record's text is not shown as escapes (%s):\n%s%s", cmd, run.shown, out, errOut)
		}
	}
}
