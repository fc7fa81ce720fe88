package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/compactor-dev/compactor/agents"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/wire"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor-dev/compactor/engine"
	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/internal/pisession"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/outcome"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/pipeline/pipelinetest"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
)

// fakeOpenAI is the OpenAI summarizer on a fake endpoint, without retries or waits.
func fakeOpenAI(t testing.TB, url string) summarize.Summarizer {
	t.Helper()
	s, err := summarize.NewOpenAI(summarize.OpenAIConfig{BaseURL: url, Model: "fake-model", APIKey: "sk-test-SECRET", MaxRetries: -1,
		Timeout: time.Minute, Sleep: func(context.Context, time.Duration) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// liveBundle is a real worker (pipelinetest: an embedded nats-server on a random port, a
// store in a temp dir) running the real engine: tiktoken, nearest policy, a fake
// OpenAI-compatible endpoint over HTTP. wrap, if set, wraps the engine's handler.
type liveBundle struct {
	*pipelinetest.Server
	llm *fakellm.Server
	eng *engine.Engine
}

const liveSrc = "../testdata/corpus/12-tricky-custom-message-cut.jsonl"

func newLiveBundle(t *testing.T, idle time.Duration, wrap func(pipeline.Handler) pipeline.Handler, start bool) *liveBundle {
	t.Helper()
	b := &liveBundle{llm: fakellm.Start(t)}
	eng, err := engine.New(fakeOpenAI(t, b.llm.URL()), engine.Settings{KeepRecentTokens: 2000, ContextWindow: 20000})
	if err != nil {
		t.Fatal(err)
	}
	b.eng = eng
	// The store's root, made here so that the engine confines its files to it, as
	// `compactor run` does (engine.Roots).
	dir := t.TempDir()
	eng.Roots = pipeline.StoreRoots([]pipeline.Store{{Name: pipeline.DefaultStoreName, Dir: dir}})
	q := Queues{
		Follow: func(ctx context.Context, j wire.Job) (fleetops.EnqueueResult, error) { return b.Service.Follow(ctx, j) },
		Queue:  func(ctx context.Context, j wire.Job) (fleetops.EnqueueResult, error) { return b.Service.Queue(ctx, j) },
	}
	h := Handler(eng, PiVersions{}, func() agents.PreparedStore { return b.Service.Prepared() }, q)
	if wrap != nil {
		h = wrap(h)
	}
	b.Server = pipelinetest.Start(t, pipelinetest.Options{StoreDir: dir, Handler: h, Assessor: Assessor(eng, PiVersions{}), Idle: idle, Paused: !start,
		Configure: func(c *pipeline.Config) {
			c.BackoffBase, c.BackoffMax = 100*time.Millisecond, time.Second
			c.Bridger = Bridger(eng, PiVersions{}, func() agents.PreparedStore { return b.Service.Prepared() }, q, slog.Default())
		}})
	return b
}

// awaitBridges waits until the service answers the store's bridge requests: Resume runs it
// in the background, and a request sent before it subscribed finds no responder. The probe
// (version 0) is refused without reading anything.
func (b *liveBundle) awaitBridges(t *testing.T, id string) {
	t.Helper()
	probe, _ := json.Marshal(wire.BridgeRequest{Store: "default", SessionID: id})
	waitfor.Until(t, "the service answering bridge requests", func() bool {
		_, err := b.Conn.Request(wire.BridgeSubject("default", id), probe, 5*time.Second)
		return !errors.Is(err, nats.ErrNoResponders)
	})
}

// session copies the corpus session into the store under rel with its own session id.
func (b *liveBundle) session(t *testing.T, rel, id string) string {
	t.Helper()
	data, err := os.ReadFile(liveSrc)
	if err != nil {
		t.Fatal(err)
	}
	data = []byte(strings.Replace(string(data), "019ad9b0-0000-7000-8000-00000000aaaa", id, 1))
	p := filepath.Join(b.StoreDir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// job is an on-demand compact job for the file as it is now.
func (b *liveBundle) job(t *testing.T, file string) wire.Job {
	t.Helper()
	j, err := b.JobFor(file)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func (b *liveBundle) enqueue(t *testing.T, j wire.Job) fleetops.EnqueueResult {
	t.Helper()
	r, err := b.Enqueue(context.Background(), j, true, waitfor.HangGuard)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// entries returns the entries of type typ in the file.
func entriesOf(t *testing.T, file, typ string) []*sessionio.Entry {
	t.Helper()
	s, err := sessionio.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []*sessionio.Entry
	for _, e := range s.Entries {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// A retry with --force is a new job: it is not answered by the earlier skipped result.
func TestLiveForceRetryIsANewJob(t *testing.T) {
	t.Parallel()
	b := newLiveBundle(t, time.Hour, nil, true)
	file := b.session(t, "--p--/a_019a0000-0000-7000-8000-000000000001.jsonl", "019a0000-0000-7000-8000-000000000001")
	j := b.job(t, file)
	r := b.enqueue(t, j)
	if r.Event.Outcome != pipeline.OutcomeSkipped || !strings.Contains(r.Event.Reason, "active") {
		t.Fatalf("first (not forced, file just written): %+v", r.Event)
	}
	j.Force = true
	r2 := b.enqueue(t, j)
	if r2.Duplicate || r2.Event.JobSeq == r.Event.JobSeq || r2.Event.Outcome != pipeline.OutcomeDone || r2.Event.EntryID == "" {
		t.Fatalf("forced retry answered by the earlier job or not run: %+v %+v", r2, r2.Event)
	}
	if n := len(entriesOf(t, file, sessionio.TypeCompaction)); n != 1 {
		t.Fatalf("%d compactions in the file, want 1", n)
	}
}

// A copy of a session under another name gets its own job and its own entry.
func TestLiveCopyUnderAnotherName(t *testing.T) {
	t.Parallel()
	b := newLiveBundle(t, -1, nil, true)
	const id = "019a0000-0000-7000-8000-000000000002"
	orig := b.session(t, "--p--/a_"+id+".jsonl", id)
	copied := b.session(t, "--p--/copy-of-a.jsonl", id)
	r1 := b.enqueue(t, b.job(t, orig))
	r2 := b.enqueue(t, b.job(t, copied))
	if r1.Event.Outcome != pipeline.OutcomeDone || r2.Event.Outcome != pipeline.OutcomeDone || r2.Duplicate || r2.Event.JobSeq == r1.Event.JobSeq {
		t.Fatalf("original %+v, copy %+v %+v", r1.Event, r2, r2.Event)
	}
	for _, f := range []string{orig, copied} {
		if n := len(entriesOf(t, f, sessionio.TypeCompaction)); n != 1 {
			t.Fatalf("%s: %d compactions, want 1", filepath.Base(f), n)
		}
	}
}

// A session renamed while its job is queued is found by its id and compacted.
func TestLiveRenameWhileQueued(t *testing.T) {
	t.Parallel()
	b := newLiveBundle(t, -1, nil, false)
	const id = "019a0000-0000-7000-8000-000000000003"
	file := b.session(t, "--p--/2026-01-01T00-00-00-000Z_"+id+".jsonl", id)
	j := b.job(t, file)
	events := make(chan fleetops.EnqueueResult, 1)
	go func() {
		r, err := b.Enqueue(context.Background(), j, true, waitfor.HangGuard)
		if err != nil {
			t.Error(err)
		}
		events <- r
	}()
	// The job is queued (no worker runs yet); then the file moves to another project dir.
	waitfor.Until(t, "the job queued", func() bool {
		js, _ := b.Conn.JetStream()
		info, err := js.StreamInfo(wire.StreamJobs)
		return err == nil && info.State.Msgs == 1
	})
	moved := filepath.Join(b.StoreDir, "--q--", filepath.Base(file))
	if err := os.MkdirAll(filepath.Dir(moved), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file, moved); err != nil {
		t.Fatal(err)
	}
	b.Resume()
	r := <-events
	if r.Event.Outcome != pipeline.OutcomeDone || r.Event.Path != "--q--/"+filepath.Base(file) {
		t.Fatalf("event %+v", r.Event)
	}
	if n := len(entriesOf(t, moved, sessionio.TypeCompaction)); n != 1 {
		t.Fatalf("%d compactions in the moved file, want 1", n)
	}
}

// crashOnce runs the real handler, then makes the first delivery end without an answer
// (as a worker that crashed after its append and before its ack): the job is delivered
// again, and the second delivery must find the entry instead of appending another.
func crashOnce(calls *atomic.Int32) func(pipeline.Handler) pipeline.Handler {
	return func(h pipeline.Handler) pipeline.Handler {
		return pipeline.HandlerFunc(func(ctx context.Context, job wire.Job, file string) (wire.Result, error) {
			res, err := h.Handle(ctx, job, file)
			if calls.Add(1) == 1 && err == nil {
				return wire.Result{}, pipeline.Retry(fmt.Errorf("worker crashed after appending %s", res.EntryID))
			}
			return res, err
		})
	}
}

func TestLiveRedeliveryFindsTheEntry(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{wire.KindCompact, wire.KindBranchSummary} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			b := newLiveBundle(t, -1, crashOnce(&calls), true)
			const id = "019a0000-0000-7000-8000-000000000004"
			file := b.session(t, "--p--/a_"+id+".jsonl", id)
			j := b.job(t, file)
			typ := sessionio.TypeCompaction
			if kind == wire.KindBranchSummary {
				j.Kind, j.TargetID, typ = kind, "bbbb0004", sessionio.TypeBranchSummary
			}
			r := b.enqueue(t, j)
			if calls.Load() != 2 || r.Event.Outcome != pipeline.OutcomeDone || r.Event.Attempt != 2 {
				t.Fatalf("%d handler calls, event %+v", calls.Load(), r.Event)
			}
			got := entriesOf(t, file, typ)
			if len(got) != 1 || got[0].ID != r.Event.EntryID || !strings.Contains(r.Event.Reason, "already in the file") {
				t.Fatalf("%d %s entries (event entry %s, reason %q), want exactly the one the first delivery wrote", len(got), typ, r.Event.EntryID, r.Event.Reason)
			}
		})
	}
}

// appendPi appends lines to file the way Pi does (one write each, no lock).
func appendPi(t *testing.T, file string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if err := pisession.Append(file, l); err != nil {
			t.Fatal(err)
		}
	}
}

func piUser(id, parent string) string {
	return fmt.Sprintf(`{"type":"message","id":%q,"parentId":%q,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":[{"type":"text","text":"and now?"}],"timestamp":1767225601000}}`, id, parent)
}

func piAssistant(id, parent string) string {
	return fmt.Sprintf(`{"type":"message","id":%q,"parentId":%q,"timestamp":"2026-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"done"}],"api":"openai-completions","provider":"p","model":"m","usage":{"input":9000,"output":5,"cacheRead":0,"cacheWrite":0,"totalTokens":9005},"stopReason":"stop","timestamp":1767225602000}}`, id, parent)
}

// A session that grows while its summary is written: when the growth is a finished turn,
// the paid summary is appended against the new leaf; while a turn is still in progress,
// the job is skipped (busy), neither dead-lettered nor retried, and nothing is written.
func TestLiveBusySession(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		lines func(leaf string) []string
		want  pipeline.Outcome
	}{
		{"finished turn: salvaged", func(leaf string) []string {
			return []string{piUser("pu000001", leaf), piAssistant("pa000001", "pu000001")}
		}, pipeline.OutcomeDone},
		{"turn in progress: skipped", func(leaf string) []string { return []string{piUser("pu000001", leaf)} }, pipeline.OutcomeSkipped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newLiveBundle(t, -1, nil, true)
			// The summary is answered only once Pi has written: Pi writes while it is being written.
			written := make(chan struct{})
			b.llm.SetDefault(fakellm.Behavior{Hold: written})
			const id = "019a0000-0000-7000-8000-000000000005"
			file := b.session(t, "--p--/a_"+id+".jsonl", id)
			j := b.job(t, file)
			go func() {
				for b.llm.Count() == 0 {
					time.Sleep(5 * time.Millisecond)
				}
				appendPi(t, file, tc.lines(j.ExpectLeafID)...)
				close(written)
			}()
			r := b.enqueue(t, j)
			if r.Event.Outcome != tc.want || r.Event.Attempt != 1 {
				t.Fatalf("event %+v, want %s at the first attempt", r.Event, tc.want)
			}
			comps := entriesOf(t, file, sessionio.TypeCompaction)
			s, _ := sessionio.ReadFile(file)
			path, _ := s.Path("")
			switch tc.want {
			case pipeline.OutcomeDone:
				if len(comps) != 1 || comps[0].ParentID != "pa000001" || s.LeafID() != comps[0].ID || len(path) < 3 || path[len(path)-2].ID != "pa000001" {
					t.Fatalf("want one compaction hanging off Pi's new leaf pa000001; got %d, leaf %s", len(comps), s.LeafID())
				}
			default:
				if len(comps) != 0 || !strings.Contains(r.Event.Reason, "turn in progress") || s.LeafID() != "pu000001" {
					t.Fatalf("want nothing written and a turn-in-progress reason; %d compactions, reason %q", len(comps), r.Event.Reason)
				}
				if !r.Event.Busy {
					t.Errorf("event %+v: a busy skip must say so (sweeps retry it after their backoff)", r.Event)
				}
			}
			if n := b.llm.Count(); n != 1 {
				t.Errorf("%d LLM calls, want 1 (the summary is paid once)", n)
			}
		})
	}
}

// A prepare job on a session with a turn in progress (a live agent, which is what
// preparations are for) stores its result in COMPACTOR_PREPARED and writes nothing to the
// session; a second one after the session grew builds on the first.
func TestLivePrepareJob(t *testing.T) {
	t.Parallel()
	b := newLiveBundle(t, time.Hour, nil, true)
	const id = "019a0000-0000-7000-8000-000000000006"
	file := b.session(t, "--p--/a_"+id+".jsonl", id)
	j := b.job(t, file)
	appendPi(t, file, piUser("pu000001", j.ExpectLeafID)) // mid-turn, just modified
	before, _ := os.ReadFile(file)
	j = b.job(t, file)
	j.Kind = wire.KindPrepare
	r := b.enqueue(t, j)
	if r.Event.Outcome != pipeline.OutcomeDone {
		t.Fatalf("event %+v", r.Event)
	}
	raw, err := b.Service.Prepared().Get(context.Background(), "default", id)
	if err != nil || raw == nil {
		t.Fatalf("no prepared value: %v", err)
	}
	var pr engine.Prepared
	if err := json.Unmarshal(raw, &pr); err != nil {
		t.Fatal(err)
	}
	if pr.LeafID != "pu000001" || pr.Path != j.Path || pr.Store != "default" || pr.Summary == "" || pr.Incremental {
		t.Fatalf("prepared %+v", pr)
	}
	if after, _ := os.ReadFile(file); string(after) != string(before) {
		t.Fatal("a prepare job wrote to the session")
	}
	// The agent goes on; the next preparation sends the whole span again, beginning with
	// the first request's conversation (append-only: a provider's prompt cache serves it).
	appendPi(t, file, piAssistant("pa000001", "pu000001"), piUser("pu000002", "pa000001"), piAssistant("pa000002", "pu000002"))
	j2 := b.job(t, file)
	j2.Kind = wire.KindPrepare
	if r := b.enqueue(t, j2); r.Event.Outcome != pipeline.OutcomeDone {
		t.Fatalf("second: %+v", r.Event)
	}
	raw, _ = b.Service.Prepared().Get(context.Background(), "default", id)
	var pr2 engine.Prepared
	if err := json.Unmarshal(raw, &pr2); err != nil {
		t.Fatal(err)
	}
	if pr2.LeafID != "pa000002" || pr2.Incremental || pr2.RequestedAt.IsZero() || pr2.RequestedAt.After(pr2.CreatedAt) {
		t.Fatalf("second preparation %+v", pr2)
	}
	reqs := b.llm.Requests()
	first, second := reqs[0].Messages, reqs[len(reqs)-1].Messages
	conv, _, _ := strings.Cut(first[len(first)-1].Content, "</conversation>")
	if first[0] != second[0] || !strings.HasPrefix(second[len(second)-1].Content, conv) {
		t.Fatalf("the second preparation's request does not begin with the first one's")
	}
}

// Pi's extension asks a worker, from inside Pi's compaction hook, for the session's
// preparation extended to Pi's cut: a NATS request answered by the store's worker with
// the bridged value (or why not), without a model call.
func TestLiveBridge(t *testing.T) {
	t.Parallel()
	b := newLiveBundle(t, time.Hour, nil, true)
	const id = "019a0000-0000-7000-8000-0000000b41d6"
	file := b.session(t, "--p--/b_"+id+".jsonl", id)
	j := b.job(t, file)
	j.Kind, j.Policy, j.Counter, j.KeepRecentTokens = wire.KindPrepare, "pi", "estimate", 200
	if r := b.enqueue(t, j); r.Event.Outcome != pipeline.OutcomeDone {
		t.Fatalf("prepare: %+v", r.Event)
	}
	raw, _ := b.Service.Prepared().Get(context.Background(), "default", id)
	var prep engine.Prepared
	if err := json.Unmarshal(raw, &prep); err != nil {
		t.Fatal(err)
	}
	// The agent goes on for two turns; Pi cuts at the newest user message.
	appendPi(t, file, piUser("pu000011", j.ExpectLeafID), piAssistant("pa000011", "pu000011"), piUser("pu000012", "pa000011"), piAssistant("pa000012", "pu000012"))
	calls := b.llm.Count()
	ask := func(cut string, extract ...bool) wire.BridgeRequest {
		return wire.BridgeRequest{V: 1, Store: "default", Path: j.Path, SessionID: id, LeafID: "pa000012", FirstKeptEntryID: cut,
			Extract: len(extract) > 0 && extract[0], KeepRecentTokens: 200}
	}
	send := func(r wire.BridgeRequest) wire.BridgeReply {
		t.Helper()
		req, _ := json.Marshal(r)
		msg, err := b.Conn.Request(wire.BridgeSubject("default", id), req, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep wire.BridgeReply
		if err := json.Unmarshal(msg.Data, &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	rep := send(ask("pu000012"))
	if rep.Error != "" {
		t.Fatalf("bridge: %s", rep.Error)
	}
	var got engine.Prepared
	if err := json.Unmarshal(rep.Prepared, &got); err != nil {
		t.Fatal(err)
	}
	n := len(got.SummarizedEntryIDs)
	if got.FirstKeptEntryID != "pu000012" || got.LeafID != "pa000012" || n < 2 || got.SummarizedEntryIDs[n-2] != "pu000011" ||
		got.SummarizedEntryIDs[n-1] != "pa000011" || got.Bridge == nil || got.Store != "default" || got.Path != j.Path {
		t.Fatalf("bridged %+v", got)
	}
	if b.llm.Count() != calls {
		t.Fatal("a bridge called the model")
	}
	// The bridge leaves the preparation's own text as the session's base, from its cut: at
	// this pace (the session's last cycle is months, the preparation's latency a moment)
	// the next summary has the model read the gap, and no base job is asked.
	waitfor.Until(t, "the base the bridge leaves", func() bool {
		raw, err := b.Service.Prepared().GetBase(context.Background(), "default", id)
		var base engine.Base
		return err == nil && raw != nil && json.Unmarshal(raw, &base) == nil && base.Summary == prep.History &&
			base.FromEntryID == prep.FirstKeptEntryID && base.Anchor.SummarySHA256 == engine.SHA256(got.Summary)
	})
	// A preparation that lies after the requested cut is stale.
	if rep := send(ask(prep.BoundaryStartEntryID)); !rep.Stale && rep.Error == "" {
		t.Fatalf("bridge to a cut before the preparation's: %+v", rep)
	}
	// The extract: the same cut, made without the preparation and without a model.
	rep = send(ask("pu000012", true))
	var ext engine.Prepared
	if rep.Error != "" || json.Unmarshal(rep.Prepared, &ext) != nil {
		t.Fatalf("extract: %+v", rep)
	}
	if ext.FirstKeptEntryID != "pu000012" || ext.LeafID != "pa000012" || !slices.Equal(ext.SummarizedEntryIDs, got.SummarizedEntryIDs) ||
		ext.Summary == got.Summary || ext.LLMCalls != 0 || ext.Store != "default" || ext.Path != j.Path ||
		ext.SpanTokens == nil || ext.SpanTokens.Model != 0 || ext.SpanTokens.Extract == 0 {
		t.Fatalf("extract %+v (the bridged value summarized %v)", ext, got.SummarizedEntryIDs)
	}
	if got.SpanTokens == nil || got.SpanTokens.Model == 0 || got.SpanTokens.Extract == 0 {
		t.Fatalf("the bridged value's span: %+v (a model's preparation, the gap extracted)", got.SpanTokens)
	}
	// The extract asked for the model's summary of its span (a base job, after the reply):
	// that is the one model request since the bridges.
	waitfor.Until(t, "the base of the extract", func() bool {
		raw, err := b.Service.Prepared().GetBase(context.Background(), "default", id)
		var base engine.Base
		return err == nil && raw != nil && json.Unmarshal(raw, &base) == nil && base.Complete() && base.Anchor.SummarySHA256 == engine.SHA256(ext.Summary)
	})
	if n := b.llm.Count() - calls; n != 1 {
		t.Fatalf("%d model requests after the bridge and the extract, want the base's one", n)
	}
}

// extract asks the worker for the extract at cut (Pi's hook, answered without a model).
func (b *liveBundle) extract(t *testing.T, path, id, leaf, cut string) engine.Prepared {
	t.Helper()
	req, _ := json.Marshal(wire.BridgeRequest{V: 1, Store: "default", Path: path, SessionID: id, LeafID: leaf, FirstKeptEntryID: cut,
		Extract: true, KeepRecentTokens: 200})
	msg, err := b.Conn.Request(wire.BridgeSubject("default", id), req, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep wire.BridgeReply
	var ext engine.Prepared
	if json.Unmarshal(msg.Data, &rep) != nil || rep.Error != "" || json.Unmarshal(rep.Prepared, &ext) != nil {
		t.Fatalf("extract: %s", msg.Data)
	}
	return ext
}

// piCompaction appends the compaction Pi writes with the value p, as cid, child of parent.
func piCompaction(t *testing.T, file, cid, parent string, p engine.Prepared) string {
	t.Helper()
	d, _ := json.Marshal(p.Details)
	line, _ := json.Marshal(map[string]any{"type": "compaction", "id": cid, "parentId": parent, "timestamp": "2026-01-01T00:00:03.000Z",
		"summary": p.Summary, "firstKeptEntryId": p.FirstKeptEntryID, "tokensBefore": p.TokensBefore, "details": json.RawMessage(d), "fromHook": true})
	appendPi(t, file, string(line))
	return cid
}

// The extract answers Pi's hook without a model and asks for the model's summary of the same
// span; Pi writes the compaction with the extract's text; the base lands, and the next
// preparation builds on it, reading only the span after the compaction. A second extract
// builds on the base too. All through a real worker, NATS and an OpenAI-compatible server.
func TestLiveExtractThenBase(t *testing.T) {
	t.Parallel()
	b := newLiveBundle(t, time.Hour, nil, true)
	const id = "019a0000-0000-7000-8000-0000000ba5e0"
	file := b.session(t, "--p--/x_"+id+".jsonl", id)
	j := b.job(t, file)
	appendPi(t, file, piUser("pu000021", j.ExpectLeafID), piAssistant("pa000021", "pu000021"), piUser("pu000022", "pa000021"), piAssistant("pa000022", "pu000022"))
	extract := func(leaf, cut string) engine.Prepared { return b.extract(t, j.Path, id, leaf, cut) }
	complete := func(cut string) engine.Base {
		t.Helper()
		var base engine.Base
		waitfor.Until(t, "the base for the compaction at "+cut, func() bool {
			raw, err := b.Service.Prepared().GetBase(context.Background(), "default", id)
			return err == nil && raw != nil && json.Unmarshal(raw, &base) == nil && base.Complete() && base.Anchor.FirstKeptEntryID == cut
		})
		return base
	}
	compaction := func(cid, parent string, p engine.Prepared) string { return piCompaction(t, file, cid, parent, p) }
	b.awaitBridges(t, id)
	calls := b.llm.Count()
	x1 := extract("pa000022", "pu000022")
	compaction("c0000021", "pa000022", x1)
	base := complete("pu000022")
	reqs := b.llm.Requests()
	if len(reqs) != calls+1 || base.Source != engine.SourceModel || base.Messages == 0 || base.LLMInputTokens == 0 {
		t.Fatalf("%d model requests for the base, base %+v", len(reqs)-calls, base)
	}
	last := reqs[len(reqs)-1].Messages
	if !strings.Contains(last[len(last)-1].Content, "and now?") {
		t.Fatalf("the base's request does not hold the extract's span:\n%s", last[len(last)-1].Content)
	}
	// The agent goes on; a preparation builds on the model's summary.
	appendPi(t, file, longUser("pu000023", "c0000021", "Next:"), piAssistant("pa000023", "pu000023"), longUser("pu000024", "pa000023", "Next:"), piAssistant("pa000024", "pu000024"))
	pj := b.job(t, file)
	pj.Kind, pj.Policy, pj.Counter, pj.KeepRecentTokens = wire.KindPrepare, "pi", "estimate", 200
	if r := b.enqueue(t, pj); r.Event.Outcome != pipeline.OutcomeDone {
		t.Fatalf("prepare: %+v", r.Event)
	}
	raw, _ := b.Service.Prepared().Get(context.Background(), "default", id)
	var pr engine.Prepared
	if err := json.Unmarshal(raw, &pr); err != nil {
		t.Fatal(err)
	}
	if pr.BuiltOn == nil || pr.BuiltOn.Source != engine.SourceModel || pr.BuiltOn.SHA256 != engine.SHA256(base.Summary) {
		t.Fatalf("the preparation built on %+v, want the base", pr.BuiltOn)
	}
	prompt := b.llm.Requests()[b.llm.Count()-1].Messages
	if p := prompt[len(prompt)-1].Content; !strings.Contains(p, base.Summary[:40]) || strings.Contains(p, x1.Summary[:60]) {
		t.Fatalf("the preparation's request does not carry the base as the previous summary:\n%s", p)
	}
	// Another extract (the preparation came too late): on the base, not on the extract's text.
	x2 := extract("pa000024", "pu000024")
	if x2.BuiltOn == nil || x2.BuiltOn.Source != engine.SourceModel || x2.SpanTokens.Model != 0 {
		t.Fatalf("second extract built on %+v, span %+v", x2.BuiltOn, x2.SpanTokens)
	}
	compaction("c0000022", "pa000024", x2)
	if b2 := complete("pu000024"); b2.BasedOnSHA256 != engine.SHA256(base.Summary) {
		t.Fatalf("the second base was made on %s, not on the first", b2.BasedOnSHA256)
	}
}

// Faster than the model: the second compaction's base job starts while the first's request
// is still being answered (its own slot), reads its span alone, and lands beside it as a
// segment; a merge then folds the two model texts into one with a request that reads no
// conversation. Real worker, NATS and an OpenAI-compatible server that holds its answers.
// Either may land first: the span's summary before the one it continues, or after.
func TestLiveSpansInFlight(t *testing.T) {
	t.Parallel()
	for i, spanFirst := range []bool{false, true} {
		t.Run(fmt.Sprint("span first ", spanFirst), func(t *testing.T) {
			t.Parallel()
			liveSpansInFlight(t, fmt.Sprintf("019a0000-0000-7000-8000-0000005e6a0%d", i), spanFirst)
		})
	}
}

func liveSpansInFlight(t *testing.T, id string, spanFirst bool) {
	b := newLiveBundle(t, time.Hour, nil, true)
	file := b.session(t, "--p--/x_"+id+".jsonl", id)
	j := b.job(t, file)
	appendPi(t, file, longUser("pu000021", j.ExpectLeafID, "Span one."), piAssistant("pa000021", "pu000021"), longUser("pu000022", "pa000021", "Kept."), piAssistant("pa000022", "pu000022"))
	b.awaitBridges(t, id)
	first, second := make(chan struct{}), make(chan struct{})
	b.llm.Enqueue(fakellm.Behavior{Hold: first}, fakellm.Behavior{Hold: second})
	calls := b.llm.Count()
	x1 := b.extract(t, j.Path, id, "pa000022", "pu000022")
	piCompaction(t, file, "c0000021", "pa000022", x1)
	waitfor.Until(t, "the first base job's request", func() bool { return b.llm.Count() == calls+1 })
	appendPi(t, file, longUser("pu000023", "c0000021", "Span two."), piAssistant("pa000023", "pu000023"), longUser("pu000024", "pa000023", "Kept again."), piAssistant("pa000024", "pu000024"))
	x2 := b.extract(t, j.Path, id, "pa000024", "pu000024")
	piCompaction(t, file, "c0000022", "pa000024", x2)
	waitfor.Until(t, "the second base job's request, beside the first", func() bool { return b.llm.Count() == calls+2 })
	reqs := b.llm.Requests()
	msgs := reqs[calls+1].Messages
	if p := msgs[len(msgs)-1].Content; !strings.Contains(p, "Span two.") || strings.Contains(p, "Span one.") || strings.Contains(p, "<previous-summary>") {
		t.Fatalf("the second span's request, made while the first was in flight, is not its span alone:\n%s", p)
	}
	if spanFirst {
		close(second)
		waitfor.Until(t, "the second span's summary stored as a segment", func() bool {
			raw, err := b.Service.Prepared().GetBase(context.Background(), "default", id)
			var cur engine.Base
			return err == nil && raw != nil && json.Unmarshal(raw, &cur) == nil && len(cur.Segments) == 1
		})
		close(first)
	} else {
		close(first)
		close(second)
	}
	var base engine.Base
	waitfor.Until(t, "one model text through the second compaction", func() bool {
		raw, err := b.Service.Prepared().GetBase(context.Background(), "default", id)
		base = engine.Base{} // a field the JSON leaves out must not keep an earlier read's value
		return err == nil && raw != nil && json.Unmarshal(raw, &base) == nil && base.Complete() &&
			base.FromEntryID == "pu000024" && len(base.Segments) == 0
	})
	reqs = b.llm.Requests()
	if len(reqs) != calls+3 {
		t.Fatalf("%d model requests for two spans, want 3 (each span, a merge)", len(reqs)-calls)
	}
	merge := reqs[calls+2].Messages
	p := merge[len(merge)-1].Content
	if !strings.Contains(p, summarize.MergePrompt[:60]) || !strings.Contains(p, engine.SegmentSeparator) || strings.Contains(p, "Span one.") || strings.Contains(p, "Span two.") {
		t.Fatalf("the merge request does not fold the two model texts alone:\n%s", p)
	}
	if strings.Contains(base.Summary, engine.SegmentSeparator) || base.LLMCalls != 1 {
		t.Fatalf("the base is not the merge's one text (%d calls): %q", base.LLMCalls, base.Summary)
	}
}

// The engine and the pipeline speak one outcome vocabulary (package outcome,
// docs/json-output.md): every outcome an engine result can have reaches the job's event
// as the same word, only a done entry becomes the leaf, and the kinds are the jobs' kinds.
func TestOutcomeVocabulary(t *testing.T) {
	t.Parallel()
	for _, o := range []outcome.Outcome{outcome.Done, outcome.Skipped, outcome.Superseded, outcome.Failed} {
		r := jobResult(&engine.Result{Outcome: o, EntryID: "e1", Reason: "why"})
		if d := pipeline.Classify(r, nil, 1, 5, time.Second, time.Second); d.Outcome != o {
			t.Errorf("engine outcome %q became %q in the pipeline", o, d.Outcome)
		}
		if (r.LeafID == "e1") != (o == outcome.Done) {
			t.Errorf("%s: leaf %q (only a done entry becomes the leaf)", o, r.LeafID)
		}
	}
	if engine.KindCompact != wire.KindCompact || engine.KindBranchSummary != wire.KindBranchSummary || engine.KindPrepare != wire.KindPrepare {
		t.Errorf("kinds differ: %q %q %q / %q %q %q", engine.KindCompact, engine.KindBranchSummary, engine.KindPrepare,
			wire.KindCompact, wire.KindBranchSummary, wire.KindPrepare)
	}
}

// A base that lands after the session moved on is discarded: while the model wrote it, the
// session's base changed (here: an extract on another branch stored its own), so the job ends
// superseded, its summary paid and counted, and the base stored by the other branch stays.
func TestLiveBaseDiscardedWhenTheSessionMovedOn(t *testing.T) {
	t.Parallel()
	b := newLiveBundle(t, time.Hour, nil, true)
	const id = "019a0000-0000-7000-8000-0000000ba5e1"
	file := b.session(t, "--p--/y_"+id+".jsonl", id)
	j := b.job(t, file)
	appendPi(t, file, piUser("pu000031", j.ExpectLeafID), piAssistant("pa000031", "pu000031"), piUser("pu000032", "pa000031"), piAssistant("pa000032", "pu000032"))
	events := make(chan wire.Event, 16)
	sub, err := b.Conn.Subscribe("compactor.events.default.>", func(m *nats.Msg) {
		var ev wire.Event
		if json.Unmarshal(m.Data, &ev) == nil && ev.Kind == wire.KindBase && ev.Final() {
			events <- ev
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	b.awaitBridges(t, id)
	hold := make(chan struct{})
	b.llm.Enqueue(fakellm.Behavior{Hold: hold})
	calls := b.llm.Count()
	req, _ := json.Marshal(wire.BridgeRequest{V: 1, Store: "default", Path: j.Path, SessionID: id, LeafID: "pa000032", FirstKeptEntryID: "pu000032",
		Extract: true, KeepRecentTokens: 200})
	msg, err := b.Conn.Request(wire.BridgeSubject("default", id), req, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep wire.BridgeReply
	if json.Unmarshal(msg.Data, &rep) != nil || rep.Error != "" {
		t.Fatalf("extract: %s", msg.Data)
	}
	waitfor.Until(t, "the base's model request", func() bool { return b.llm.Count() > calls })
	other := []byte(`{"v":1,"store":"default","path":"` + j.Path + `","sessionId":"` + id + `","anchor":{"leafId":"elsewhere","previousCompactionId":null,"firstKeptEntryId":"x","summarizedEntryIds":[],"summarySha256":"y"},"summary":"another branch's","details":{"readFiles":[],"modifiedFiles":[]},"fromEntryId":"x","source":"compaction","createdAt":"2026-01-01T00:00:00Z"}`)
	if err := b.Service.Prepared().UpdateBase(context.Background(), "default", id, func([]byte) ([]byte, error) { return other, nil }); err != nil {
		t.Fatal(err)
	}
	close(hold)
	var ev wire.Event
	select {
	case ev = <-events:
	case <-time.After(waitfor.HangGuard):
		t.Fatal("no final event of the base job")
	}
	if ev.Outcome != pipeline.OutcomeSuperseded || !strings.HasPrefix(ev.Reason, "moved-on") || ev.LLMInputTokens == 0 {
		t.Fatalf("the base job ended %+v", ev)
	}
	if got, _ := b.Service.Prepared().GetBase(context.Background(), "default", id); string(got) != string(other) {
		t.Fatalf("the stored base was replaced: %s", got)
	}
}

// A preparation asked while the previous compaction's base job is still being answered reads
// its own span alone (not the span that job reads), waits beside the base, and is stored as
// the session's preparation once the base lands: the base's text joined to its own. Real
// worker, NATS and an OpenAI-compatible server that holds the base job's answer.
func TestLivePreparationBesideABaseJob(t *testing.T) {
	t.Parallel()
	const id = "019a0000-0000-7000-8000-0000000c0de1"
	b := newLiveBundle(t, time.Hour, nil, true)
	file := b.session(t, "--p--/z_"+id+".jsonl", id)
	j := b.job(t, file)
	appendPi(t, file, longUser("pu000041", j.ExpectLeafID, "Span one."), piAssistant("pa000041", "pu000041"), longUser("pu000042", "pa000041", "Kept."), piAssistant("pa000042", "pu000042"))
	b.awaitBridges(t, id)
	hold := make(chan struct{})
	b.llm.Enqueue(fakellm.Behavior{Hold: hold})
	calls := b.llm.Count()
	x1 := b.extract(t, j.Path, id, "pa000042", "pu000042")
	piCompaction(t, file, "c0000041", "pa000042", x1)
	waitfor.Until(t, "the base job's request", func() bool { return b.llm.Count() == calls+1 })
	appendPi(t, file, longUser("pu000043", "c0000041", "Span two."), piAssistant("pa000043", "pu000043"), longUser("pu000044", "pa000043", "Kept again."), piAssistant("pa000044", "pu000044"))
	pj := b.job(t, file)
	pj.Kind, pj.Policy, pj.Counter, pj.KeepRecentTokens = wire.KindPrepare, "pi", "estimate", 200
	if r := b.enqueue(t, pj); r.Event.Outcome != pipeline.OutcomeDone {
		t.Fatalf("prepare: %+v", r.Event)
	}
	reqs := b.llm.Requests()
	if len(reqs) != calls+2 {
		t.Fatalf("%d model requests, want the base job's and the preparation's", len(reqs)-calls)
	}
	p := reqs[calls+1].Messages
	if c := p[len(p)-1].Content; !strings.Contains(c, "Span two.") || strings.Contains(c, "Span one.") || strings.Contains(c, "<previous-summary>") {
		t.Fatalf("the preparation, made while the base job read span one, is not of its span alone:\n%s", c)
	}
	if raw, err := b.Service.Prepared().Get(context.Background(), "default", id); err != nil || raw != nil {
		t.Fatalf("a preparation is stored before the base it builds on landed: %s %v", raw, err)
	}
	close(hold)
	var pr engine.Prepared
	waitfor.Until(t, "the joined preparation", func() bool {
		raw, err := b.Service.Prepared().Get(context.Background(), "default", id)
		pr = engine.Prepared{}
		return err == nil && raw != nil && json.Unmarshal(raw, &pr) == nil
	})
	var base engine.Base
	raw, err := b.Service.Prepared().GetBase(context.Background(), "default", id)
	if err != nil || json.Unmarshal(raw, &base) != nil || !base.Complete() {
		t.Fatalf("base: %s %v", raw, err)
	}
	if !strings.HasPrefix(pr.Summary, base.Summary+engine.SegmentSeparator) || pr.BuiltOn == nil || pr.BuiltOn.Source != engine.SourceModel ||
		pr.PreviousCompactionID == nil || *pr.PreviousCompactionID != "c0000041" || b.llm.Count() != calls+2 {
		t.Fatalf("the stored preparation is not the base joined to the span (%d requests): built on %+v\n%s", b.llm.Count()-calls, pr.BuiltOn, pr.Summary)
	}
	waitfor.Until(t, "the base keeps nothing waiting", func() bool {
		raw, err := b.Service.Prepared().GetBase(context.Background(), "default", id)
		base = engine.Base{}
		return err == nil && json.Unmarshal(raw, &base) == nil && base.Awaiting == nil
	})
}

// longUser is a user message of Pi's with id and parent, what followed by some 1,500
// characters: long enough for a cut to keep it apart from the turns before.
func longUser(id, parent, what string) string {
	return fmt.Sprintf(`{"type":"message","id":%q,"parentId":%q,"timestamp":"2026-01-01T00:00:04.000Z","message":{"role":"user","content":[{"type":"text","text":%q}],"timestamp":1767225604000}}`,
		id, parent, what+" "+strings.Repeat("look at the notes again. ", 60))
}
