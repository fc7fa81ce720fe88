//go:build chaos

package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactor-dev/compactor/internal/fakellm"
	"github.com/compactor-dev/compactor/internal/fulldisk"
	"github.com/compactor-dev/compactor/internal/pisession"
	"github.com/compactor-dev/compactor/sessionio"
)

// A session on a full file system: a 2 MiB tmpfs (mounted by the test, root only) holding a
// 443 KB Pi session, filled to its last block. `compactor compact` and `compactor
// branch-summary`, each with a 25 KB summary from the endpoint, must fail (exit 1, no space
// left on device) and leave the file byte for byte as it was, although its last page has
// room for part of the line (an unreserved write used to leave those bytes there, torn).
// Then space is freed and Pi appends its next line as it does (one write on an O_APPEND
// descriptor, no lock, from its in-memory leaf): the file must be the file before plus
// that line, and the real Pi (interop/pi/pi context) must load that line as its leaf.
//
// The restore entry (written when a Pi line lands between compactor's final check and its
// write) needs a line placed at that instant, which only a hook inside the append can do:
// sessionio/liveappend's TestAppendFullDisk covers it on a real full tmpfs too, and `make chaos` runs it
// with the real Pi.
func TestFullDisk(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "testdata", "corpus", "07-long-outputs.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	llm := newEndpoint(t)
	summary := strings.Repeat("The work so far, summarized at length for a disk that is full. ", 400)
	llm.llm.SetDefault(fakellm.Behavior{Text: summary})
	key, logs := keyFile(t), t.TempDir()
	page := int64(os.Getpagesize())

	for _, tc := range []struct {
		command string
		extra   []string
	}{
		{"compact", nil},
		{"branch-summary", []string{"--to", "45f5f796"}}, // the first assistant message: the rest of the path is the branch left
	} {
		t.Run(tc.command, func(t *testing.T) {
			mnt := fulldisk.Mount(t, 2<<20)
			p := filepath.Join(mnt, "--home-dev-acme--", "2026-01-01T00-00-00-000Z_019a68b3-b880-73de-830f-69583aef2c0c.jsonl")
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, src, 0o644); err != nil {
				t.Fatal(err)
			}
			old := time.Now().Add(-2 * time.Hour) // an idle session, not one whose turn is running
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
			s, err := sessionio.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			piLeaf := s.LeafID() // Pi's in-memory leaf: its next entry hangs from it
			free := fulldisk.Fill(t, mnt)
			before, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			requests := llm.llm.Count()

			args := append([]string{tc.command, p, "--json", "--summarizer", "openai", "--base-url", llm.url,
				"--model", "fake-model", "--api-key-file", key}, tc.extra...)
			c := compactor(t, logs, args...)
			code := c.Await(t)
			var res struct{ Outcome, Error string }
			out, _ := os.ReadFile(c.out)
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatalf("%s: exit %d, output %q: %v\n%s", tc.command, code, out, err, tail(c.log, 20))
			}
			after, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(after, before) {
				added := after[min(len(before), len(after)):]
				t.Fatalf("the failed %s changed the file: %d bytes before, %d after; added %q...", tc.command, len(before), len(after), added[:min(len(added), 100)])
			}
			if code != 1 || res.Outcome != "failed" || !strings.Contains(res.Error, "no space left on device") || !strings.Contains(res.Error, "nothing written") {
				t.Fatalf("%s on a full disk: exit %d, outcome %q, error %q; want exit 1, failed, no space left on device, nothing written", tc.command, code, res.Outcome, res.Error)
			}
			if llm.llm.Count() == requests {
				t.Fatalf("%s failed before it asked for a summary (%s): the append was never tried", tc.command, res.Error)
			}

			free()
			id := fmt.Sprintf("%08x", time.Now().UnixNano()&0xffffffff)
			now := time.Now().UTC()
			line := fmt.Sprintf(`{"type":"message","id":%q,"parentId":%q,"timestamp":%q,"message":{"role":"user","content":[{"type":"text","text":"And now the tests, please."}],"timestamp":%d}}`,
				id, piLeaf, now.Format("2006-01-02T15:04:05.000Z"), now.UnixMilli())
			if err := pisession.Append(p, line); err != nil {
				t.Fatal(err)
			}
			after, err = os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if want := string(before) + line + "\n"; string(after) != want {
				t.Fatalf("after Pi's next line the file is not the file before plus that line (%d bytes, want %d)", len(after), len(want))
			}
			pi := piContext(t, p)
			if pi.LeafID != id || len(pi.Messages) == 0 || !bytes.Contains(pi.Messages[len(pi.Messages)-1], []byte("And now the tests, please.")) {
				t.Fatalf("the real Pi's leaf is %q (want its new entry %s), its last message %s", pi.LeafID, id, lastOf(pi.Messages))
			}
			figures.add("full disk, %s: a %d-byte session on a full 2 MiB tmpfs (%d bytes of room in its last page), a %d-byte summary: exit 1 (%s); file unchanged; after freeing space Pi's next line landed intact and is the real Pi's leaf (%d messages in its context)",
				tc.command, len(before), page-int64(len(before))%page, len(summary), strings.ReplaceAll(res.Error, p, "FILE"), len(pi.Messages))
		})
	}
}

// piContext is what the real Pi (interop/pi/pi context) makes of a file: its leaf and its
// context's messages.
func piContext(t *testing.T, file string) (view struct {
	LeafID   string
	Messages []json.RawMessage
}) {
	t.Helper()
	cmd := exec.Command(piOracle, "context", file, "--compact")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("interop/pi/pi context %s: %v\n%s", file, err, stderr.String())
	}
	var raw struct {
		LeafID  string `json:"leafId"`
		Context struct {
			Messages []json.RawMessage `json:"messages"`
		} `json:"context"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Fatalf("interop/pi/pi context output: %v", err)
	}
	view.LeafID, view.Messages = raw.LeafID, raw.Context.Messages
	return view
}

func lastOf(ms []json.RawMessage) string {
	if len(ms) == 0 {
		return "(none)"
	}
	m := string(ms[len(ms)-1])
	return m[:min(len(m), 200)]
}
