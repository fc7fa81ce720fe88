//go:build redteam

package redteam

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor-dev/compactor/engine"
	"github.com/compactor-dev/compactor/internal/natstest"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/wire"
)

// Every field of a base job a worker acts on (wire.KindBase: its store, path and session,
// its anchor (expectLeafId, cut, summarySha256), its slot and its merge, its version),
// published raw with hostA's keys to hostA's own subjects: naming hostB's store, file and
// session, hostB's compaction as the anchor, slots out of range or other than the
// subject's, a slot or a merge in a version before slots. Then the bound an agent's key
// reaches on one of hostA's sessions: many base jobs of every slot, merges of distinct
// digests (which the queue's de-duplication does not fold), other subjects of the session,
// other session ids for the same file. A job's end is read from its event with hostA's
// admin's key (wire.EventSubjectFor of the subject it was published on: a refused job's
// payload may name nothing usable).

// anchor names a compaction as a base job does: its parent, its cut and its summary's
// SHA-256.
type anchor struct{ leaf, cut, sha string }

// madeUp is an anchor no file holds.
var madeUp = anchor{leaf: "rt0leaf0", cut: "rt0cut00", sha: strings.Repeat("ab", 32)}

// lastCompaction is the anchor of the last compaction of the session file at p.
func lastCompaction(p string) (anchor, error) {
	f, err := os.Open(p)
	if err != nil {
		return anchor{}, err
	}
	defer f.Close()
	var out anchor
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e struct {
			Type, ParentID, FirstKeptEntryID, Summary string
		}
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Type == "compaction" {
			out = anchor{leaf: e.ParentID, cut: e.FirstKeptEntryID, sha: engine.SHA256(e.Summary)}
		}
	}
	if err := sc.Err(); err != nil {
		return anchor{}, err
	}
	if out.cut == "" {
		return anchor{}, fmt.Errorf("no compaction in %s", p)
	}
	return out, nil
}

// baseJobA is a base job of hostA's for session id at rel, for the compaction an names, in
// slot (a merge when merge is set), in the version wire writes it in, with an id of its own.
func baseJobA(rel, id string, an anchor, slot int, merge string) wire.Job {
	j := wire.Job{Kind: wire.KindBase, Store: "hostA", Path: filepath.ToSlash(rel), SessionID: id, Reason: "redteam",
		ExpectLeafID: an.leaf, Cut: an.cut, SummarySHA256: an.sha, Slot: slot, Merge: merge, Counter: "estimate", ID: "rt-" + newID()}
	j.Normalize(time.Now())
	return j
}

// everySlot is a base job in each of slots 0 to wire.BaseSpanSlots, and a merge.
func everySlot(rel, id string, an anchor) []wire.Job {
	var out []wire.Job
	for slot := 0; slot <= wire.BaseSpanSlots; slot++ {
		out = append(out, baseJobA(rel, id, an, slot, ""))
	}
	return append(out, baseJobA(rel, id, an, 0, "rt"+newID()[:8]))
}

// slotName names a job's slot ("slot 3", "a merge").
func slotName(j wire.Job) string {
	if j.Merge != "" {
		return "a merge"
	}
	return fmt.Sprintf("slot %d", j.Slot)
}

