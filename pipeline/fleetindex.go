package pipeline

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/compactor-dev/compactor/wire"
)

// What a FleetView keeps in memory so that a page never scans a stream: the events (a
// bounded index: each session's history, each store's recent jobs, counts per minute for
// the charts), each store's dead letters, and the extension's hook reports.

// EventIndex holds at most max events, the oldest dropped first. Each event is held once;
// a session's history and a store's recent jobs point into it.
type EventIndex struct {
	mu       sync.RWMutex
	max      int
	ring     []*wire.Event // FIFO of every event held: ring[head] is the oldest
	head, n  int
	sessions map[sessionKey][]*wire.Event
	stores   map[string]*storeEvents
	added    uint64
	// words holds one copy of the strings that repeat across events (stores, workers,
	// kinds, models): 100,000 events hold a few of each, not 100,000.
	words map[string]string
}

// wordsMax bounds words: past it, it starts again (the strings held stay valid).
const wordsMax = 4096

func (x *EventIndex) word(s string) string {
	if w, ok := x.words[s]; ok {
		return w
	}
	if len(x.words) >= wordsMax {
		clear(x.words)
	}
	x.words[s] = s
	return s
}

type sessionKey struct{ store, session string }

// storeEvents are a store's recent final events and its counts per minute.
type storeEvents struct {
	recent  []*wire.Event // the last recentJobs final events, oldest first
	minutes map[int64]*WindowCounts
}

const (
	recentJobs      = 200
	chartMinutes    = 6 * 60
	hookIndexRecent = 200
)

// NewEventIndex holds at most max events.
func NewEventIndex(max int) *EventIndex {
	return &EventIndex{max: max, ring: make([]*wire.Event, 0, min(max, 1<<16)), sessions: map[sessionKey][]*wire.Event{}, stores: map[string]*storeEvents{},
		words: map[string]string{}}
}

// Add indexes an event (events arrive in the stream's order).
func (x *EventIndex) Add(ev wire.Event) {
	e := &ev
	x.mu.Lock()
	defer x.mu.Unlock()
	x.added++
	e.Store, e.Worker, e.Kind, e.LLMModel = x.word(e.Store), x.word(e.Worker), x.word(e.Kind), x.word(e.LLMModel)
	if list := x.sessions[sessionKey{e.Store, e.SessionID}]; len(list) > 0 {
		// A session's events share its id and, mostly, its path and job id.
		prev := list[len(list)-1]
		e.SessionID = prev.SessionID
		if e.Path == prev.Path {
			e.Path = prev.Path
		}
		if e.JobID == prev.JobID {
			e.JobID = prev.JobID
		}
	}
	if x.n == x.max {
		old := x.ring[x.head]
		x.ring[x.head] = e
		x.head = (x.head + 1) % x.max
		k := sessionKey{old.Store, old.SessionID}
		if list := x.sessions[k]; len(list) > 0 && list[0] == old {
			if len(list) == 1 {
				delete(x.sessions, k)
			} else {
				list[0] = nil
				x.sessions[k] = list[1:]
			}
		}
	} else {
		x.ring = append(x.ring, e)
		x.n++
	}
	k := sessionKey{ev.Store, ev.SessionID}
	x.sessions[k] = append(x.sessions[k], e)
	st := x.stores[ev.Store]
	if st == nil {
		st = &storeEvents{minutes: map[int64]*WindowCounts{}}
		x.stores[ev.Store] = st
	}
	if ev.Final() {
		st.recent = append(st.recent, e)
		if len(st.recent) > recentJobs {
			st.recent = slices.Delete(st.recent, 0, len(st.recent)-recentJobs)
		}
	}
	minute := ev.At.Unix() / 60
	c := st.minutes[minute]
	if c == nil {
		c = &WindowCounts{}
		st.minutes[minute] = c
		// Counts older than the charts' reach go as new minutes come.
		for m := range st.minutes {
			if m < minute-chartMinutes {
				delete(st.minutes, m)
			}
		}
	}
	c.add(ev)
}

// Len is the number of events held; Added the number ever added.
func (x *EventIndex) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.n
}

// Added counts the events ever added (a page's live view asks whether it moved).
func (x *EventIndex) Added() uint64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.added
}

// Session is a session's events held, oldest first.
func (x *EventIndex) Session(store, sessionID string) []wire.Event {
	x.mu.RLock()
	defer x.mu.RUnlock()
	list := x.sessions[sessionKey{store, sessionID}]
	out := make([]wire.Event, len(list))
	for i, e := range list {
		out[i] = *e
	}
	return out
}

