package sessionio

import (
	"bytes"
	"encoding/json"
	"github.com/compactor-dev/compactor/sessionio/jsonscan"
	"reflect"
	"strings"
	"testing"
)

// FuzzScanMatchesEncodingJSON: the one-pass scanner accepts exactly what encoding/json
// accepts, and finds the same members (last duplicate wins) with the same raw values.
func FuzzScanMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{
		hdr, user("a", "", "hi"), asst("b", "a", "yo"), `{}`, `[]`, `42`, `"s"`, `null`, ` {"a":1} `,
		`{"a":1,"a":2}`, `{"k\u0065y":[1,{"x":"\ud800"}]}`, `{"a":-0.5e+10,"b":true,"c":false,"d":null}`,
		`{"a":01}`, `{"a":"\x"}`, "{\"a\":\"\x01\"}", `{"a":[1,]}`, `{"a" 1}`, `{"a":1}x`, "{\"a\":\"\xff\"}",
		`{"a":1.}`, `{"a":.5}`, `{"a":1e}`, `{"a":"\u12"}`, `{"a":{"b":{"c":[[[]]]}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"message":{},"message":{"role":"x","content":[{"a":{}}]},"z":{"message":{"k":1}}}`))
	f.Add([]byte(`{"message":{"a":{"b":[]},"c":"d"},"e":{}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ms, notObject, err := jsonscan.ScanObject(b, nil)
		ems, msg, msgVal, eNotObject, eErr := jsonscan.ScanEntry(b, nil, nil)
		if (eErr == nil) != (err == nil) || eNotObject != notObject || len(ems) != len(ms) {
			t.Fatalf("ScanEntry and ScanObject disagree on %q", b)
		}
		if msgVal != nil {
			if want := jsonscan.TrustedMembers(msgVal, nil); !reflect.DeepEqual(msg, want) && !(len(msg) == 0 && len(want) == 0) {
				t.Fatalf("message members %q, want %q", msg, want)
			}
		}
		valid := json.Valid(b)
		if (err == nil) != valid {
			t.Fatalf("scanner says err=%v, encoding/json says valid=%v for %q", err, valid, b)
		}
		if !valid {
			return
		}
		isObject := bytes.TrimLeft(b, " \t\r\n")[0] == '{'
		if notObject == isObject {
			t.Fatalf("notObject=%v for %q", notObject, b)
		}
		if !isObject {
			return
		}
		var want map[string]json.RawMessage
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		got := map[string][]byte{}
		for _, m := range ms {
			var k string
			if err := json.Unmarshal(append(append([]byte{'"'}, m.Key...), '"'), &k); err != nil {
				t.Fatalf("key %q: %v", m.Key, err)
			}
			got[k] = m.Val
		}
		if len(got) != len(want) {
			t.Fatalf("members %d, encoding/json %d for %q", len(got), len(want), b)
		}
		for k, v := range want {
			if !bytes.Equal(got[k], v) {
				t.Fatalf("member %q = %q, encoding/json %q", k, got[k], v)
			}
		}
	})
}

// refMessage is the reference decoding by encoding/json, for FuzzDecodeMessage.
type refMessage struct {
	Role    string `json:"role"`
	Content any    `json:"content"`
	Usage   *Usage `json:"usage"`
	// numbers and flags
	Timestamp float64 `json:"timestamp"`
	IsError   bool    `json:"isError"`
	Command   string  `json:"command"`
	Output    string  `json:"output"`
	Summary   string  `json:"summary"`
}

type refBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// FuzzDecodeMessage: the hand-written message decoder gives what encoding/json gives for
// every message encoding/json decodes without a type error.
func FuzzDecodeMessage(f *testing.F) {
	f.Add([]byte(`{"role":"user","content":"h\u00e9\ud83d\ude00 \ud800 x\n","timestamp":1}`))
	f.Add([]byte(`{"role":"assistant","content":[{"type":"text","text":"a\"b"},{"type":"toolCall","name":"read","arguments":{"path":"x"}}],"usage":{"input":1,"output":2,"cacheRead":0,"cacheWrite":0,"totalTokens":3},"timestamp":2e3}`))
	f.Add([]byte(`{"role":"toolResult","content":[{"type":"image","data":"AAAA"}],"isError":true,"role":"bashExecution","command":"ls","output":"\xff\xfe"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ms, notObject, err := jsonscan.ScanObject(b, nil)
		if err != nil || notObject {
			return
		}
		// encoding/json matches keys case-insensitively ("Content" fills content); JSON.parse
		// and compactor do not. Such inputs have no common answer.
		_ = ms
		lower := make([]byte, len(b)) // ASCII-only lowering keeps offsets (bytes.ToLower does not on invalid UTF-8)
		for i, c := range b {
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			lower[i] = c
		}
		for _, key := range []string{"role", "content", "usage", "timestamp", "isError", "command", "output", "summary", "type", "text", "thinking", "name", "arguments", "input", "cacheRead", "cacheWrite", "totalTokens"} {
			q := []byte(`"` + strings.ToLower(key) + `"`)
			for i := 0; ; {
				j := bytes.Index(lower[i:], q)
				if j < 0 {
					break
				}
				if string(b[i+j:i+j+len(q)]) != `"`+key+`"` {
					return
				}
				i += j + 1
			}
		}
		var ref refMessage
		if json.Unmarshal(b, &ref) != nil {
			return
		}
		got, err := decodeMessage(b, false)
		if err != nil {
			// Our decoder is stricter on block fields encoding/json ignored here (any).
			return
		}
		if got.Role != ref.Role || got.Timestamp != ref.Timestamp || got.IsError != ref.IsError ||
			got.Command != ref.Command || got.Output != ref.Output || got.Summary != ref.Summary {
			t.Fatalf("scalar fields differ for %q: %+v vs %+v", b, got, ref)
		}
		if (got.Usage == nil) != (ref.Usage == nil) || got.Usage != nil && *got.Usage != *ref.Usage {
			t.Fatalf("usage differs for %q", b)
		}
		switch c := ref.Content.(type) {
		case string:
			if !got.Content.IsString || got.Content.Text != c {
				t.Fatalf("string content differs for %q: %q vs %q", b, got.Content.Text, c)
			}
		case []any:
			raw, _ := json.Marshal(c)
			var blocks []refBlock
			if json.Unmarshal(raw, &blocks) != nil || bytes.Contains(bytes.ToLower(raw), []byte(`"type"`)) && !bytes.Contains(raw, []byte(`"type"`)) {
				return
			}
			if len(blocks) != len(got.Content.Blocks) {
				t.Fatalf("block count differs for %q", b)
			}
			for i, rb := range blocks {
				gb := got.Content.Blocks[i]
				if gb.Type != rb.Type || gb.Text != rb.Text || gb.Thinking != rb.Thinking || gb.Name != rb.Name {
					t.Fatalf("block %d differs for %q: %+v vs %+v", i, b, gb, rb)
				}
			}
		}
	})
}