// publishJob publishes job's payload (as it is, valid or not) on subject with the
// attacker's key and returns its stream sequence.
func (a *Attacker) publishJob(ctx context.Context, subject string, job any) (uint64, error) {
	data, err := json.Marshal(job)
	if err != nil {
		return 0, err
	}
	id := "rt-" + newID()
	if j, ok := job.(wire.Job); ok && j.ID != "" {
		id = j.ID
	}
	ack, err := a.Publish(ctx, subject, Header{"Nats-Msg-Id": id}, data)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// endOf is the final event of the job message seq on subject (read with hostA's admin's
// key), at most jobWait.
func (a *Attacker) endOf(ctx context.Context, subject string, seq uint64) (*wire.Event, error) {
	es := wire.EventSubjectFor(subject, seq)
	for deadline := time.Now().Add(jobWait); ; {
		data, err := natstest.DirectGet(ctx, a.adminA, wire.StreamEvents, es)
		var ev wire.Event
		if err == nil && data != nil && json.Unmarshal(data, &ev) == nil && ev.JobSeq == seq && ev.Final() {
			return &ev, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("hostA's job on %s (seq %d) did not end within %s", subject, seq, jobWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tryJob publishes job on subject and waits for its end.
func (a *Attacker) tryJob(ctx context.Context, subject string, job any) (*wire.Event, error) {
	seq, err := a.publishJob(ctx, subject, job)
	if err != nil {
		return nil, fmt.Errorf("hostA's %s could not publish on its own subject %s: %w", a.Role, subject, err)
	}
	return a.endOf(ctx, subject, seq)
}

// sessionJobs are the messages of hostA's jobs stream on the subjects of session id
// (compactor.jobs.hostA.<token>.>), by subject, read with hostA's admin's key.
func (a *Attacker) sessionJobs(ctx context.Context, id string) (map[string]uint64, error) {
	js, _ := jetstream.New(a.adminA)
	str, err := js.Stream(ctx, wire.StreamJobs)
	if err != nil {
		return nil, err
	}
	info, err := str.Info(ctx, jetstream.WithSubjectFilter(wire.JobsPrefix+"hostA."+wire.SessionToken(id)+".>"))
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for s, n := range info.State.Subjects {
		out[strings.TrimPrefix(s, wire.JobsPrefix+"hostA."+wire.SessionToken(id)+".")] = n
	}
	return out, nil
}

// drained waits until no job of hostA's is queued or running on the subjects of the
// sessions ids (the merges a landing asks for included), at most jobWait.
func (a *Attacker) drained(ctx context.Context, ids ...string) error {
	for deadline := time.Now().Add(jobWait); ; {
		left := 0
		for _, id := range ids {
			q, err := a.sessionJobs(ctx, id)
			if err != nil {
				return err
			}
			for _, n := range q {
				left += int(n)
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of hostA's jobs still queued on its sessions after %s", left, jobWait)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// total is the sum of a subject count.
func total(m map[string]uint64) (n uint64) {
	for _, v := range m {
		n += v
	}
	return n
}

func init() {
	// Base jobs of every slot and a merge on hostA's subjects, each naming in its payload
	// what is hostB's: its store (refused: the payload is not the subject's), its session
	// file by its relative path (not in hostA's root, and hostB's session id finds none
	// there), by a path out of the root and an absolute one, by a hard link and a symlink in
	// hostA's root (refused: 2 hard links, not a regular file); each of those with the anchor
	// of hostB's last compaction of its source session (read from hostB's file as the host
	// sees it: a tenant's keys cannot read it, a shared host can) and with a made-up one.
	// Then hostB's session id on a file of hostA's own: refused at delivery, the file's
	// header names hostA's session (a job's id keys its lease, records and bounds, so it
	// must be its file's). Then the malformed: slots out of range (7, -1, 99), a payload's slot other than
	// its subject's, a slot or a merge in version 2 or 1, version 3 with neither, a merge
	// with a slot or over 64 characters, a compaction with a slot: each refused as an
	// invalid job, dead-lettered. No refused job asks hostA's model for anything; hostB's
	// file, and everything else of hostB's (the runner's snapshot), is unchanged.
	register(Case{Name: "base jobs of every slot and a merge naming hostB's store, file, session and compaction; slots and versions malformed", Roles: agentAndWorker,
		Attack: func(ctx context.Context, a *Attacker) (func(), error) {
			vfile, vbase, vid := a.victim()
			vrel := a.f.next.rel
			victimWas, err := os.ReadFile(vfile)
			if err != nil {
				return nil, err
			}
			anchors := []struct {
				name string
				an   anchor
			}{{"a made-up anchor", madeUp}}
			if an, err := lastCompaction(filepath.Join(a.f.roots["hostB"], sourceSession)); err == nil {
				anchors = append(anchors, struct {
					name string
					an   anchor
				}{"hostB's compaction", an})
			}
			dir, cleanup := a.scratch("basejobs")
			defer cleanup()
			mine := filepath.Join(dir, "own", "2026-01-01T00-00-00-000Z_"+newID()+".jsonl")
			mineID, err := a.writeA(mine)
			if err != nil {
				return nil, err
			}
			link, sym := filepath.Join(dir, "link", vbase), filepath.Join(dir, "sym", vbase)
			for _, p := range []string{link, sym} {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(a.Root, p)), 0o755); err != nil {
					return nil, err
				}
			}
			if err := os.Link(vfile, filepath.Join(a.Root, link)); err != nil {
				return nil, err
			}
			if err := os.Symlink(vfile, filepath.Join(a.Root, sym)); err != nil {
				return nil, err
			}
			type named struct {
				name, rel, id, want string
				store               string
			}
			refused := []named{
				{"hostB's store", mine, mineID, "does not match its payload", "hostB"},
				{"hostB's file by its path and session id", vrel, vid, "refused path", "hostA"},
				{"hostB's file by a path out of the root", filepath.Join("..", "hostB", vrel), vid, "refused path", "hostA"},
				{"hostB's file by its absolute path", vfile, vid, "refused path", "hostA"},
				{"a hard link to hostB's file", link, vid, "2 hard links", "hostA"},
				{"a symlink to hostB's file", sym, vid, "refused path", "hostA"},
			}
			var errs []error
			counts := map[string]int{}
			n := a.ModelA().Count()
			for _, an := range anchors {
				for _, t := range refused {
					for _, j := range everySlot(t.rel, t.id, an.an) {
						j.Store = t.store
						own := j
						own.Store = "hostA"
						subject := own.Subject() // hostA's own subject, whatever store the payload names
						what := fmt.Sprintf("%s, %s, %s", t.name, an.name, slotName(j))
						ev, err := a.tryJob(ctx, subject, j)
						if err == nil && (ev.Outcome != pipeline.OutcomeFailed || !strings.Contains(ev.Reason+" "+ev.Error, t.want)) {
							err = fmt.Errorf("taken: %s %q (error %q); want failed, %q", ev.Outcome, ev.Reason, ev.Error, t.want)
						}
						if err != nil {
							errs = append(errs, fmt.Errorf("%s: %w", what, err))
							continue
						}
						counts["naming hostB, refused"]++
					}
				}
			}
			if m := a.ModelA().Count() - n; m != 0 {
				errs = append(errs, fmt.Errorf("%d summaries asked for refused jobs", m))
			}
			// hostB's session id on hostA's own file: refused at delivery, the file's header
			// names another session (the id's lease and records are not the file's).
			n = a.ModelA().Count()
			for _, an := range anchors {
				for _, j := range everySlot(mine, vid, an.an) {
					ev, err := a.tryJob(ctx, j.Subject(), j)
					if err == nil && (ev.Outcome != pipeline.OutcomeFailed || !strings.Contains(ev.Reason, "holds session")) {
						err = fmt.Errorf("taken: %s %q (error %q); want refused, the file holds another session", ev.Outcome, ev.Reason, ev.Error)
					}
					if err != nil {
						errs = append(errs, fmt.Errorf("hostB's session id on hostA's file, %s, %s: %w", an.name, slotName(j), err))
						continue
					}
					counts[fmt.Sprintf("hostB's session id on hostA's file, %s, %s", an.name, ev.Outcome)]++
				}
			}
			if m := a.ModelA().Count() - n; m != 0 {
				errs = append(errs, fmt.Errorf("%d summaries of hostA's file for hostB's session id", m))
			}
			n = a.ModelA().Count()
			// The malformed: a payload's slot, merge or version that no worker may act on.
			good := baseJobA(mine, mineID, madeUp, 2, "")
			type bad struct {
				name, kind string // kind: the subject's last token
				mod        func(j *wire.Job)
			}
			bads := []bad{
				{"slot 7 (beyond the span slots)", "base7", func(j *wire.Job) { j.Slot = 7 }},
				{"slot 7 on slot 0's subject", "base", func(j *wire.Job) { j.Slot = 7 }},
				{"slot -1", "base", func(j *wire.Job) { j.Slot = -1 }},
				{"slot -1 on base-1", "base-1", func(j *wire.Job) { j.Slot = -1 }},
				{"slot 99", "base99", func(j *wire.Job) { j.Slot = 99 }},
				{"slot 3 on slot 5's subject", "base5", func(j *wire.Job) { j.Slot = 3 }},
				{"slot 2 on slot 0's subject", "base", func(j *wire.Job) {}},
				{"slot 0 (version 2) on slot 2's subject", "base2", func(j *wire.Job) { j.Slot, j.V = 0, wire.BaseJobVersion }},
				{"a merge on slot 4's subject", "base4", func(j *wire.Job) { j.Slot, j.Merge = 0, "rt-merge" }},
				{"a slot in version 2", "base2", func(j *wire.Job) { j.V = wire.BaseJobVersion }},
				{"a slot in version 1", "base2", func(j *wire.Job) { j.V = wire.JobVersion }},
				{"a merge in version 2", "base", func(j *wire.Job) { j.Slot, j.Merge, j.V = 0, "rt-merge", wire.BaseJobVersion }},
				{"a merge in version 1", "base", func(j *wire.Job) { j.Slot, j.Merge, j.V = 0, "rt-merge", wire.JobVersion }},
				{"version 3 with neither slot nor merge", "base", func(j *wire.Job) { j.Slot = 0 }},
				{"a merge of slot 2", "base2", func(j *wire.Job) { j.Merge = "rt-merge" }},
				{"a merge of 65 characters", "base", func(j *wire.Job) { j.Slot, j.Merge = 0, strings.Repeat("m", 65) }},
				{"a compaction with a slot", "compact", func(j *wire.Job) { j.Kind = wire.KindCompact }},
				{"a preparation with a merge", "prepare", func(j *wire.Job) { j.Kind, j.Slot, j.Merge = wire.KindPrepare, 0, "rt-merge" }},
			}
			for _, b := range bads {
				j := good
				j.ID = "rt-" + newID()
				b.mod(&j)
				subject := wire.JobSubject("hostA", mineID, b.kind)
				ev, err := a.tryJob(ctx, subject, j)
				if err == nil && (ev.Outcome != pipeline.OutcomeFailed || !strings.Contains(ev.Reason, "invalid job")) {
					err = fmt.Errorf("taken: %s %q (error %q); want failed, an invalid job", ev.Outcome, ev.Reason, ev.Error)
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", b.name, err))
					continue
				}
				counts["malformed, refused"]++
			}
			if err := a.drained(ctx, mineID, vid); err != nil {
				errs = append(errs, err)
			}
			if m := a.ModelA().Count() - n; m != 0 {
				errs = append(errs, fmt.Errorf("%d summaries asked for malformed jobs", m))
			}
			errs = append(errs, unchanged(vfile, victimWas, "hostB's file"))
			var figures []string
			for k, v := range counts {
				figures = append(figures, fmt.Sprintf("%s %d", k, v))
			}
			slices.Sort(figures)
			fmt.Printf("=== red team: base jobs (%s): %s\n", a.Role, strings.Join(figures, "; "))
			return nil, errors.Join(errs...)
		}})

	// The bound: base jobs of one of hostA's sessions, at once. hostA's session is
	// compacted, and its compaction is the anchor (a job a worker works: a model summary,
	// held at hostA's model while the bound is read). Slot 0's job first, then 50 jobs of
	// every slot, slot 0's as merges of 50 distinct digests (distinct message ids: the
	// duplicate window does not fold them); then the same job on other subjects of the
	// session (base7, merge, base.x); then the 7 slots' jobs naming 2 other session ids
	// for the same file. The queue holds one job per subject (the jobs stream's
	// MaxMsgsPerSubject 1, DiscardNewPerSubject), and a job stays on its subject until it
	// ends: the session's base subjects hold at most 7 jobs whatever the merges (a merge is
	// slot 0's subject). The other subjects of the session take a message each (an agent
	// may publish on compactor.jobs.hostA.>), bounded only by hostA's jobs stream (the
	// limits case), and each is refused at delivery without a model call (its subject is
	// not its payload's). Other session ids for the same file are other subjects, taken by
	// the queue and refused at delivery (the file's header names another session), without
	// a model call: the bound of 7 is per session file. The case checks 7 and the refusals.
	register(Case{Name: "the bound of base jobs of one of hostA's sessions: 50 of every slot and distinct merges, other subjects, other session ids", Roles: agentAndWorker,
		Attack: func(ctx context.Context, a *Attacker) (func(), error) {
			dir, cleanup := a.scratch("basebound")
			defer cleanup()
			rel := filepath.Join(dir, "2026-01-01T00-00-00-000Z_"+newID()+".jsonl")
			id, err := a.writeA(rel)
			if err != nil {
				return nil, err
			}
			ev, err := a.enqueueA(ctx, compactA(rel, id))
			if err != nil {
				return nil, err
			}
			if ev.Outcome != pipeline.OutcomeDone {
				return nil, fmt.Errorf("hostA's compaction of its own session: %s %q %q", ev.Outcome, ev.Reason, ev.Error)
			}
			an, err := lastCompaction(filepath.Join(a.Root, rel))
			if err != nil {
				return nil, err
			}
			others := []string{newID(), newID()}
			var errs []error
			err = func() error {
				release := a.HoldSummary()
				defer release()
				n := a.ModelA().Count()
				first := baseJobA(rel, id, an, 0, "")
				if _, err := a.publishJob(ctx, first.Subject(), first); err != nil {
					return fmt.Errorf("slot 0's job: %w", err)
				}
				taken, refused, mergesTaken := 0, 0, 0
				why := map[string]int{}
				for i := range 50 {
					slot, merge := i%(wire.BaseSpanSlots+1), ""
					if slot == 0 {
						merge = fmt.Sprintf("rt%014x", i)
					}
					j := baseJobA(rel, id, an, slot, merge)
					if _, err := a.publishJob(ctx, j.Subject(), j); err != nil {
						refused++
						why[err.Error()]++
						continue
					}
					taken++
					if merge != "" {
						mergesTaken++
					}
				}
				q, err := a.sessionJobs(ctx, id)
				if err != nil {
					return err
				}
				var whys []string
				for k, v := range why {
					whys = append(whys, fmt.Sprintf("%d %q", v, k))
				}
				fmt.Printf("=== red team: base jobs' bound (%s): 1+50 published for one session: %d taken, %d refused (%s), %d merges taken; the session's subjects hold %d jobs %v; %d summaries held at hostA's model\n",
					a.Role, 1+taken, refused, strings.Join(whys, ", "), mergesTaken, total(q), q, a.ModelA().Count()-n)
				if total(q) > wire.BaseSpanSlots+1 || len(q) > wire.BaseSpanSlots+1 {
					errs = append(errs, fmt.Errorf("taken: %d base jobs of one session at once (%v), want at most %d", total(q), q, wire.BaseSpanSlots+1))
				}
				if 1+taken > wire.BaseSpanSlots+1 || mergesTaken > 0 {
					errs = append(errs, fmt.Errorf("taken: %d of 51 base jobs (%d merges) while slot 0's job held its subject, want at most %d and no merge", 1+taken, mergesTaken, wire.BaseSpanSlots+1))
				}
				// Other subjects of the session, the same payload (slot 2's).
				odd := map[string]uint64{}
				for _, kind := range []string{"base7", "base0", "merge", "base2x", "base.2", "base-2"} {
					j := baseJobA(rel, id, an, 2, "")
					seq, err := a.publishJob(ctx, wire.JobSubject("hostA", id, kind), j)
					if err == nil {
						odd[kind] = seq
					}
				}
				// The 7 slots' jobs under other session ids, for the same file.
				other := map[string]uint64{}
				for _, oid := range others {
					for _, j := range everySlot(rel, oid, an)[:wire.BaseSpanSlots+1] {
						if seq, err := a.publishJob(ctx, j.Subject(), j); err == nil {
							other[j.Subject()] = seq
						}
					}
				}
				q, _ = a.sessionJobs(ctx, id)
				fmt.Printf("=== red team: base jobs' bound (%s): %d of 6 other subjects of the session taken, the session's subjects hold %d jobs; %d of %d jobs of the 7 slots under %d other session ids for the same file taken\n",
					a.Role, len(odd), total(q), len(other), len(others)*(wire.BaseSpanSlots+1), len(others))
				release()
				for kind, seq := range odd {
					ev, err := a.endOf(ctx, wire.JobSubject("hostA", id, kind), seq)
					if err == nil && (ev.Outcome != pipeline.OutcomeFailed || !strings.Contains(ev.Reason, "does not match its payload")) {
						err = fmt.Errorf("taken: %s %q (error %q); want failed, not its payload's subject", ev.Outcome, ev.Reason, ev.Error)
					}
					if err != nil {
						errs = append(errs, fmt.Errorf("slot 2's job on the session's subject %s: %w", kind, err))
					}
				}
				outcomes, paid, tokens := map[string]int{}, 0, 0
				for subject, seq := range other {
					ev, err := a.endOf(ctx, subject, seq)
					if err != nil {
						errs = append(errs, err)
						continue
					}
					outcomes[string(ev.Outcome)]++
					if ev.LLMTokens > 0 {
						paid, tokens = paid+1, tokens+ev.LLMTokens
					}
					if ev.Outcome != pipeline.OutcomeFailed || !strings.Contains(ev.Reason, "holds session") {
						errs = append(errs, fmt.Errorf("a job under another session id for the same file, %s: %s %q; want refused, the file holds another session", subject, ev.Outcome, ev.Reason))
					}
				}
				fmt.Printf("=== red team: base jobs' bound (%s): the jobs under other session ids for the same file ended %v, %d of them with a model's summary (%d tokens)\n",
					a.Role, outcomes, paid, tokens)
				return nil
			}()
			if err != nil {
				errs = append(errs, err)
			}
			if err := a.drained(ctx, append(others, id)...); err != nil {
				errs = append(errs, err)
			}
			return nil, errors.Join(errs...)
		}})
}