// Sessions counts the sessions with an event held.
func (x *EventIndex) Sessions() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.sessions)
}

// Recent are a store's last n final events, newest first.
func (x *EventIndex) Recent(store string, n int) []wire.Event {
	x.mu.RLock()
	defer x.mu.RUnlock()
	st := x.stores[store]
	if st == nil {
		return nil
	}
	out := make([]wire.Event, 0, min(n, len(st.recent)))
	for i := len(st.recent) - 1; i >= 0 && len(out) < n; i-- {
		out = append(out, *st.recent[i])
	}
	return out
}

// WindowCounts count the events of a time window.
type WindowCounts struct {
	Jobs        int `json:"jobs"` // final events
	Done        int `json:"done"`
	Skipped     int `json:"skipped"`
	Failed      int `json:"failed"`
	Retries     int `json:"retries"`
	Compactions int `json:"compactions"` // done jobs that appended an entry
	// TokensBefore and TokensAfter sum the compactions' context sizes before and after.
	TokensBefore int `json:"tokensBefore"`
	TokensAfter  int `json:"tokensAfter"`
	// Billed are the LLM tokens by model: input (cached included), cached input, output.
	Billed map[string]*ModelTokens `json:"billed,omitempty"`
}

// ModelTokens are one model's billed tokens.
type ModelTokens struct {
	Input  int `json:"input"`
	Cached int `json:"cached"`
	Output int `json:"output"`
}

// InputTokens sums the input tokens billed, every model's.
func (c WindowCounts) InputTokens() int {
	n := 0
	for _, m := range c.Billed {
		n += m.Input
	}
	return n
}

func (c *WindowCounts) add(ev wire.Event) {
	if ev.Final() {
		c.Jobs++
	}
	switch ev.Outcome {
	case OutcomeDone:
		c.Done++
		if ev.EntryID != "" {
			c.Compactions++
			c.TokensBefore += ev.TokensBefore
			c.TokensAfter += ev.TokensAfter
		}
	case OutcomeSkipped, OutcomeSuperseded:
		c.Skipped++
	case OutcomeFailed:
		c.Failed++
	case OutcomeRetry:
		c.Retries++
	}
	if ev.LLMInputTokens > 0 || ev.LLMOutputTokens > 0 || ev.LLMCachedInputTokens > 0 {
		model := ev.LLMModel
		if model == "" {
			model = "unknown"
		}
		c.bill(model, ModelTokens{Input: ev.LLMInputTokens, Cached: ev.LLMCachedInputTokens, Output: ev.LLMOutputTokens})
	}
}

// bill adds a model's tokens.
func (c *WindowCounts) bill(model string, t ModelTokens) {
	if c.Billed == nil {
		c.Billed = map[string]*ModelTokens{}
	}
	m := c.Billed[model]
	if m == nil {
		m = &ModelTokens{}
		c.Billed[model] = m
	}
	m.Input += t.Input
	m.Cached += t.Cached
	m.Output += t.Output
}

func (c *WindowCounts) merge(o *WindowCounts) {
	c.Jobs += o.Jobs
	c.Done += o.Done
	c.Skipped += o.Skipped
	c.Failed += o.Failed
	c.Retries += o.Retries
	c.Compactions += o.Compactions
	c.TokensBefore += o.TokensBefore
	c.TokensAfter += o.TokensAfter
	for model, t := range o.Billed {
		c.bill(model, *t)
	}
}

// Window counts a store's events from from (inclusive, to the minute) to to.
func (x *EventIndex) Window(store string, from, to time.Time) WindowCounts {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out WindowCounts
	st := x.stores[store]
	if st == nil {
		return out
	}
	lo, hi := from.Unix()/60, to.Unix()/60
	for m, c := range st.minutes {
		if m >= lo && m <= hi {
			out.merge(c)
		}
	}
	return out
}

