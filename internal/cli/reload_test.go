package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/compactor-dev/compactor/internal/waitfor"

	"github.com/nats-io/nats.go"

	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/internal/natstest"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/wire"
)

// SIGHUP reloads what can change safely, in a real process with real signals: the model,
// the key (its file read again) and the log level change for the next summary; a setting
// that needs a restart is named and kept; a configuration that does not parse is refused
// and the running one kept. The process keeps running through all of it (SIGHUP used to
// end it).
func TestSIGHUPReloads(t *testing.T) {
	t.Parallel()
	bin, _ := compactorBinary(t)
	url := natstest.StartServer(t).ClientURL()
	llm := fakellm.Start(t)
	store, files := overBudgetStore(t, 1)
	dir := t.TempDir()
	keyFile, cfgFile := filepath.Join(dir, "key"), filepath.Join(dir, "compactor.json")
	write := func(path, content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	config := func(model, level string, concurrency int) string {
		b, _ := json.Marshal(map[string]any{"setup": true, "nats-url": url, "store": []string{"default=" + store}, "data-dir": filepath.Join(dir, "data"),
			"idle": "0s", "sweep-every": "1h", "summarizer": "openai", "base-url": llm.URL(), "model": model, "api-key-file": keyFile,
			"log-level": level, "log-format": "json", "context-window": 20000, "keep-recent-tokens": 2000, "concurrency": concurrency})
		return string(b)
	}
	write(keyFile, "key-1\n")
	write(cfgFile, config("model-a", "info", 4))
	p := startProcess(t, bin, "run", "--config", cfgFile)
	waitfor.Until(t, "the first session compacted with the first settings", func() bool {
		if p.Exited() {
			t.Fatalf("run exited (%d):\n%s", p.Code(), p.logs.String())
		}
		n, _ := compactions(t, files)
		return n == 1
	})

	write(keyFile, "key-2\n")
	write(cfgFile, config("model-b", "warn", 8))
	p.signal(t, syscall.SIGHUP)
	p.waitLog(t, "the reload", "settings reloaded", "--model", "--log-level")
	p.waitLog(t, "the setting that needs a restart named", "take effect at the next restart", "--concurrency")

	// A second session, queued by a client now: the reloaded summarizer writes its summary.
	second := filepath.Join(store, "--home-dev-p--", "second.jsonl")
	src, err := os.ReadFile(liveSrc)
	if err != nil {
		t.Fatal(err)
	}
	sid := "019d9999-0000-7000-8000-000000000002"
	hdrLine, rest, _ := strings.Cut(string(src), "\n")
	var hdr map[string]any
	if err := json.Unmarshal([]byte(hdrLine), &hdr); err != nil {
		t.Fatal(err)
	}
	hdr["id"] = sid
	h, _ := json.Marshal(hdr)
	write(second, string(h)+"\n"+rest)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	res, err := fleetops.Enqueue(context.Background(), nc, wire.Job{Kind: wire.KindCompact, Store: "default",
		Path: "--home-dev-p--/second.jsonl", SessionID: sid}, true, waitfor.HangGuard)
	if err != nil {
		t.Fatal(err)
	}
	if res.Event.Outcome != pipeline.OutcomeDone || res.Event.LLMModel != "model-b" {
		t.Fatalf("the job after the reload: %+v", res.Event)
	}
	reqs := llm.Requests()
	last := reqs[len(reqs)-1]
	if reqs[0].Model != "model-a" || reqs[0].Header.Get("Authorization") != "Bearer key-1" ||
		last.Model != "model-b" || last.Header.Get("Authorization") != "Bearer key-2" {
		t.Errorf("requests: first %s %q, last %s %q; want model-a with key-1, then model-b with key-2",
			reqs[0].Model, reqs[0].Header.Get("Authorization"), last.Model, last.Header.Get("Authorization"))
	}
	if hasLine(p.logs.String(), `"msg":"job done"`, sid) {
		t.Error("an info line was logged after the log level was reloaded as warn")
	}

	write(cfgFile, "{not json")
	p.signal(t, syscall.SIGHUP)
	p.waitLog(t, "the broken configuration refused", "reload refused", "the running ones are kept")
	if p.Exited() {
		t.Fatalf("run exited after SIGHUP:\n%s", p.logs.String())
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.Await(t); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.logs.String())
	}
}

// A SIGHUP with nothing changed reports no change (the first one used to report settings
// that the start had filled in with defaults, --api-key-env among them, as changed).
func TestSIGHUPNothingChanged(t *testing.T) {
	t.Parallel()
	bin, _ := compactorBinary(t)
	url := natstest.StartServer(t).ClientURL()
	p := startProcess(t, bin, "run", "--setup", "--nats-url", url, "--store", "default="+t.TempDir(), "--data-dir", t.TempDir(),
		"--log-format", "json", "--summarizer", "openai", "--base-url", "http://127.0.0.1:1/v1", "--model", "m", "--spend-limit", "1000/hour")
	p.waitLog(t, "the service ready", "compactor pipeline ready")
	for i := range 2 {
		p.signal(t, syscall.SIGHUP)
		var line string
		waitfor.Until(t, "the reload", func() bool {
			n := 0
			for l := range strings.Lines(p.logs.String()) {
				if strings.Contains(l, "settings reloaded") {
					if n == i {
						line = l
						return true
					}
					n++
				}
			}
			return false
		})
		var rec struct {
			Changed []string `json:"changed"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if len(rec.Changed) != 0 {
			t.Errorf("reload %d with nothing changed reports %v as changed:\n%s", i+1, rec.Changed, line)
		}
		if strings.Contains(p.logs.String(), "take effect at the next restart") {
			t.Errorf("reload %d with nothing changed names settings that need a restart:\n%s", i+1, p.logs.String())
		}
	}
}
