package sessionio

import (
	"bytes"
	"encoding/json"
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
	f.Fuzz(func(t *testing.T, b []byte) {
		ms, notObject, err := scanObject(b, nil)
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
			if err := json.Unmarshal(append(append([]byte{'"'}, m.key...), '"'), &k); err != nil {
				t.Fatalf("key %q: %v", m.key, err)
			}
			got[k] = m.val
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
