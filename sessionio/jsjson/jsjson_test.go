package jsjson

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestWTF8Strings(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   string
		want string
		len  int
	}{
		{"lone high", "a\xed\xa0\x80b", `"a\ud800b"`, 3},
		{"lone low", "\xed\xbf\xbf", `"\udfff"`, 1},
		{"pair stored as two forms", "\xed\xa0\xbd\xed\xb8\x80", "\"\U0001F600\"", 2},
		{"low then high stay lone", "\xed\xb0\x80\xed\xa0\x80", `"\udc00\ud800"`, 2},
		{"truncated surrogate form", "\xed\xa0x", "\"\uFFFDx\"", 2},
		{"html and separators raw", "<>&/\u2028\u2029\x7f", "\"<>&/\u2028\u2029\x7f\"", 7},
		{"controls", "\x00\x1f\b\f\n\r\t\"\\", `"\u0000\u001f\b\f\n\r\t\"\\"`, 9},
		{"real U+FFFD stays", "\uFFFD", "\"\uFFFD\"", 1},
		{"invalid then fffd", "\xff\uFFFD", "\"\uFFFD\uFFFD\"", 2},
	}
	for _, c := range cases {
		if got := string(AppendString(nil, c.in)); got != c.want {
			t.Errorf("%s: AppendString(%q) = %q, want %q", c.name, c.in, got, c.want)
		}
		if got := UTF16Len(c.in); got != c.len {
			t.Errorf("%s: UTF16Len(%q) = %d, want %d", c.name, c.in, got, c.len)
		}
	}
	// The long ASCII fast path of UTF16Len must agree with the per-byte path.
	long := strings.Repeat("abcdefg\u00e9", 50) + "\U0001F600"
	if got, want := UTF16Len(long), 50*8+2; got != want {
		t.Errorf("UTF16Len(long) = %d, want %d", got, want)
	}
}