// MinuteCounts are a store's counts per minute from from to to, one per minute (zero
// counts included), for the charts.
func (x *EventIndex) MinuteCounts(store string, from, to time.Time) []MinuteCount {
	x.mu.RLock()
	defer x.mu.RUnlock()
	st := x.stores[store]
	lo, hi := from.Unix()/60, to.Unix()/60
	out := make([]MinuteCount, 0, hi-lo+1)
	for m := lo; m <= hi; m++ {
		mc := MinuteCount{At: time.Unix(m*60, 0).UTC()}
		if st != nil {
			if c := st.minutes[m]; c != nil {
				mc.WindowCounts = *c
				mc.Billed = nil
				for k, v := range c.Billed {
					if mc.Billed == nil {
						mc.Billed = map[string]*ModelTokens{}
					}
					t := *v
					mc.Billed[k] = &t
				}
			}
		}
		out = append(out, mc)
	}
	return out
}

// MinuteCount is one minute's counts.
type MinuteCount struct {
	At time.Time `json:"at"`
	WindowCounts
}

// HookIndex counts the extension's hook reports by store, what answered and why, and
// keeps the last ones.
type HookIndex struct {
	mu     sync.RWMutex
	since  time.Time
	max    int
	recent []HookSeen
	counts map[HookKey]*HookCount
}

// HookSeen is a report and when it arrived.
type HookSeen struct {
	wire.HookReport
	At time.Time `json:"at"`
}

// HookKey is what a HookCount counts.
type HookKey struct {
	Store  string `json:"store"`
	Result string `json:"result"` // prepared, extract, pi, other
	Reason string `json:"reason"` // HookReasons or other
}

// HookCount counts reports and the time Pi's hook blocked the agent.
type HookCount struct {
	HookKey
	Hooks     int     `json:"hooks"`
	BlockedMs float64 `json:"blockedMs"`
}

// NewHookIndex keeps the last max reports.
func NewHookIndex(max int) *HookIndex {
	return &HookIndex{since: time.Now().UTC(), max: max, counts: map[HookKey]*HookCount{}}
}

// Add counts a report.
func (h *HookIndex) Add(r wire.HookReport, at time.Time) {
	result, reason := hookLabels(r)
	if r.Result == "" {
		result = "other"
	}
	k := HookKey{Store: r.Store, Result: result, Reason: reason}
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.counts[k]
	if c == nil {
		c = &HookCount{HookKey: k}
		h.counts[k] = c
	}
	c.Hooks++
	c.BlockedMs += r.LatencyMs
	h.recent = append(h.recent, HookSeen{HookReport: r, At: at.UTC()})
	if len(h.recent) > h.max {
		h.recent = slices.Delete(h.recent, 0, len(h.recent)-h.max)
	}
}

// Since is when the index started counting.
func (h *HookIndex) Since() time.Time { return h.since }

// Counts are the counts, by store, result and reason.
func (h *HookIndex) Counts() []HookCount {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]HookCount, 0, len(h.counts))
	for _, c := range h.counts {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b HookCount) int {
		return strings.Compare(a.Store+"\x00"+a.Result+"\x00"+a.Reason, b.Store+"\x00"+b.Result+"\x00"+b.Reason)
	})
	return out
}

// Recent are the last n reports, newest first.
func (h *HookIndex) Recent(n int) []HookSeen {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]HookSeen, 0, min(n, len(h.recent)))
	for i := len(h.recent) - 1; i >= 0 && len(out) < n; i-- {
		out = append(out, h.recent[i])
	}
	return out
}

// deadLetterIndex holds each store's dead letters, read again when the store's count of
// them (its DLQ consumer's) differs from what is held.
type deadLetterIndex struct {
	q       *DLQ
	mu      sync.RWMutex
	byStore map[string][]DeadLetterRecord // newest first
}

func (d *deadLetterIndex) sync(ctx context.Context, store string, count uint64, log *slog.Logger) {
	d.mu.RLock()
	held, ok := d.byStore[store]
	d.mu.RUnlock()
	if ok && uint64(len(held)) == count {
		return
	}
	recs, err := d.q.List(ctx, DeadLetterFilter{Store: store})
	if err != nil {
		log.Warn("fleet view: dead letters not read", "store", store, "err", err)
		return
	}
	slices.Reverse(recs)
	d.mu.Lock()
	d.byStore[store] = recs
	d.mu.Unlock()
}

func (d *deadLetterIndex) list(store string) []DeadLetterRecord {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.byStore[store]
}

func (d *deadLetterIndex) forget(recs []DeadLetterRecord) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range recs {
		d.byStore[r.Store] = slices.DeleteFunc(slices.Clone(d.byStore[r.Store]), func(x DeadLetterRecord) bool { return x.Seq == r.Seq })
	}
}
