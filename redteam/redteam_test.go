//go:build redteam

package redteam

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/wire"
)

// Case is one attack (see the package's documentation, "Adding a case").
type Case struct {
	Name string
	// Roles are hostA's roles the attack runs as, each a run of its own.
	Roles []pipeline.Role
	// Attack runs it as a; see the package's documentation.
	Attack func(ctx context.Context, a *Attacker) (stop func(), err error)
	// Last: run after every other case (it leaves hostA at its limits for good).
	Last bool
}

var (
	casesMu sync.Mutex
	cases   []Case
)

// register adds a case to the suite.
func register(c Case) {
	casesMu.Lock()
	defer casesMu.Unlock()
	cases = append(cases, c)
}

// Header is a message's headers, one value each.
type Header map[string]string

// Names are hostB's subjects and keys, for an attack to aim at.
type Names struct {
	Store, Session, Token string
	Jobs, Events, DLQ     string            // subjects of one of hostB's sessions
	Keys                  map[string]string // by bucket: the subject of one of hostB's keys ($KV.<bucket>.<key>)
	Bridge, Hook          string
	// NextPrepareID is the message id of hostB's next preparation (its flows' next).
	NextPrepareID string
}

// Attacker is hostA's key of one role, and what an attack needs.
type Attacker struct {
	Role pipeline.Role
	NC   *nats.Conn
	JS   jetstream.JetStream
	Root string // hostA's store root
	B    Names
	f    *fleet
	user string
	// adminA is hostA's admin: the harness's look into hostA's own account, where a
	// contained attack's effect lands (never the attacker's).
	adminA *nats.Conn
}

// attacker is hostA's key of role.
func (f *fleet) attacker(role pipeline.Role) *Attacker {
	user := string(role) + "-hostA"
	var stores []string
	if role.PerStore() {
		stores = []string{"hostA"}
	}
	nc := f.conn(user, role, stores...)
	js, _ := jetstream.New(nc)
	tok := wire.SessionToken(sourceID)
	keys := map[string]string{}
	for b, k := range map[string]string{wire.BucketPrepared: wire.PreparedKey("hostB", sourceID), pipeline.BucketLeases: "hostB." + tok,
		pipeline.BucketSweep: "hostB.0123456789abcdef0123456789abcdef01234567", pipeline.BucketAttempts: "hostB.1.0123456789abcdef",
		pipeline.BucketWorkers: "hostB._owner", pipeline.BucketSpend: "hostB.spend.h2026010100"} {
		keys[b] = "$KV." + b + "." + k
	}
	next := ""
	if f.next != nil {
		next = f.prepareJob(f.next).ID
	}
	return &Attacker{Role: role, NC: nc, JS: js, Root: f.roots["hostA"], f: f, user: user, adminA: f.conn("admin-hostA", pipeline.RoleAdmin),
		B: Names{Store: "hostB", Session: sourceID, Token: tok, Jobs: wire.JobSubject("hostB", sourceID, wire.KindCompact),
			Events: wire.JobEventSubject("hostB", sourceID, 1), DLQ: wire.DLQSubject("hostB", sourceID), Keys: keys,
			Bridge: wire.BridgeSubject("hostB", sourceID), Hook: wire.HookSubject("hostB", sourceID), NextPrepareID: next}}
}

