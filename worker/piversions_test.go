package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/engine"
	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/internal/pigolden"
	"github.com/compactor-dev/compactor/internal/waitfor"
	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/pipeline/pipelinetest"
	"github.com/compactor-dev/compactor/sessionio"
	"github.com/compactor-dev/compactor/wire"
)

// piBundle is a real worker (embedded NATS, a store in a temp dir, the real engine with a
// fake OpenAI-compatible endpoint over HTTP) with the --pi-unknown policy given, its metrics
// served on a random loopback port and its log kept.
type piBundle struct {
	*pipelinetest.Server
	logFile string
}

func newPiBundle(t *testing.T, policy string) *piBundle {
	t.Helper()
	llm := fakellm.Start(t)
	eng, err := engine.New(fakeOpenAI(t, llm.URL()), engine.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(t.TempDir(), "log")
	logs, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logs.Close() })
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	pv := NewPiVersions("", nil, policy, nil, logger)
	srv := pipelinetest.Start(t, pipelinetest.Options{Handler: Handler(eng, pv, nil, Queues{}), Configure: func(c *pipeline.Config) {
		c.MetricsAddr, c.Logger = "127.0.0.1:0", logger
	}})
	return &piBundle{Server: srv, logFile: logFile}
}

// log is what the worker has logged so far.
func (b *piBundle) log(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(b.logFile)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// compact copies the corpus file rel (a path under testdata/corpus) into the store under a
// session id of its own, and compacts it with Pi's own cut at keepRecentTokens 1000 by the
// rules of the release the job names. It returns the job's event and the file.
func (b *piBundle) compact(t *testing.T, rel, id, piVersion string) (*wire.Event, string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("../testdata/corpus", rel))
	if err != nil {
		t.Fatal(err)
	}
	s, err := sessionio.Parse(data, rel)
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.Replace(data, []byte(`"id":"`+s.Header.ID+`"`), []byte(`"id":"`+id+`"`), 1)
	file := filepath.Join(b.StoreDir, "--p--", id+".jsonl")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	j, err := b.JobFor(file)
	if err != nil {
		t.Fatal(err)
	}
	j.Policy, j.Counter, j.KeepRecentTokens, j.PiVersion = "pi", "estimate", 1000, piVersion
	r, err := b.Enqueue(context.Background(), j, true, waitfor.HangGuard)
	if err != nil {
		t.Fatal(err)
	}
	return r.Event, file
}

// firstKept is the firstKeptEntryId of the compaction a job appended (the file's leaf), and
// its tokensBefore.
func firstKept(t *testing.T, file string) (string, int) {
	t.Helper()
	s, err := sessionio.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	leaf := s.Get(s.LeafID())
	if leaf == nil || leaf.Type != sessionio.TypeCompaction {
		t.Fatalf("the leaf of %s is not a compaction", file)
	}
	return leaf.FirstKeptEntryID, int(leaf.TokensBefore)
}

// piCut is the first kept entry of Pi v's own cut at keep 1000 (its golden), and the
// tokensBefore Pi computes for it (what the context holds, by v's rules).
func piCut(t *testing.T, v, name string) (string, int) {
	t.Helper()
	var g struct {
		Prepared         bool   `json:"prepared"`
		FirstKeptEntryID string `json:"firstKeptEntryId"`
		TokensBefore     int    `json:"tokensBefore"`
	}
	if err := pigolden.Load(v, name, "cut-1000", &g); err != nil || !g.Prepared {
		t.Fatalf("golden of Pi %s, %s: prepared %v, %v", v, name, g.Prepared, err)
	}
	return g.FirstKeptEntryID, g.TokensBefore
}

// TestJobFollowsItsPiRelease: a job that names its agent's Pi release is worked with that
// release's rules, one range after another, each on a session where the neighbouring range
// cuts elsewhere or counts another context (the job's cut and tokensBefore are Pi's own at
// keepRecentTokens 1000, its golden):
//
//   - 0.75.5 weighs no image in a user message (UserImagesWeigh from 0.76.0): c08-images-l;
//   - 0.80.3 and 0.85.1 differ on c05-compactions-s: from 0.80.4 the previous compaction in
//     the range weighs its summary (ContextMessagesWeigh), and an older one kept in the range
//     is in the context again (ResentSummary), until 0.87;
//   - 1.5.2 (not pinned: served as the range of 1.6.0) applies context edits, 0.86.1 does not.
//
// 9.9.9 and a release compactor has not proven are in TestUnknownPiRelease.
func TestJobFollowsItsPiRelease(t *testing.T) {
	t.Parallel()
	b := newPiBundle(t, PiUnknownWarn)
	for i, c := range []struct {
		version, rel, golden, rulesOf, neighbour string
	}{
		{"0.75.5", "gen-0.73.1/c08-images-l.jsonl", "gen-0.73.1-c08-images-l", "0.75.5", "0.78.0"},
		{"0.80.3", "gen-0.73.1/c05-compactions-s.jsonl", "gen-0.73.1-c05-compactions-s", "0.80.3", "0.85.1"},
		{"0.85.1", "gen-0.73.1/c05-compactions-s.jsonl", "gen-0.73.1-c05-compactions-s", "0.85.1", "0.80.3"},
		{"0.85.1", "gen-0.73.1/c05-compactions-s.jsonl", "gen-0.73.1-c05-compactions-s", "0.85.1", "1.0.3"},
		{"1.5.2", "gen-1.6.0/n02-context-edits-s.jsonl", "gen-1.6.0-n02-context-edits-s", "1.6.0", "0.86.1"},
	} {
		t.Run(c.version+"/"+c.golden+"/not-"+c.neighbour, func(t *testing.T) {
			want, wantTokens := piCut(t, c.rulesOf, c.golden)
			other, otherTokens := piCut(t, c.neighbour, c.golden)
			if want == other && wantTokens == otherTokens {
				t.Fatalf("Pi %s and %s cut %s alike at %s (%d tokens): the test would not tell their rules apart", c.rulesOf, c.neighbour, c.golden, want, wantTokens)
			}
			ev, file := b.compact(t, c.rel, "019b0000-0000-7000-8000-00000000000"+string(rune('a'+i)), c.version)
			if ev.Outcome != pipeline.OutcomeDone || ev.PiUnknown != "" {
				t.Fatalf("event %+v", ev)
			}
			if got, tokens := firstKept(t, file); got != want || tokens != wantTokens {
				t.Fatalf("Pi %s job kept from %s, tokensBefore %d; Pi %s's own cut keeps from %s, %d (Pi %s's from %s, %d)",
					c.version, got, tokens, c.rulesOf, want, wantTokens, c.neighbour, other, otherTokens)
			}
		})
	}
	if strings.Contains(b.log(t), "unknown Pi release") {
		t.Errorf("a known release was logged as unknown:\n%s", b.log(t))
	}
}

