package jsjson

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"unicode/utf8"
)

// FuzzCanonical checks Canonical against itself and against encoding/json. Seeds live in
// testdata/fuzz/FuzzCanonical; the Node-generated golden inputs are added too.
//
//	go test -run=NONE -fuzz=FuzzCanonical -fuzztime=60s ./sessionio/jsjson
func FuzzCanonical(f *testing.F) {
	for _, c := range loadGolden(f).Values {
		f.Add(unhex(f, c.InputHex))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := Canonical(nil, data)
		n, lerr := CanonicalLen(data)
		if (err == nil) != (lerr == nil) {
			t.Fatalf("Canonical err %v but CanonicalLen err %v", err, lerr)
		}
		// Both accept exactly RFC 8259 JSON (bytes inside strings are not validated by
		// encoding/json either) with the same depth limit.
		if valid := json.Valid(data); valid != (err == nil) {
			t.Fatalf("json.Valid = %v but Canonical err = %v for %q", valid, err, data)
		}
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("output is not valid JSON: %q", out)
		}
		if !utf8.Valid(out) {
			t.Fatalf("output is not valid UTF-8: %q", out)
		}
		again, err := Canonical(nil, out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent:\n in  %q\n out %q\n 2nd %q (%v)", data, out, again, err)
		}
		if u := UTF16Len(string(out)); n != u {
			t.Fatalf("CanonicalLen = %d, UTF16Len(output) = %d for %q", n, u, out)
		}
		// Same data model as encoding/json (which also keeps the last of repeated keys),
		// when its different handling of invalid UTF-8 cannot interfere.
		var a, b any
		if utf8.Valid(data) && json.Unmarshal(data, &a) == nil {
			if err := json.Unmarshal(out, &b); err != nil || !reflect.DeepEqual(a, b) {
				t.Fatalf("value changed: %q → %q (%v)", data, out, err)
			}
		}
	})
}

// units decodes s to UTF-16 code units from the start, as the reference for CompareUTF16
// (which skips the common prefix).
func units(s string) []rune {
	var out []rune
	u := unitReader{s: s}
	for {
		c, ok := u.next()
		if !ok {
			return out
		}
		out = append(out, c)
	}
}

// FuzzStrings checks the string functions against each other on arbitrary bytes.
func FuzzStrings(f *testing.F) {
	for _, s := range []string{"", "a\xed\xa0\x80b", "\xed\xa0\xbd\xed\xb8\x80", "\U0001F600\uFFFF", "x\xe2\x82y", "\x00\x1f\"\\\u2028"} {
		f.Add(s, "\uE000")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		lit := AppendString(nil, a)
		if !json.Valid(lit) || !utf8.Valid(lit) {
			t.Fatalf("AppendString(%q) = %q is not valid JSON/UTF-8", a, lit)
		}
		back, err := Unquote(lit)
		if err != nil {
			t.Fatalf("Unquote(AppendString(%q)): %v", a, err)
		}
		if again := AppendString(nil, back); string(again) != string(lit) {
			t.Fatalf("round trip of %q: %q then %q", a, lit, again)
		}
		if UTF16Len(a) != UTF16Len(back) || UTF16Len(a) != len(units(a)) {
			t.Fatalf("UTF16Len(%q) = %d, after round trip %d, units %d", a, UTF16Len(a), UTF16Len(back), len(units(a)))
		}
		if CompareUTF16(a, back) != 0 {
			t.Fatalf("CompareUTF16(%q, %q) != 0", a, back)
		}
		n, err := CanonicalLen(lit)
		if err != nil || n != UTF16Len(string(lit)) {
			t.Fatalf("CanonicalLen(%q) = %d, %v; want %d", lit, n, err, UTF16Len(string(lit)))
		}
		if got, want := CompareUTF16(a, b), slices.Compare(units(a), units(b)); got != want {
			t.Fatalf("CompareUTF16(%q, %q) = %d, want %d", a, b, got, want)
		}
	})
}
