package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/cutpoint"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/tokenize"
)

// recordingModel stands for a model: it answers each request with a summary naming the
// steps it read (the "Step N:" requests of growSession) and keeps every request.
type recordingModel struct {
	mu   sync.Mutex
	reqs []summarize.Request
}

var stepRe = regexp.MustCompile(`Step (\d+): look at`)

// steps are the step numbers the messages hold, in order.
func steps(msgs []*sessionio.Message) []int {
	var out []int
	for _, m := range msgs {
		for _, b := range m.Content.Blocks {
			for _, s := range stepRe.FindAllStringSubmatch(b.Text, -1) {
				var n int
				fmt.Sscan(s[1], &n)
				out = append(out, n)
			}
		}
	}
	return out
}

func (r *recordingModel) Summarize(_ context.Context, req summarize.Request) (summarize.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req)
	read := steps(req.Messages)
	text := fmt.Sprintf("## Goal\nModel summary %d of steps %v.\n\n## Critical Context\n- on: %q", len(r.reqs), read, firstLine(req.PreviousSummary))
	return summarize.Result{Text: text, InputTokens: 100 * (len(req.Messages) + 1), OutputTokens: 50, Calls: 1}, nil
}

func (r *recordingModel) last() summarize.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reqs[len(r.reqs)-1]
}

func (r *recordingModel) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reqs)
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "Model summary") {
			return l
		}
	}
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// piWrites appends the compaction Pi writes from a value its hook returned (fromHook), as
// the child of leaf, and returns its id.
func piWrites(t *testing.T, file, id, leaf string, p *Prepared) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"type": "compaction", "id": id, "parentId": leaf, "timestamp": "2026-01-01T02:00:00.000Z",
		"summary": p.Summary, "firstKeptEntryId": p.FirstKeptEntryID, "tokensBefore": p.TokensBefore, "details": p.Details, "fromHook": true})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
	return id
}

// baseWorld is a session the agent grows and Pi compacts with extracts (no preparation
// could land), and a worker that answers them and makes the bases as the service does: the
// base the extract leaves is stored (NextBase), the model's base lands on what is stored
// (Land).
type baseWorld struct {
	t      *testing.T
	pi     string
	eng    *Engine
	model  *recordingModel
	file   string
	leaf   string
	turn   int
	stored *Base
}

const baseKeep = 3000

func newBaseWorld(t *testing.T, pi, sessionID string) *baseWorld {
	t.Helper()
	m := &recordingModel{}
	eng, err := New(m, Settings{Pi: pi, Policy: cutpoint.PolicyPi, Counter: tokenize.CounterEstimate, KeepRecentTokens: baseKeep})
	if err != nil {
		t.Fatal(err)
	}
	w := &baseWorld{t: t, pi: pi, eng: eng, model: m, file: headerOnly(t, sessionID)}
	w.grow(14)
	return w
}

func (w *baseWorld) grow(turns int) {
	w.leaf = growSession(w.t, w.file, w.leaf, w.turn, w.turn+turns)
	w.turn += turns
}

func (w *baseWorld) piSettings() Settings {
	return Settings{Pi: w.pi, Policy: cutpoint.PolicyPi, Counter: tokenize.CounterEstimate, KeepRecentTokens: baseKeep, ReserveTokens: 16384}
}

