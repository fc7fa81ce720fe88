package pisession

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Lines appended as Pi appends them end the file, each with its newline, and the last
// one's id is read back.
func TestAppendThenLastEntryID(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "s.jsonl")
	if err := os.WriteFile(file, []byte(`{"type":"session","id":"s1"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{`{"type":"message","id":"a"}`, `{"type":"message","id":"b","parentId":"a"}`} {
		if err := Append(file, l); err != nil {
			t.Fatal(err)
		}
	}
	data, _ := os.ReadFile(file)
	if want := `{"type":"session","id":"s1"}` + "\n" + `{"type":"message","id":"a"}` + "\n" + `{"type":"message","id":"b","parentId":"a"}` + "\n"; string(data) != want {
		t.Fatalf("the file after two appends:\n%s", data)
	}
	if id, err := LastEntryID(file); err != nil || id != "b" {
		t.Fatalf("LastEntryID: %q %v", id, err)
	}
}

// Append does not create a file (Pi's session exists before it appends), and a torn last
// line is an error naming the file.
func TestAppendAndReadRefuse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := Append(filepath.Join(dir, "none.jsonl"), "{}"); err == nil {
		t.Fatal("Append created a missing file")
	}
	torn := filepath.Join(dir, "torn.jsonl")
	if err := os.WriteFile(torn, []byte(`{"id":"a"}`+"\n"+`{"id":"b`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LastEntryID(torn); err == nil || !strings.Contains(err.Error(), torn) {
		t.Fatalf("LastEntryID of a torn line: %v", err)
	}
}
