package wire

import (
	"strings"
	"testing"
	"time"
)

func TestNames(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"default", "team-a", "x_1"} {
		if err := ValidateStoreName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a.b", "a*", ">", "a b", "é", strings.Repeat("a", 65)} {
		if err := ValidateStoreName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	uuid := "019a48fc-d300-72c8-a6b9-f316c6e71060"
	if SessionToken(uuid) != uuid {
		t.Error("a UUID is not kept as is")
	}
	for _, odd := range []string{"a.b", "x y", "h-abc", "*", "ü"} {
		tok := SessionToken(odd)
		if !strings.HasPrefix(tok, "h-") || strings.ContainsAny(tok, ".*> ") || tok == SessionToken(odd+"x") {
			t.Errorf("SessionToken(%q) = %q", odd, tok)
		}
	}
	if got := JobSubject("s", "a.b", KindCompact); strings.Count(got, ".") != 4 {
		t.Errorf("subject %q has the wrong number of tokens", got)
	}
	j := Job{Kind: KindBranchSummary, Store: "s", SessionID: "id", ExpectLeafID: "l", TargetID: "t"}
	k := j
	k.TargetID = "u"
	if j.MsgID() == k.MsgID() {
		t.Error("branch summaries with different targets share a message id")
	}
}

func TestDecodeJob(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{`{`, `{"v":4,"kind":"compact","store":"s","path":"a.jsonl","sessionId":"x"}`,
		`{"v":3,"kind":"compact","store":"s","path":"a.jsonl","sessionId":"x"}`,
		`{"v":2,"kind":"base","store":"s","path":"a.jsonl","sessionId":"x"}`,
		`{"v":1,"kind":"nope","store":"s","path":"a.jsonl","sessionId":"x"}`,
		`{"v":1,"kind":"branch_summary","store":"s","path":"a.jsonl","sessionId":"x"}`,
		`{"v":1,"kind":"compact","store":"s.t","path":"a.jsonl","sessionId":"x"}`} {
		if _, err := DecodeJob([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
	j, err := DecodeJob([]byte(`{"v":1,"kind":"compact","store":"s","path":"a.jsonl","sessionId":"x","future":1}`))
	if err != nil || j.Path != "a.jsonl" {
		t.Errorf("valid job: %v %+v", err, j)
	}
	j, err = DecodeJob([]byte(`{"v":2,"kind":"base","store":"s","path":"a.jsonl","sessionId":"x","expectLeafId":"l","cut":"c","summarySha256":"d"}`))
	if err != nil || j.Cut != "c" {
		t.Errorf("valid base job: %v %+v", err, j)
	}
}

// baseJobFor is a base job for the session (the anchor's fields made up).
func baseJobFor(sid, leaf string) Job {
	return Job{V: BaseJobVersion, Kind: KindBase, Store: "default", Path: "s.jsonl", SessionID: sid, ExpectLeafID: leaf, Cut: "cut-" + leaf, SummarySHA256: "sha-" + leaf}
}

// A base job names its compaction, and is written as version 2, which a worker that does
// not know the kind hands back; ids of the other kinds are as they were.
func TestBaseJobValidation(t *testing.T) {
	t.Parallel()
	j := baseJobFor("s1", "l1")
	j.Normalize(time.Now())
	if err := j.Validate(); err != nil || j.Subject() != "compactor.jobs.default.s1.base" || j.V != BaseJobVersion {
		t.Fatalf("base job: %v, subject %s, v%d", err, j.Subject(), j.V)
	}
	for _, f := range []func(*Job){func(j *Job) { j.ExpectLeafID = "" }, func(j *Job) { j.Cut = "" }, func(j *Job) { j.SummarySHA256 = "" }} {
		k := baseJobFor("s1", "l1")
		f(&k)
		if err := k.Validate(); err == nil {
			t.Errorf("a base job without its compaction's name was accepted: %+v", k)
		}
	}
	other := baseJobFor("s1", "l1")
	other.SummarySHA256 = "another extract"
	same := baseJobFor("s1", "l1")
	if other.MsgID() == same.MsgID() {
		t.Error("two bases for different compactions have one id")
	}
	// A slot's job: its own subject, the same id (the same span asked for in two slots is one
	// job); a merge is another job; slots and merges only where they mean something.
	slotted := baseJobFor("s1", "l1")
	slotted.Slot = 2
	if err := slotted.Validate(); err == nil {
		t.Error("a slot's job of version 2 was accepted: a worker before slots would dead-letter it")
	}
	slotted.V = 0
	slotted.Normalize(time.Now())
	if slotted.V != SpanJobVersion {
		t.Errorf("a slot's job is written as v%d, want v%d", slotted.V, SpanJobVersion)
	}
	slotted.ID = ""
	if err := slotted.Validate(); err != nil || slotted.Subject() != "compactor.jobs.default.s1.base2" || slotted.MsgID() != same.MsgID() {
		t.Errorf("slot 2: %v, subject %s, id %s (slot 0's %s)", err, slotted.Subject(), slotted.MsgID(), same.MsgID())
	}
	merge := baseJobFor("s1", "l1")
	merge.Merge = "s1"
	merge.V = 0
	merge.Normalize(time.Now())
	merge.ID = ""
	again := merge
	again.Merge = "s2"
	if err := merge.Validate(); err != nil || merge.Subject() != same.Subject() || merge.MsgID() == same.MsgID() || merge.MsgID() == again.MsgID() {
		t.Errorf("merge: %v, subject %s, id %s", err, merge.Subject(), merge.MsgID())
	}
	for name, f := range map[string]func(*Job){
		"slot 5":           func(j *Job) { j.Slot = BaseSpanSlots + 1 },
		"slot -1":          func(j *Job) { j.Slot = -1 },
		"a compact's slot": func(j *Job) { j.Kind = KindCompact; j.Slot = 1 },
		"a slot's merge":   func(j *Job) { j.Slot = 1; j.Merge = "s" },
		"a prepare merge":  func(j *Job) { j.Kind = KindPrepare; j.Merge = "s" },
		"a long merge":     func(j *Job) { j.Merge = strings.Repeat("s", 65) },
	} {
		k := baseJobFor("s1", "l1")
		k.V = SpanJobVersion
		f(&k)
		if err := k.Validate(); err == nil {
			t.Errorf("%s was accepted", name)
		}
	}
	// The id of a compact job is what it was before base jobs (pinned).
	c := Job{Kind: KindCompact, Store: "default", Path: "p.jsonl", SessionID: "s1", ExpectLeafID: "l1"}
	if got := c.MsgID(); got != "compact:s1:a48e95be5e327c2805e8a8f7" {
		t.Errorf("compact job id %s changed", got)
	}
}
