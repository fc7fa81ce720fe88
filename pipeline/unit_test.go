package pipeline

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/wire"
)

type hinted struct{ d time.Duration }

func (h hinted) Error() string             { return "rate limited" }
func (h hinted) RetryAfter() time.Duration { return h.d }

type fatal struct{}

func (fatal) Error() string   { return "bad request" }
func (fatal) Permanent() bool { return true }

func TestClassify(t *testing.T) {
	t.Parallel()
	base, max := time.Second, 8*time.Second
	cases := []struct {
		name    string
		res     wire.Result
		err     error
		attempt int
		want    Outcome
		delay   time.Duration
		reason  string
	}{
		{"nil error is done", wire.Result{}, nil, 1, OutcomeDone, 0, ""},
		{"result skipped", wire.Result{Tally: wire.Tally{Outcome: OutcomeSkipped, Reason: "v1"}}, nil, 1, OutcomeSkipped, 0, "v1"},
		{"skip error", wire.Result{}, fmt.Errorf("wrap: %w", Skip("already compacted")), 1, OutcomeSkipped, 0, "already compacted"},
		{"permanent", wire.Result{}, Permanent(errors.New("x")), 1, OutcomeFailed, 0, "x"},
		{"permanent interface, wrapped", wire.Result{}, fmt.Errorf("llm: %w", fatal{}), 1, OutcomeFailed, 0, "bad request"},
		{"unknown error retries with backoff", wire.Result{}, errors.New("io"), 3, OutcomeRetry, 4 * time.Second, "io"},
		{"hint longer than backoff wins", wire.Result{}, fmt.Errorf("llm: %w", hinted{30 * time.Second}), 1, OutcomeRetry, 30 * time.Second, "rate limited"},
		{"hint shorter than backoff loses", wire.Result{}, RetryAfter(time.Millisecond, errors.New("x")), 2, OutcomeRetry, 2 * time.Second, "x"},
		{"last delivery turns retry into failure", wire.Result{}, errors.New("io"), 5, OutcomeFailed, 0, "max deliveries (5) exhausted"},
		{"unknown outcome fails", wire.Result{Tally: wire.Tally{Outcome: "weird"}}, nil, 1, OutcomeFailed, 0, "unknown outcome"},
	}
	for _, c := range cases {
		d := Classify(c.res, c.err, c.attempt, 5, base, max)
		if d.Outcome != c.want || d.Delay != c.delay || !strings.Contains(d.Reason, c.reason) {
			t.Errorf("%s: got %+v, want %s delay %s reason ~%q", c.name, d, c.want, c.delay, c.reason)
		}
	}
}

func TestRedeliveryDelay(t *testing.T) {
	t.Parallel()
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := RedeliveryDelay(i+1, time.Second, 10*time.Second); got != w {
			t.Errorf("RedeliveryDelay(%d) = %s, want %s", i+1, got, w)
		}
	}
	if got := RedeliveryDelay(200, time.Second, time.Hour); got != time.Hour {
		t.Errorf("no overflow: %s", got)
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	root, _ := filepath.EvalSymlinks(t.TempDir())
	out := t.TempDir()
	mk := func(p string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk(filepath.Join(root, "a", "s.jsonl"))
	mk(filepath.Join(out, "o.jsonl"))
	_ = os.Symlink(filepath.Join(root, "a", "s.jsonl"), filepath.Join(root, "in.jsonl"))
	_ = os.Symlink(filepath.Join(out, "o.jsonl"), filepath.Join(root, "out.jsonl"))
	_ = os.Symlink(out, filepath.Join(root, "escdir"))
	if got, err := resolve(root, "a/s.jsonl"); err != nil || got != filepath.Join(root, "a", "s.jsonl") {
		t.Errorf("plain: %s %v", got, err)
	}
	if got, err := resolve(root, "a/../in.jsonl"); err != nil || got != filepath.Join(root, "a", "s.jsonl") {
		t.Errorf("symlink inside: %s %v", got, err)
	}
	for _, bad := range []string{"", "/etc/passwd.jsonl", "../x.jsonl", "out.jsonl", "escdir/o.jsonl", "a", "a/s.json"} {
		if _, err := resolve(root, bad); !errors.Is(err, ErrUnsafePath) {
			t.Errorf("%q: %v, want ErrUnsafePath", bad, err)
		}
	}
	if _, err := resolve(root, "nope.jsonl"); !errors.Is(err, errNotExist) {
		t.Errorf("missing: %v, want errNotExist", err)
	}
}

// TestRefind finds a session file by its id when its path is gone, refuses copies (two
// files with the id) and files whose header holds another id.
func TestRefind(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	const id = "019a48fc-d300-72c8-a6b9-f316c6e71060"
	write := func(rel, hid string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(`{"type":"session","version":3,"id":"`+hid+`","timestamp":"x","cwd":"/"}`+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("--p--/2026-01-01T00-00-00-000Z_"+id+".jsonl", "other-id") // name matches, header does not
	if _, _, err := refind(root, "old.jsonl", id); !errors.Is(err, errNotExist) {
		t.Fatalf("header mismatch: %v", err)
	}
	write("--q--/renamed_"+id+".jsonl", id)
	rel, abs, err := refind(root, "old.jsonl", id)
	if err != nil || rel != "--q--/renamed_"+id+".jsonl" || abs != filepath.Join(root, rel) {
		t.Fatalf("refind: %q %q %v", rel, abs, err)
	}
	write("--r--/copy_"+id+".jsonl", id)
	if _, _, err := refind(root, "old.jsonl", id); err == nil || !strings.Contains(err.Error(), "copies are ambiguous") {
		t.Fatalf("copies: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := Config{Stores: []Store{{Name: "default", Dir: dir}}, DataDir: dir}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(c *Config){
		"Stores":              func(c *Config) { c.Stores = nil },
		"Stores[0].Name":      func(c *Config) { c.Stores[0].Name = "a.b" },
		"Stores[1].Name":      func(c *Config) { c.Stores = append(c.Stores, Store{Name: "default", Dir: dir}) },
		"Stores[0].Dir":       func(c *Config) { c.Stores[0].Dir = filepath.Join(dir, "missing") },
		"DataDir":             func(c *Config) { c.DataDir = "" },
		"Concurrency":         func(c *Config) { c.Concurrency = -1 },
		"MaxDeliver":          func(c *Config) { c.MaxDeliver = -2 },
		"LeaseTTL":            func(c *Config) { c.LeaseTTL = time.Millisecond },
		"NATS.User":           func(c *Config) { c.NATS.Password = "x" },
		"NATS.CredsFile":      func(c *Config) { c.NATS.CredsFile = filepath.Join(dir, "none.creds") },
		"choose one of":       func(c *Config) { c.NATS.Token, c.NATS.User = "t", "u" },
		"NATS.TLSCert/TLSKey": func(c *Config) { c.NATS.TLSCert = "x" },
	}
	for field, mut := range cases {
		c := good
		c.Stores = append([]Store(nil), good.Stores...)
		mut(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: got %v", field, err)
		}
	}
	if s := (NATSConfig{URL: "nats://h", User: "u", Password: "secret", Token: "tok"}).String(); strings.Contains(s, "secret") || strings.Contains(s, "tok ") {
		t.Errorf("secrets in %q", s)
	}
}