func TestUnquote(t *testing.T) {
	t.Parallel()
	ok := []struct{ lit, want string }{
		{`""`, ""},
		{`"plain"`, "plain"},
		{`"\ud800"`, "\xed\xa0\x80"},
		{`"\uDBFF\uDFFF"`, "\U0010FFFF"},
		{`"\ud800\ud800\udc00"`, "\xed\xa0\x80\U00010000"},
		{`"a\/b\"c\\d\b\f\n\r\t"`, "a/b\"c\\d\b\f\n\r\t"},
		{"\"\xed\xa0\x80\"", "\uFFFD\uFFFD\uFFFD"}, // raw surrogate bytes: invalid UTF-8
		{"\"\xe2\x82A\"", "\uFFFDA"},
	}
	for _, c := range ok {
		got, err := Unquote([]byte(c.lit))
		if err != nil || got != c.want {
			t.Errorf("Unquote(%q) = %q, %v; want %q", c.lit, got, err, c.want)
		}
	}
	bad := []string{``, `"`, `"abc`, `abc"`, `"a"b`, `"\x"`, `"\u12"`, `"\u12z4"`, "\"a\x01\"", `"\`, `'a'`}
	for _, lit := range bad {
		if got, err := Unquote([]byte(lit)); err == nil {
			t.Errorf("Unquote(%q) = %q, want error", lit, got)
		} else if se := (*SyntaxError)(nil); !errors.As(err, &se) {
			t.Errorf("Unquote(%q): error %v is not a *SyntaxError", lit, err)
		}
	}
}

func TestCompareUTF16(t *testing.T) {
	t.Parallel()
	cases := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"a", "", 1},
		{"", "a", -1},
		{"\U0001F600", "\uFFFF", -1},                  // 0xD83D < 0xFFFF although bytes say otherwise
		{"\uE000", "\U00010000", 1},                   // likewise
		{"\U00010000", "\xed\xa0\x80", 1},             // pair vs lone high: D800 DC00 > D800
		{"\xed\xa0\x80\xed\xb0\x80", "\U00010000", 0}, // same code units
		{"x\xff", "x\uFFFD", 0},                       // invalid byte reads as U+FFFD
		{"x\xe2\x82", "x\xe2\x82A", -1},
		{"é", "e", 1},
	}
	for _, c := range cases {
		if got := CompareUTF16(c.a, c.b); got != c.want {
			t.Errorf("CompareUTF16(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := CompareUTF16(c.b, c.a); got != -c.want {
			t.Errorf("CompareUTF16(%q, %q) = %d, want %d", c.b, c.a, got, -c.want)
		}
	}
}

func TestAppendNumber(t *testing.T) {
	t.Parallel()
	cases := []struct {
		f    float64
		want string
	}{
		{0, "0"}, {math.Copysign(0, -1), "0"}, {1, "1"}, {-1.5, "-1.5"}, {100, "100"},
		{1e21, "1e+21"}, {1e20, "100000000000000000000"}, {1e-7, "1e-7"}, {1e-6, "0.000001"},
		{1.5e300, "1.5e+300"}, {-1.25e-10, "-1.25e-10"}, {math.Float64frombits(0x3FD3333333333334), "0.30000000000000004"},
		{5e-324, "5e-324"}, {math.MaxFloat64, "1.7976931348623157e+308"},
		{12345678901234567890, "12345678901234567000"}, {9007199254740993, "9007199254740992"},
		{math.NaN(), "null"}, {math.Inf(1), "null"}, {math.Inf(-1), "null"},
	}
	for _, c := range cases {
		if got := string(AppendNumber([]byte("x"), c.f)); got != "x"+c.want {
			t.Errorf("AppendNumber(%v) = %s, want %s", c.f, got[1:], c.want)
		}
	}
}

func TestCanonicalErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in     string
		offset int
	}{
		{`{"a":1,}`, 7},
		{`[1,2`, 4},
		{`"ab` + "\x01" + `"`, 3},
		{`{"a" 1}`, 5},
		{`[01]`, 2},
		{`nul`, 3},
		{`[1] x`, 4},
	}
	for _, c := range cases {
		_, err := Canonical(nil, []byte(c.in))
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Canonical(%q): error %v, want *SyntaxError", c.in, err)
			continue
		}
		if se.Offset != c.offset {
			t.Errorf("Canonical(%q): offset %d, want %d (%v)", c.in, se.Offset, c.offset, err)
		}
	}
	deep := strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)
	if _, err := Canonical(nil, []byte(deep)); err == nil {
		t.Error("Canonical accepted nesting deeper than MaxDepth")
	}
	ok := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	if out, err := Canonical(nil, []byte(ok)); err != nil || string(out) != ok {
		t.Errorf("Canonical at MaxDepth: %v", err)
	}
}

// Canonical output is reused from the pool; results of earlier calls must not be
// overwritten by later ones.
func TestCanonicalIndependentResults(t *testing.T) {
	t.Parallel()
	a, err := Canonical(nil, []byte(`{"b":1,"a":2,"b":3}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Canonical(nil, []byte(`{"x":[1,2,3],"1":0}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != `{"b":3,"a":2}` || string(b) != `{"1":0,"x":[1,2,3]}` {
		t.Errorf("got %s and %s", a, b)
	}
}

type appenderFunc func([]byte) ([]byte, error)

func (f appenderFunc) AppendJS(dst []byte) ([]byte, error) { return f(dst) }

func TestMarshal(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		v    any
		want string
	}{
		{"nil", nil, "null"},
		{"scalars", []any{true, false, "s", 1.5, float32(0.1), 3, int64(-4), uint64(1 << 63), int8(1), uint16(2)},
			`[true,false,"s",1.5,0.10000000149011612,3,-4,9223372036854776000,1,2]`},
		{"omit in fields", Fields{{"type", "label"}, {"label", Omit{}}, {"parentId", nil}},
			`{"type":"label","parentId":null}`},
		{"omit in array is null", []any{1, Omit{}, 2}, `[1,null,2]`},
		{"index keys first", Fields{{"b", 1}, {"2", 2}, {"a", 3}, {"1", 4}}, `{"1":4,"2":2,"b":1,"a":3}`},
		{"repeated key", Fields{{"a", 1}, {"b", 2}, {"a", 3}}, `{"a":3,"b":2}`},
		{"map order", map[string]any{"b": 1, "a": 2, "10": 3, "9": 4, "\uFFFF": 5, "\U0001F600": 6},
			"{\"9\":4,\"10\":3,\"a\":2,\"b\":1,\"\U0001F600\":6,\"\uFFFF\":5}"},
		{"map string", map[string]string{"k": "<&>"}, `{"k":"<&>"}`},
		{"strings", []string{"a\u2028", "\xed\xa0\x80"}, "[\"a\u2028\",\"\\ud800\"]"},
		{"raw message", Fields{{"arguments", json.RawMessage(` { "z" : 1.0 , "0" : 1E2 } `)}}, `{"arguments":{"0":100,"z":1}}`},
		{"nested", []Fields{{{"k", []any{Fields{}, []any{}, map[string]any{}}}}}, `[{"k":[{},[],{}]}]`},
		{"appender", Fields{{"x", appenderFunc(func(d []byte) ([]byte, error) { return append(d, "42"...), nil })}}, `{"x":42}`},
		{"nan", math.NaN(), "null"},
	}
	for _, c := range cases {
		got, err := Marshal(c.v)
		if err != nil || string(got) != c.want {
			t.Errorf("%s: Marshal = %s, %v; want %s", c.name, got, err, c.want)
		}
	}
	for _, v := range []any{Omit{}, struct{}{}, []int{1}, json.RawMessage(`{`), Fields{{"a", make(chan int)}}} {
		if got, err := Marshal(v); err == nil {
			t.Errorf("Marshal(%T) = %s, want error", v, got)
		}
	}
}

// Marshal of Fields must agree with Canonical of the same object written as JSON text,
// whose expected output comes from node (golden "integer-like keys").
func TestMarshalMatchesCanonical(t *testing.T) {
	t.Parallel()
	text := `{"b":1,"a":2,"1":3,"0":4,"10":5,"01":6,"-1":7,"4294967294":8,"4294967295":9,"1.0":10,"2":11," 3":12,"3 ":13}`
	fs := Fields{{"b", 1}, {"a", 2}, {"1", 3}, {"0", 4}, {"10", 5}, {"01", 6}, {"-1", 7}, {"4294967294", 8},
		{"4294967295", 9}, {"1.0", 10}, {"2", 11}, {" 3", 12}, {"3 ", 13}}
	want, err := Canonical(nil, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Marshal(fs)
	if err != nil || string(got) != string(want) {
		t.Errorf("Marshal = %s, %v\nCanonical = %s", got, err, want)
	}
}
