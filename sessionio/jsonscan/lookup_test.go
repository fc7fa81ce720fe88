package jsonscan

import "testing"

// TestLookup: a key is matched as JSON.parse reads it (escapes decoded) and the last member
// of a name wins, as with Get for keys without escapes.
func TestLookup(t *testing.T) {
	obj := []byte(`{"summary":"a","\u0073ummary":"b","content":[1],"tokensBefore":7,"x\"y":null}`)
	ms := TrustedMembers(obj, nil)
	for key, want := range map[string]string{"summary": `"b"`, "content": `[1]`, "tokensBefore": `7`, `x"y`: `null`, "absent": ``} {
		if got := string(Lookup(ms, key)); got != want {
			t.Errorf("Lookup(%q) = %s, want %s", key, got, want)
		}
	}
	if got := string(Get(ms, "summary")); got != `"a"` {
		t.Errorf("Get compares keys as written: %s", got)
	}
}

// TestNumber: a JSON number literal decodes; other values and numbers a float64 cannot hold
// do not.
func TestNumber(t *testing.T) {
	for raw, want := range map[string]float64{"0": 0, "-1.5": -1.5, "1e3": 1000, "17": 17} {
		if got, ok := Number([]byte(raw)); !ok || got != want {
			t.Errorf("Number(%s) = %v, %v", raw, got, ok)
		}
	}
	for _, raw := range []string{"", `"1"`, "null", "true", "1e999", "[1]"} {
		if _, ok := Number([]byte(raw)); ok {
			t.Errorf("Number(%s) accepted", raw)
		}
	}
}
