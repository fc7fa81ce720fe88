package storepath

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
	if got, err := Resolve(root, "a/s.jsonl"); err != nil || got != filepath.Join(root, "a", "s.jsonl") {
		t.Errorf("plain: %s %v", got, err)
	}
	if got, err := Resolve(root, "a/../in.jsonl"); err != nil || got != filepath.Join(root, "a", "s.jsonl") {
		t.Errorf("symlink inside: %s %v", got, err)
	}
	for _, bad := range []string{"", "/etc/passwd.jsonl", "../x.jsonl", "out.jsonl", "escdir/o.jsonl", "a", "a/s.json"} {
		if _, err := Resolve(root, bad); !errors.Is(err, ErrUnsafePath) {
			t.Errorf("%q: %v, want ErrUnsafePath", bad, err)
		}
	}
	if _, err := Resolve(root, "nope.jsonl"); !errors.Is(err, ErrNotExist) {
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
	if _, _, err := Refind(root, "old.jsonl", id); !errors.Is(err, ErrNotExist) {
		t.Fatalf("header mismatch: %v", err)
	}
	write("--q--/renamed_"+id+".jsonl", id)
	rel, abs, err := Refind(root, "old.jsonl", id)
	if err != nil || rel != "--q--/renamed_"+id+".jsonl" || abs != filepath.Join(root, rel) {
		t.Fatalf("refind: %q %q %v", rel, abs, err)
	}
	write("--r--/copy_"+id+".jsonl", id)
	if _, _, err := Refind(root, "old.jsonl", id); err == nil || !strings.Contains(err.Error(), "copies are ambiguous") {
		t.Fatalf("copies: %v", err)
	}
}
