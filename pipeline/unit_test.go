package pipeline

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
		res     Result
		err     error
		attempt int
		want    Outcome
		delay   time.Duration
		reason  string
	}{
		{"nil error is done", Result{}, nil, 1, OutcomeDone, 0, ""},
		{"result skipped", Result{Outcome: OutcomeSkipped, Reason: "v1"}, nil, 1, OutcomeSkipped, 0, "v1"},
		{"skip error", Result{}, fmt.Errorf("wrap: %w", Skip("already compacted")), 1, OutcomeSkipped, 0, "already compacted"},
		{"permanent", Result{}, Permanent(errors.New("x")), 1, OutcomeFailed, 0, "x"},
		{"permanent interface, wrapped", Result{}, fmt.Errorf("llm: %w", fatal{}), 1, OutcomeFailed, 0, "bad request"},
		{"unknown error retries with backoff", Result{}, errors.New("io"), 3, OutcomeRetry, 4 * time.Second, "io"},
		{"hint longer than backoff wins", Result{}, fmt.Errorf("llm: %w", hinted{30 * time.Second}), 1, OutcomeRetry, 30 * time.Second, "rate limited"},
		{"hint shorter than backoff loses", Result{}, RetryAfter(time.Millisecond, errors.New("x")), 2, OutcomeRetry, 2 * time.Second, "x"},
		{"last delivery turns retry into failure", Result{}, errors.New("io"), 5, OutcomeFailed, 0, "max deliveries (5) exhausted"},
		{"unknown outcome fails", Result{Outcome: "weird"}, nil, 1, OutcomeFailed, 0, "unknown outcome"},
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
	for _, bad := range []string{`{`, `{"v":3,"kind":"compact","store":"s","path":"a.jsonl","sessionId":"x"}`,
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