// extract answers Pi's hook with the extract at Pi's cut and stores the base it leaves.
func (w *baseWorld) extract() *Prepared {
	w.t.Helper()
	pi, err := Plan(w.file, w.piSettings(), LoadOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	calls := w.model.count()
	got, err := w.eng.Extract(context.Background(), ExtractRequest{File: w.file, LeafID: w.leaf, FirstKeptEntryID: pi.Plan.FirstKeptEntryID, KeepRecentTokens: baseKeep, Pi: w.pi, Base: w.stored})
	if err != nil {
		w.t.Fatal(err)
	}
	if w.model.count() != calls || got.SpanTokens == nil || got.SpanTokens.Model != 0 || got.SpanTokens.Extract == 0 {
		w.t.Fatalf("the extract called the model (%d calls) or says its span is a model's: %+v", w.model.count()-calls, got.SpanTokens)
	}
	made, latest := got.LeftBase(w.leaf)
	// as the worker does: its base job is asked for, pending until it ends
	w.stored = NextBase(w.stored, made, latest).WithPending(made.Anchor.FirstKeptEntryID, time.Now())
	return got
}

// makeBase runs the base job the extract for anchor asked for and lands it.
func (w *baseWorld) makeBase(anchor BaseAnchor) (*Base, *Result, string) {
	w.t.Helper()
	// A job carries the compaction's parent, cut and digest only.
	anchor = BaseAnchor{LeafID: anchor.LeafID, FirstKeptEntryID: anchor.FirstKeptEntryID, SummarySHA256: anchor.SummarySHA256}
	b, res, err := w.eng.MakeBase(context.Background(), BaseRequest{File: w.file, Anchor: anchor, Settings: Settings{Pi: w.pi, Counter: tokenize.CounterEstimate}}, w.stored)
	if err != nil {
		w.t.Fatal(err)
	}
	if b == nil {
		return nil, res, ""
	}
	next, why := b.Land(w.stored)
	if next != nil {
		w.stored = next
	}
	return b, res, why
}

// stepsOf are the steps a compaction at cut summarized (its span) on the file's path.
func (w *baseWorld) spanSteps(cut string) []int {
	w.t.Helper()
	s, err := sessionio.ReadFile(w.file)
	if err != nil {
		w.t.Fatal(err)
	}
	path, _ := s.Path("")
	for i, e := range path {
		if e.Type == sessionio.TypeCompaction && e.FirstKeptEntryID == cut {
			d, _ := pi.ParseRelease(w.pi)
			sp, err := cutpoint.SpanAt(path[:i], d, cut)
			if err != nil {
				w.t.Fatal(err)
			}
			return steps(sp.Messages)
		}
	}
	w.t.Fatalf("no compaction at %s", cut)
	return nil
}

// TestBaseChain: the agent compacts faster than a summary is made, so each compaction is
// answered by the extract; the model's summary of each extract's span is made afterwards and
// every later summary builds on it. A base that lands after the next compaction still
// counts: the next extract had stored its state, and the base carries over to it, so the
// following summary reads only the spans no model has read. For both Pi releases.
func TestBaseChain(t *testing.T) {
	t.Parallel()
	for i, pi := range []string{"0.73.1", "1.6.0"} {
		t.Run(pi, func(t *testing.T) {
			t.Parallel()
			w := newBaseWorld(t, pi, fmt.Sprintf("019a0000-0000-7000-8000-0000000ba5e%d", i))
			// Compaction 1: the extract, with nothing before it.
			x1 := w.extract()
			if x1.BuiltOn == nil || x1.BuiltOn.Source != SourceNone || w.stored.Source != SourceNone || w.stored.Complete() {
				t.Fatalf("first extract: built on %+v, base left %+v", x1.BuiltOn, w.stored)
			}
			a1 := w.stored.Anchor
			c1 := piWrites(t, w.file, "c0000001", w.leaf, x1)
			w.leaf = c1
			w.grow(12)
			s1 := w.spanSteps(x1.FirstKeptEntryID)

			// Compaction 2 comes before the base of compaction 1 lands: the extract updates
			// compaction 1's text (an extract on the same base) rather than extracting its span
			// again, and leaves the same base, from the same entry.
			x2 := w.extract()
			if x2.BuiltOn.Source != SourceNone || x2.BuiltOn.ReadAgainTokens != 0 || x2.BuiltOn.Via != "c0000001" ||
				!w.stored.ExtractOn || w.stored.FromEntryID != a1.SummarizedEntryIDs[0] {
				t.Fatalf("second extract before the base landed: built on %+v, leaves %+v", x2.BuiltOn, w.stored)
			}
			a2 := w.stored.Anchor
			c2 := piWrites(t, w.file, "c0000002", w.leaf, x2)
			w.leaf = c2
			w.grow(12)
			s2 := w.spanSteps(x2.FirstKeptEntryID)

			// The base of compaction 1 lands now: one request over compaction 1's span, on
			// nothing; it carries over to compaction 2 (the store moved on to it, from the
			// same state).
			b1, _, why := w.makeBase(a1)
			if b1 == nil || why != "" {
				t.Fatalf("base 1: %v (%s)", b1, why)
			}
			// The job finds the store already standing for compaction 2: it reads both spans.
			if got := steps(w.model.last().Messages); !slices.Equal(got, append(slices.Clone(s1), s2...)) || w.model.last().PreviousSummary != "" {
				t.Fatalf("base 1 read steps %v on %q; compaction 1 summarized %v, compaction 2 %v", got, w.model.last().PreviousSummary, s1, s2)
			}
			if !w.stored.Anchor.Equal(a2) || !w.stored.Complete() {
				t.Fatalf("after base 1 landed the store stands for %+v (complete %v), want compaction 2's, complete", w.stored.Anchor, w.stored.Complete())
			}
			// Base 2's job finds nothing left to do: base 1's request covered both spans.
			if b, res, _ := w.makeBase(a2); b != nil || !strings.HasPrefix(res.Reason, "done") {
				t.Fatalf("base 2 after base 1 covered it: %v %+v", b, res)
			}

			// A preparation now builds on the model's text and reads only the new span.
			calls := w.model.count()
			p, _, err := w.eng.Prepare(context.Background(), Request{File: w.file, Settings: Settings{Policy: cutpoint.PolicyPi, Counter: tokenize.CounterEstimate, KeepRecentTokens: baseKeep}, Base: w.stored}, nil)
			if err != nil || p == nil {
				t.Fatalf("prepare: %v", err)
			}
			req := w.model.last()
			if w.model.count() != calls+1 || req.PreviousSummary != w.stored.Summary || p.BuiltOn.Source != SourceModel || p.BuiltOn.ReadAgainTokens != 0 {
				t.Fatalf("the preparation built on %+v with previous summary %q", p.BuiltOn, firstLine(req.PreviousSummary))
			}
			if got := steps(req.Messages); len(got) == 0 || slices.Contains(got, s2[len(s2)-1]) || p.SpanTokens.Model == 0 || p.SpanTokens.Extract != 0 {
				t.Fatalf("the preparation read steps %v (compaction 2's were %v), span %+v", got, s2, p.SpanTokens)
			}

			// Compaction 3: an extract again (the preparation did not land), on the base.
			x3 := w.extract()
			if x3.BuiltOn.Source != SourceModel || x3.BuiltOn.ReadAgainTokens != 0 || !strings.Contains(x3.Summary, "Model summary") {
				t.Fatalf("third extract: built on %+v:\n%s", x3.BuiltOn, x3.Summary)
			}
			a3 := w.stored.Anchor
			w.leaf = piWrites(t, w.file, "c0000003", w.leaf, x3)
			s3 := w.spanSteps(x3.FirstKeptEntryID)
			b3, _, why := w.makeBase(a3)
			if b3 == nil || why != "" || !slices.Equal(steps(w.model.last().Messages), s3) || w.model.last().PreviousSummary != b1.Summary {
				t.Fatalf("base 3 read %v on %q (%s); compaction 3 summarized %v", steps(w.model.last().Messages), firstLine(w.model.last().PreviousSummary), why, s3)
			}
		})
	}
}

// TestBaseRefused: a base is used only for the compaction it stands for, with the same
// summarized entries, the same previous compaction and a text that ends where a span of the
// chain starts; otherwise the summary builds on the compaction's own text, and says why in
// a word.
func TestBaseRefused(t *testing.T) {
	t.Parallel()
	w := newBaseWorld(t, "0.73.1", "019a0000-0000-7000-8000-0000000ba5f0")
	x1 := w.extract()
	a1 := w.stored.Anchor
	w.leaf = piWrites(t, w.file, "c0000001", w.leaf, x1)
	w.grow(12)
	if _, _, why := w.makeBase(a1); why != "" || !w.stored.Complete() {
		t.Fatalf("base 1 not stored: %s", why)
	}
	good := *w.stored
	if good.PiVersion != "0.73.1" {
		t.Fatalf("the base says it was made by the rules of Pi %q, want 0.73.1", good.PiVersion)
	}
	prepare := func(b *Base) *BuiltOn {
		t.Helper()
		p, _, err := w.eng.Prepare(context.Background(), Request{File: w.file, Settings: Settings{Policy: cutpoint.PolicyPi, Counter: tokenize.CounterEstimate, KeepRecentTokens: baseKeep}, Base: b}, nil)
		if err != nil || p == nil {
			t.Fatalf("prepare: %v", err)
		}
		return p.BuiltOn
	}
	if bo := prepare(&good); bo.Source != SourceModel || bo.Refused != "" {
		t.Fatalf("the good base: %+v", bo)
	}
	for _, tc := range []struct {
		name, want string
		change     func(b *Base)
	}{
		{"another compaction's summary", BaseRefusedOtherCompaction, func(b *Base) { b.Anchor.SummarySHA256 = SHA256("something else") }},
		{"another parent", BaseRefusedOtherCompaction, func(b *Base) { b.Anchor.LeafID = "u0000003" }},
		{"other summarized entries", BaseRefusedEntriesDiffer, func(b *Base) { b.Anchor.SummarizedEntryIDs = b.Anchor.SummarizedEntryIDs[1:] }},
		{"another previous compaction", BaseRefusedChainDiffers, func(b *Base) { id := "c0ffee00"; b.Anchor.PreviousCompactionID = &id }},
		{"a text that ends off the branch", BaseRefusedChainDiffers, func(b *Base) { b.FromEntryID = "nowhere0" }},
		{"another session's", BaseRefusedMalformed, func(b *Base) { b.SessionID = "someone-else" }},
		{"made by the rules of another Pi", BaseRefusedOtherRules, func(b *Base) { b.PiVersion = "1.6.0" }},
		{"made by the rules of an unreadable Pi", BaseRefusedOtherRules, func(b *Base) { b.PiVersion = "not-a-version" }},
	} {
		b := good
		b.Anchor.SummarizedEntryIDs = slices.Clone(good.Anchor.SummarizedEntryIDs)
		tc.change(&b)
		if bo := prepare(&b); bo.Source != SourceCompaction || bo.Refused != tc.want {
			t.Errorf("%s: built on %+v, want the compaction's text, refused %q", tc.name, bo, tc.want)
		}
	}
	// Another release of the same rules, and a base of a compactor before releases were told
	// apart (no piVersion: its anchor alone is checked), are used.
	for _, v := range []string{"0.73.0", ""} {
		b := good
		b.PiVersion = v
		if bo := prepare(&b); bo.Source != SourceModel || bo.Refused != "" {
			t.Errorf("a base with piVersion %q: %+v", v, bo)
		}
	}
	// The branch compacted again after the base's compaction (here by Pi itself): the base has
	// served, and is not refused.
	pi, err := Plan(w.file, w.piSettings(), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	own := &Prepared{Summary: "Pi's own summary", FirstKeptEntryID: pi.Plan.FirstKeptEntryID}
	w.leaf = piWrites(t, w.file, "c0000002", w.leaf, own)
	w.grow(12)
	if bo := prepare(&good); bo.Source != SourceCompaction || bo.Refused != "" || bo.SHA256 != SHA256(own.Summary) {
		t.Fatalf("after Pi's own compaction: %+v", bo)
	}
}

// TestMakeBaseSkips: the base job makes no request when the compaction is not on the branch,
// when Pi went on without the extract, or when the base already covers it.
func TestMakeBaseSkips(t *testing.T) {
	t.Parallel()
	w := newBaseWorld(t, "1.6.0", "019a0000-0000-7000-8000-0000000ba5f1")
	x1 := w.extract()
	a1 := w.stored.Anchor
	// Pi did not use the extract: it wrote its own compaction from that leaf.
	leaf := w.leaf
	own := *x1
	own.Summary = "Pi's own summary"
	w.leaf = piWrites(t, w.file, "c0000001", leaf, &own)
	if b, res, _ := w.makeBase(a1); b != nil || !strings.HasPrefix(res.Reason, "not-used") {
		t.Fatalf("Pi's own compaction: %v %+v", b, res)
	}
	gone := a1
	gone.LeafID = "nowhere0"
	if b, res, _ := w.makeBase(gone); b != nil || !strings.HasPrefix(res.Reason, "moved-on") {
		t.Fatalf("a leaf off the branch: %v %+v", b, res)
	}
	if w.model.count() != 0 {
		t.Fatalf("%d model requests for skipped bases", w.model.count())
	}
	// The compaction not written yet (the job ran first): the base is made for it.
	w2 := newBaseWorld(t, "1.6.0", "019a0000-0000-7000-8000-0000000ba5f2")
	w2.extract()
	if b, _, why := w2.makeBase(w2.stored.Anchor); b == nil || why != "" || !w2.stored.Complete() {
		t.Fatalf("before Pi wrote the compaction: %v (%s)", b, why)
	}
	if b, res, _ := w2.makeBase(w2.stored.Anchor); b != nil || !strings.HasPrefix(res.Reason, "done") {
		t.Fatalf("again: %v %+v", b, res)
	}
	// The stored base was made by the rules of another Pi than the job's: the job does not
	// build on it (nor make a request).
	w3 := newBaseWorld(t, "1.6.0", "019a0000-0000-7000-8000-0000000ba5f3")
	w3.extract()
	if w3.stored.PiVersion != "1.6.0" {
		t.Fatalf("the base an extract leaves says Pi %q, want 1.6.0 (the extract's)", w3.stored.PiVersion)
	}
	w3.stored.PiVersion = "0.73.1"
	calls := w3.model.count()
	if b, res, _ := w3.makeBase(w3.stored.Anchor); b != nil || !strings.HasPrefix(res.Reason, BaseRefusedOtherRules) || w3.model.count() != calls {
		t.Fatalf("a base of other rules: %v %+v, %d requests", b, res, w3.model.count()-calls)
	}
	w3.stored.PiVersion = "1.6.0"
	if b, _, why := w3.makeBase(w3.stored.Anchor); b == nil || why != "" || b.PiVersion != "1.6.0" {
		t.Fatalf("the same base by its own rules: %+v (%s)", b, why)
	}
}

// TestBaseLand: a base lands on the state it was made on, carries over to a newer
// compaction that holds that state, and is discarded when the store moved on.
func TestBaseLand(t *testing.T) {
	t.Parallel()
	a := BaseAnchor{LeafID: "l1", FirstKeptEntryID: "k1", SummarySHA256: "s1"}
	a2 := BaseAnchor{LeafID: "l2", FirstKeptEntryID: "k2", SummarySHA256: "s2"}
	state := &Base{Anchor: a, Summary: "extract text", FromEntryID: "f0", Source: SourceCompaction}
	b := &Base{Anchor: a, Summary: "model", FromEntryID: "k1", Source: SourceModel, BasedOnSHA256: SHA256("extract text"), BasedOnFromEntryID: "f0"}
	if got, why := b.Land(state); got == nil || !reflect.DeepEqual(*got, *b) || why != "" {
		t.Fatalf("on its own state: %v %s", got, why)
	}
	if got, why := b.Land(nil); got == nil || !reflect.DeepEqual(*got, *b) || why != "" {
		t.Fatalf("on nothing: %v %s", got, why)
	}
	carried := *state
	carried.Anchor = a2
	if got, why := b.Land(&carried); got == nil || why != "" || !got.Anchor.Equal(a2) || got.Summary != "model" || got.FromEntryID != "k1" {
		t.Fatalf("carried over: %+v %s", got, why)
	}
	moved := &Base{Anchor: a2, Summary: "a preparation's", FromEntryID: "k2", Source: SourceModel}
	if got, why := b.Land(moved); got != nil || why != "moved-on" {
		t.Fatalf("moved on: %+v %s", got, why)
	}
	if got, why := b.Land(b); got != nil || why != "duplicate" {
		t.Fatalf("twice: %+v %s", got, why)
	}
	// A state of a compaction made by other rules (the agent's Pi changed between the two
	// compactions) takes no base made by the first's.
	ruled := *b
	ruled.PiVersion = "0.73.1"
	other := carried
	other.PiVersion = "1.6.0"
	if got, why := ruled.Land(&other); got != nil || why != "moved-on" {
		t.Fatalf("carried over to another Pi's compaction: %+v %s", got, why)
	}
	other.PiVersion = "0.73.0"
	if got, why := ruled.Land(&other); got == nil || why != "" {
		t.Fatalf("carried over to a compaction of the same rules: %+v %s", got, why)
	}
}

// NextBase carries a model's base over to the compaction an extract answers only when both
// were made by the same rules.
func TestNextBaseFollowsTheRules(t *testing.T) {
	t.Parallel()
	a := BaseAnchor{LeafID: "l1", FirstKeptEntryID: "k1", SummarySHA256: "s1"}
	current := &Base{Anchor: a, Summary: "model", FromEntryID: "k1", Source: SourceModel, PiVersion: "0.73.1"}
	made := &Base{Anchor: BaseAnchor{LeafID: "l2", FirstKeptEntryID: "k2", SummarySHA256: "s2"}, Summary: "extract text", FromEntryID: "f0", Source: SourceCompaction, PiVersion: "0.73.1"}
	if got := NextBase(current, made, &a); got.Summary != "model" || got.FromEntryID != "k1" || !got.Anchor.Equal(made.Anchor) {
		t.Fatalf("the same rules: %+v", got)
	}
	made.PiVersion = "1.6.0"
	if got := NextBase(current, made, &a); got != made {
		t.Fatalf("other rules: %+v", got)
	}
}

// A preparation made on the previous compaction's own text (an extract) while the model's
// base for that compaction was being made is bridged as it is, and leaves that base for the
// next summary, which reads the preparation's span again: the extract's span is a model's
// from the compaction after on. A preparation made on the base leaves nothing.
func TestBridgeAfterTheBaseLanded(t *testing.T) {
	t.Parallel()
	w := newBaseWorld(t, "1.6.0", "019a0000-0000-7000-8000-0000000ba5f3")
	x1 := w.extract()
	a1 := w.stored.Anchor
	w.leaf = piWrites(t, w.file, "c0000001", w.leaf, x1)
	w.grow(10)
	settings := Request{File: w.file, Settings: Settings{Policy: cutpoint.PolicyPi, Counter: tokenize.CounterEstimate, KeepRecentTokens: baseKeep}}
	early := settings
	// the base is not made yet and no job is asked for it (a worker without a queue): the
	// preparation builds on the extract's text
	early.Base = w.stored.WithoutPending(x1.FirstKeptEntryID)
	prep, _, err := w.eng.Prepare(context.Background(), early, nil)
	if err != nil || prep == nil || prep.BuiltOn.Source == SourceModel {
		t.Fatalf("prepare: %v, built on %+v", err, prep.BuiltOn)
	}
	if _, _, why := w.makeBase(a1); why != "" || !w.stored.Complete() {
		t.Fatalf("base 1: %s", why)
	}
	w.grow(3)
	pi, err := Plan(w.file, w.piSettings(), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bridge := func(p *Prepared) *Prepared {
		t.Helper()
		out, err := w.eng.Bridge(context.Background(), BridgeRequest{File: w.file, LeafID: w.leaf, FirstKeptEntryID: pi.Plan.FirstKeptEntryID, Base: w.stored}, p)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	out := bridge(prep)
	made, latest := out.LeftBase(w.leaf)
	if made == nil || made.Source != SourceModel || made.Summary != w.stored.Summary || made.FromEntryID != x1.FirstKeptEntryID ||
		made.Anchor.SummarySHA256 != SHA256(out.Summary) || latest == nil || !latest.Equal(w.stored.Anchor) {
		t.Fatalf("the bridged preparation leaves %+v", made)
	}
	late := settings
	late.Base = w.stored
	onBase, _, err := w.eng.Prepare(context.Background(), late, nil)
	if err != nil || onBase.BuiltOn.Source != SourceModel {
		t.Fatalf("prepare on the base: %v %+v", err, onBase.BuiltOn)
	}
	// Made on the base, the preparation leaves its own text, from its own cut: the next
	// summary has the model read the bridge's gap.
	bridged := bridge(onBase)
	own, latest := bridged.LeftBase(w.leaf)
	ownText, _, _ := withoutFileLists(onBase.Summary)
	if own == nil || own.Summary != ownText || own.FromEntryID != onBase.FirstKeptEntryID || own.Source != SourceModel || latest != nil ||
		own.Anchor.SummarySHA256 != SHA256(bridged.Summary) || bridged.Bridge.Messages == 0 {
		t.Fatalf("a preparation on the base, bridged over %+v, leaves %+v", bridged.Bridge, own)
	}
	// The next preparation builds on it and reads the gap.
	w.leaf = piWrites(t, w.file, "c0000002", w.leaf, bridged)
	// Its base job has a model read the gap alone, on the preparation's text: the span is a
	// model's whole.
	job := BaseAnchor{LeafID: own.Anchor.LeafID, FirstKeptEntryID: own.Anchor.FirstKeptEntryID, SummarySHA256: own.Anchor.SummarySHA256}
	gapBase, res, err := w.eng.MakeBase(context.Background(), BaseRequest{File: w.file, Anchor: job, SpanOnly: true, Settings: Settings{Pi: w.pi, Counter: tokenize.CounterEstimate}}, own)
	if err != nil || gapBase == nil || !gapBase.Complete() || w.model.last().PreviousSummary != ownText {
		t.Fatalf("the bridged compaction's base job: %v %+v (%s)", err, gapBase, res.Reason)
	}
	if got := steps(w.model.last().Messages); len(got) == 0 || len(got) > bridged.Bridge.Messages {
		t.Fatalf("the base job read steps %v, not the gap of %d messages", got, bridged.Bridge.Messages)
	}
	w.grow(12)
	next := settings
	next.Base = own
	p3, _, err := w.eng.Prepare(context.Background(), next, nil)
	if err != nil || p3.BuiltOn.Source != SourceModel || p3.BuiltOn.ReadAgainTokens == 0 || w.model.last().PreviousSummary != ownText {
		t.Fatalf("the preparation after the bridged one: %v, built on %+v", err, p3.BuiltOn)
	}
	gapSteps := steps(w.model.last().Messages)
	if len(gapSteps) == 0 || gapSteps[0] > indexTurn(mustPath(t, w.file), indexOf(mustPath(t, w.file), bridged.FirstKeptEntryID)) {
		t.Fatalf("the next preparation read steps %v, not the gap first", gapSteps)
	}
}

func mustPath(t *testing.T, file string) []*sessionio.Entry {
	t.Helper()
	s, err := sessionio.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Path("")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A model's base that lands after the next extract carries over to that extract's compaction;
// the extract after it reads the span the carried base does not cover again, from the
// messages (the compaction's own text was made on what was there before the base).
func TestBaseLandsAfterTheNextExtract(t *testing.T) {
	t.Parallel()
	w := newBaseWorld(t, "0.73.1", "019a0000-0000-7000-8000-0000000ba5f4")
	x1 := w.extract()
	a1 := w.stored.Anchor
	w.leaf = piWrites(t, w.file, "c0000001", w.leaf, x1)
	w.grow(12)
	// The base job for compaction 1 starts now (the store stands for compaction 1) ...
	made, _, err := w.eng.MakeBase(context.Background(), BaseRequest{File: w.file, Settings: Settings{Pi: w.pi, Counter: tokenize.CounterEstimate},
		Anchor: BaseAnchor{LeafID: a1.LeafID, FirstKeptEntryID: a1.FirstKeptEntryID, SummarySHA256: a1.SummarySHA256}}, w.stored)
	if err != nil || made == nil {
		t.Fatalf("base 1: %v", err)
	}
	// ... and lands after the extract for compaction 2.
	x2 := w.extract()
	w.leaf = piWrites(t, w.file, "c0000002", w.leaf, x2)
	w.grow(12)
	landed, why := made.Land(w.stored)
	if landed == nil || why != "" || landed.Anchor.FirstKeptEntryID != x2.FirstKeptEntryID || landed.FromEntryID != x1.FirstKeptEntryID || landed.ExtractOn {
		t.Fatalf("base 1 landing after the extract for compaction 2: %+v (%s)", landed, why)
	}
	w.stored = landed
	x3 := w.extract()
	if x3.BuiltOn.Source != SourceModel || x3.BuiltOn.Via != "" || x3.BuiltOn.ReadAgainTokens == 0 || !strings.Contains(x3.Summary, "Model summary") {
		t.Fatalf("the extract after the carried base: built on %+v", x3.BuiltOn)
	}
}

// A base keeps its text without the file lists a summary ends in; a text whose end only
// looks like them is kept whole.
func TestWithoutFileLists(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		read, modified []string
	}{{nil, nil}, {[]string{"a.go"}, nil}, {nil, []string{"b.go", "c d.go"}}, {[]string{"a.go", "x/y.go"}, []string{"b.go"}}} {
		sum := "## Goal\n- x" + summarize.FormatFileOperations(tc.read, tc.modified)
		text, read, modified := withoutFileLists(sum)
		if text != "## Goal\n- x" || !slices.Equal(read, tc.read) || !slices.Equal(modified, tc.modified) {
			t.Errorf("%v %v: text %q, read %v, modified %v", tc.read, tc.modified, text, read, modified)
		}
	}
	odd := "## Goal\n- quoted:\n\n<read-files>\na.go\n</read-files>\n- more"
	if text, read, _ := withoutFileLists(odd); text != odd || read != nil {
		t.Errorf("a text with lists inside was cut: %q %v", text, read)
	}
}