// watch runs op with a context that a refusal of the server ends at once; the refusal is
// op's error then.
func (a *Attacker) watch(ctx context.Context, op func(context.Context) error) error {
	wctx, stop := pipeline.RefusalsOf(a.NC).Watch(ctx)
	defer stop()
	err := op(wctx)
	if err == nil {
		// A refused publish is said asynchronously: a round trip, then the refusal if any
		// (the server answers the ping after it has refused what came before it).
		fctx, cancel := context.WithTimeout(wctx, 10*time.Second)
		err = a.NC.FlushWithContext(fctx)
		cancel()
		if err == nil {
			// The refusal comes through the connection's asynchronous error callback, which
			// may run a moment after the round trip: a moment is given it.
			select {
			case <-wctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	var pe *pipeline.PermissionError
	if errors.As(context.Cause(wctx), &pe) {
		return pe
	}
	return err
}

// Publish is a JetStream publish of data with headers to subject.
func (a *Attacker) Publish(ctx context.Context, subject string, h Header, data []byte) (*jetstream.PubAck, error) {
	var ack *jetstream.PubAck
	err := a.watch(ctx, func(ctx context.Context) error {
		m := nats.NewMsg(subject)
		for k, v := range h {
			m.Header.Set(k, v)
		}
		m.Data = data
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var err error
		ack, err = a.JS.PublishMsg(pctx, m)
		return err
	})
	return ack, err
}

// Request publishes body to subject with reply as its reply subject (any subject: the
// server does not check it), and reads an answer there when reply is the attacker's own
// inbox (nil otherwise).
func (a *Attacker) Request(ctx context.Context, subject, reply string, body []byte) (*nats.Msg, error) {
	var ans *nats.Msg
	err := a.watch(ctx, func(ctx context.Context) error {
		if reply == "" {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			var err error
			ans, err = a.NC.RequestWithContext(rctx, subject, body)
			return err
		}
		return a.NC.PublishRequest(subject, reply, body)
	})
	return ans, err
}

// Subscribe subscribes to subject (the refusal, if any, at once).
func (a *Attacker) Subscribe(ctx context.Context, subject string) (*nats.Subscription, error) {
	var sub *nats.Subscription
	err := a.watch(ctx, func(context.Context) error {
		var err error
		sub, err = a.NC.SubscribeSync(subject)
		return err
	})
	return sub, err
}

// CLI runs a compactor command with the attacker's key.
func (a *Attacker) CLI(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	return a.f.cli(ctx, a.user, args...)
}

// Refused is nil when err says the operation was not taken (refused by the server's
// permissions, or answered with a JetStream error), else an error saying it was taken.
func (a *Attacker) Refused(err error, what string) error {
	if err == nil {
		return fmt.Errorf("taken: %s", what)
	}
	return nil
}

// InHostA waits until hostA's own account holds a message on subject in stream (seen
// with hostA's admin's key, not the attacker's): the proof that something the attack sent
// was processed, and where it landed.
func (a *Attacker) InHostA(ctx context.Context, stream, subject string) error {
	js, _ := jetstream.New(a.adminA)
	deadline := time.Now().Add(10 * time.Second)
	for {
		str, err := js.Stream(ctx, stream)
		if err == nil {
			if _, err := str.GetLastMsgForSubject(ctx, subject); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s landed nowhere in hostA's account (stream %s)", subject, stream)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// HoldSummary holds hostA's next summaries (its fake model answers none) until release:
// for an attack that must act while one of hostA's jobs is in flight.
func (a *Attacker) HoldSummary() (release func()) {
	hold := make(chan struct{})
	a.f.llm["hostA"].SetDefault(fakellm.Behavior{Hold: hold})
	var once sync.Once
	return func() {
		once.Do(func() {
			a.f.llm["hostA"].SetDefault(fakellm.Behavior{Latency: 150 * time.Millisecond})
			close(hold)
		})
	}
}

// redteamFloor is the least a flow's baseline counts as in a ratio: a flow of a few
// milliseconds is within the noise of a loaded machine.
const redteamFloor = 100 * time.Millisecond

type result struct {
	name    string
	effects []string
	leak    error
	flowErr error
	ratio   map[string]float64
	took    time.Duration
}

// TestRedTeam runs every case as each of its roles against the fleet (see the package's
// documentation) and prints the figures.
// REDTEAM_RUN, a regular expression, runs the cases whose names match it only (to try a
// case while writing it; make redteam runs them all).
func TestRedTeam(t *testing.T) {
	cs := cases
	if expr := os.Getenv("REDTEAM_RUN"); expr != "" {
		re, err := regexp.Compile(expr)
		if err != nil {
			t.Fatalf("REDTEAM_RUN: %v", err)
		}
		cs = slices.DeleteFunc(slices.Clone(cases), func(c Case) bool { return !re.MatchString(c.Name) })
		t.Logf("REDTEAM_RUN=%s: %d of %d cases", expr, len(cs), len(cases))
	}
	results, all, took := runCases(t, startFleet(t), cs)
	for _, r := range results {
		if len(r.effects) > 0 || r.leak != nil || r.flowErr != nil {
			t.Errorf("%s: hostB-visible effects %v; leak %v; hostB's flows %v", r.name, r.effects, r.leak, r.flowErr)
		}
		for k, v := range r.ratio {
			if v > 2 {
				t.Errorf("%s: hostB's %s took %.2fx its baseline", r.name, k, v)
			}
		}
	}
	printResults("red team", results, all, took)
}

// The control run: the direct get relay with both stores' users in one NATS account, as
// in a fleet of layout 2 (the same permissions, this version's streams): the relay
// overwrites hostB's values there, and the runner sees it. Without this, a suite that
// cannot see a relay's effect would pass as well. (The bridge answer's relay is stopped by
// the worker's permissions, which no longer allow responses: in one account too.)
func TestRedTeamOneAccountControl(t *testing.T) {
	var relays []Case
	for _, c := range cases {
		if strings.HasPrefix(c.Name, "a direct get of hostA's own value") {
			relays = append(relays, c)
		}
	}
	if len(relays) != 1 {
		t.Fatalf("%d relay cases", len(relays))
	}
	f := startFleetIn(t, true)
	f.flowTimeout = 15 * time.Second // hostB's flows are expected to fail here
	results, all, took := runCases(t, f, relays)
	for _, r := range results {
		if len(r.effects) == 0 {
			t.Errorf("%s in one account: no hostB-visible effect seen", r.name)
		}
	}
	printResults("control (one account)", results, all, took)
}

// runCases runs cs (each as each of its roles) and returns the results.
func runCases(t *testing.T, f *fleet, cs []Case) (results []result, all []Case, took time.Duration) {
	ctx := context.Background()
	base := map[string][]time.Duration{}
	for range flowRounds {
		f.next = f.newSession("hostB")
		r, err := f.hostBRound(ctx)
		if err != nil {
			t.Fatalf("hostB's flows without an attack: %v", err)
		}
		for k, v := range r {
			base[k] = append(base[k], v)
		}
		f.quiet("hostB")
	}
	baseline := map[string]time.Duration{}
	for k, v := range base {
		baseline[k] = median(v)
	}
	all = slices.Clone(cs)
	sort.SliceStable(all, func(i, j int) bool { return !all[i].Last && all[j].Last })
	suiteStart := time.Now()
	for _, c := range all {
		for _, role := range c.Roles {
			start := time.Now()
			res := result{name: c.Name + " (" + string(role) + ")", ratio: map[string]float64{}}
			f.quiet("hostB")
			f.next = f.newSession("hostB")
			before := f.snapshot(ctx)
			a := f.attacker(role)
			stop, leak := c.Attack(ctx, a)
			res.leak = leak
			res.effects = before.diff(f.snapshot(ctx))
			// hostB's flows, three times under the attack: the median of each against its
			// baseline's (a single run on a loaded machine is noise). A flow over 2x is timed
			// again, the attack still running, up to remeasures times: an attack that slows
			// hostB slows every measure, a moment of a loaded machine does not last.
			for try := 0; try <= remeasures; try++ {
				if try > 0 {
					t.Logf("%s: hostB's flows %v its baseline: timed again (%d of %d)", res.name, res.ratio, try, remeasures)
				}
				res.ratio, res.flowErr = f.timeFlows(ctx, baseline)
				if res.flowErr != nil || !overTwice(res.ratio) {
					break
				}
			}
			if stop != nil {
				stop()
			}
			a.NC.Close()
			a.adminA.Close()
			res.took = time.Since(start)
			results = append(results, res)
		}
	}
	return results, all, time.Since(suiteStart)
}

// flowRounds is how many times hostB's flows run for a figure (the median counts).
const flowRounds = 3

// remeasures is how many times more a figure over 2x is measured before it counts.
const remeasures = 2

// timeFlows times hostB's flows flowRounds times and returns each one's median against
// its baseline (at least redteamFloor).
func (f *fleet) timeFlows(ctx context.Context, baseline map[string]time.Duration) (map[string]float64, error) {
	under := map[string][]time.Duration{}
	var err error
	for range flowRounds {
		var times map[string]time.Duration
		times, err = f.hostBRound(ctx)
		for k, v := range times {
			under[k] = append(under[k], v)
		}
		if err != nil {
			break
		}
	}
	ratio := map[string]float64{}
	for k, v := range under {
		ratio[k] = float64(median(v)) / float64(max(baseline[k], redteamFloor))
	}
	return ratio, err
}

func overTwice(ratio map[string]float64) bool {
	for _, v := range ratio {
		if v > 2 {
			return true
		}
	}
	return false
}

func median(v []time.Duration) time.Duration {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// printResults prints the figures of a run.
func printResults(title string, results []result, all []Case, took time.Duration) {
	effects, leaks, worst := 0, 0, map[string]float64{}
	for _, r := range results {
		if len(r.effects) > 0 || r.flowErr != nil {
			effects++
		}
		if r.leak != nil {
			leaks++
		}
		for k, v := range r.ratio {
			worst[k] = max(worst[k], v)
		}
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "=== "+title+": case (hostA's role)\thostB effects\tleak\t"+strings.Join(flows, "\t")+"\ttook")
	for _, r := range results {
		line := fmt.Sprintf("%s\t%d\t%v", r.name, len(r.effects), r.leak != nil)
		for _, k := range flows {
			line += fmt.Sprintf("\t%.2fx", r.ratio[k])
		}
		fmt.Fprintln(tw, line+"\t"+r.took.Round(time.Millisecond).String())
	}
	_ = tw.Flush()
	var wl []string
	for _, k := range flows {
		wl = append(wl, fmt.Sprintf("%s %.2fx", k, worst[k]))
	}
	fmt.Printf("=== %s: %d runs of %d cases in %s; hostB-visible effects in %d, leaks %d; the slowest of hostB's flows under an attack, against its baseline: %s\n",
		title, len(results), len(all), took.Round(time.Second), effects, leaks, strings.Join(wl, ", "))
}

// TestSnapshotSeesChange: the snapshot the runner compares sees a change of each kind of
// hostB's state (a test of the test: a snapshot blind to a change would pass every case).
func TestSnapshotSeesChange(t *testing.T) {
	f := startFleet(t)
	ctx := context.Background()
	js, _ := jetstream.New(f.adminB)
	for _, c := range []struct {
		name   string
		change func() error
	}{
		{"a prepared value", func() error {
			_, err := js.Publish(ctx, "$KV."+wire.BucketPrepared+".hostB.x", []byte("x"))
			return err
		}},
		{"a job", func() error {
			_, err := js.Publish(ctx, wire.JobSubject("hostB", "x", wire.KindCompact), []byte("{}"))
			return err
		}},
		{"a dead letter", func() error {
			_, err := js.Publish(ctx, wire.DLQSubject("hostB", "x"), []byte("{}"))
			return err
		}},
		{"an event", func() error {
			_, err := js.Publish(ctx, wire.JobEventSubject("hostB", "x", 9), []byte("{}"))
			return err
		}},
		{"a session file", func() error {
			return os.WriteFile(f.roots["hostB"]+"/"+sourceSession, []byte("x"), 0o644)
		}},
		{"a consumer", func() error {
			_, err := js.CreateConsumer(ctx, wire.StreamEvents, jetstream.ConsumerConfig{Durable: "x"})
			return err
		}},
	} {
		before := f.snapshot(ctx)
		if err := c.change(); err != nil {
			t.Fatal(err)
		}
		// A job is hostB's worker's at once: delivered, refused and dead-lettered, its event
		// published; between the delivery and the dead letter neither is in a stream. What
		// the change left is seen once it lands.
		seen := false
		for deadline := time.Now().Add(10 * time.Second); !seen && time.Now().Before(deadline); {
			seen = len(before.diff(f.snapshot(ctx))) > 0
		}
		if !seen {
			t.Errorf("%s changed, the snapshot saw nothing", c.name)
		}
	}
}