// TestUnknownPiRelease: a job for Pi 9.9.9, newer than every release compactor knows, is
// worked with the newest release's rules by default, and says so: a warning in the log, the
// metric compactor_pi_version_unknown_total{store,version} and piUnknown in its event. With
// --pi-unknown refuse it is skipped, naming the release, and nothing is written; it is
// counted all the same. A malformed version never reaches a worker.
func TestUnknownPiRelease(t *testing.T) {
	t.Parallel()
	const rel, golden = "gen-1.6.0/n02-context-edits-s.jsonl", "gen-1.6.0-n02-context-edits-s"
	t.Run("warn", func(t *testing.T) {
		t.Parallel()
		b := newPiBundle(t, PiUnknownWarn)
		ev, file := b.compact(t, rel, "019b0000-0000-7000-8000-0000000000f1", "9.9.9")
		if ev.Outcome != pipeline.OutcomeDone || ev.PiUnknown != "9.9.9" {
			t.Fatalf("event %+v, want done with piUnknown 9.9.9", ev)
		}
		got, tokens := firstKept(t, file)
		if want, wantTokens := piCut(t, pi.Latest.String(), golden); got != want || tokens != wantTokens {
			t.Fatalf("kept from %s, tokensBefore %d; the newest release's cut keeps from %s, %d", got, tokens, want, wantTokens)
		}
		if !regexp.MustCompile(`level=WARN msg="unknown Pi release" store=default pi_version=9\.9\.9 warning="Pi 9\.9\.9 is newer than every release compactor knows`).MatchString(b.log(t)) {
			t.Errorf("no warning in the log:\n%s", b.log(t))
		}
		if n := b.metric(t, `compactor_pi_version_unknown_total{store="default",version="9.9.9"}`); n != 1 {
			t.Errorf("metric = %v, want 1", n)
		}
	})
	t.Run("refuse", func(t *testing.T) {
		t.Parallel()
		b := newPiBundle(t, PiUnknownRefuse)
		data, _ := os.ReadFile(filepath.Join("../testdata/corpus", rel))
		ev, file := b.compact(t, rel, "019b0000-0000-7000-8000-0000000000f2", "9.9.9")
		if ev.Outcome != pipeline.OutcomeSkipped || ev.PiUnknown != "9.9.9" || !strings.Contains(ev.Reason, "Pi 9.9.9 is newer than every release compactor knows") ||
			!strings.Contains(ev.Reason, "--pi-unknown refuse") {
			t.Fatalf("event %+v, want skipped naming 9.9.9 and the policy", ev)
		}
		if after, _ := os.ReadFile(file); len(after) != len(data) {
			t.Fatalf("the file changed: %d bytes, was %d", len(after), len(data))
		}
		if n := b.metric(t, `compactor_pi_version_unknown_total{store="default",version="9.9.9"}`); n != 1 {
			t.Errorf("metric = %v, want 1", n)
		}
	})
	t.Run("malformed", func(t *testing.T) {
		t.Parallel()
		for _, v := range []string{"9.9", "not-a-version", strings.Repeat("9", 40), "1.6.0;rm"} {
			j := wire.Job{V: wire.JobVersion, Kind: wire.KindCompact, Store: "default", Path: "a.jsonl", SessionID: "s", PiVersion: v}
			if err := j.Validate(); v != "9.9" && (err == nil || !strings.Contains(err.Error(), "piVersion")) {
				t.Errorf("piVersion %q: %v", v, err)
			} else if v == "9.9" && err != nil {
				t.Errorf("piVersion 9.9 (x.y) refused: %v", err)
			}
		}
	})
}

// metric reads one sample from the service's /metrics (0 when it is not there).
func (b *piBundle) metric(t *testing.T, sample string) float64 {
	t.Helper()
	var addr string
	waitfor.Until(t, "the metrics address", func() bool {
		if a := b.Service.MetricsAddr(); a != nil {
			addr = a.String()
			return true
		}
		return false
	})
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			var n float64
			if err := json.Unmarshal([]byte(rest), &n); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return n
		}
	}
	return 0
}
