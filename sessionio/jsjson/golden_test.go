package jsjson

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// golden mirrors testdata/golden.json, written by testdata/gen.mjs with Node.
type golden struct {
	Node   string `json:"node"`
	Values []struct {
		Name         string `json:"name"`
		InputHex     string `json:"inputHex"`
		OK           bool   `json:"ok"`
		Output       string `json:"output"`
		Length       int    `json:"length"`
		StringLength *int   `json:"stringLength"`
		Error        string `json:"error"`
	} `json:"values"`
	SortInputs []string `json:"sortInputs"`
	SortOrder  []int    `json:"sortOrder"`
	RawStrings []struct {
		Name     string `json:"name"`
		InputHex string `json:"inputHex"`
		Output   string `json:"output"`
		Length   int    `json:"length"`
	} `json:"rawStrings"`
	Numbers []struct {
		Bits   string `json:"bits"`
		Output string `json:"output"`
	} `json:"numbers"`
}

func loadGolden(t testing.TB) *golden {
	t.Helper()
	data, err := os.ReadFile("testdata/golden.json")
	if err != nil {
		t.Fatalf("read golden: %v", err)
	}
	var g golden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatalf("decode golden: %v", err)
	}
	if len(g.Values) == 0 || len(g.Numbers) == 0 {
		t.Fatal("golden file is empty")
	}
	return &g
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

func TestCanonicalGolden(t *testing.T) {
	t.Parallel()
	g := loadGolden(t)
	for _, c := range g.Values {
		raw := unhex(t, c.InputHex)
		out, err := Canonical([]byte("prefix:"), raw)
		n, lerr := CanonicalLen(raw)
		if !c.OK {
			var se *SyntaxError
			if err == nil || !errors.As(err, &se) {
				t.Errorf("%s: Canonical(%q) = %q, %v; node rejects it (%s)", c.Name, raw, out, err, c.Error)
			} else if se.Offset < 0 || se.Offset > len(raw) || !strings.Contains(err.Error(), "offset") {
				t.Errorf("%s: bad error %v", c.Name, err)
			}
			if lerr == nil {
				t.Errorf("%s: CanonicalLen accepted invalid input", c.Name)
			}
			if string(out) != "prefix:" {
				t.Errorf("%s: dst changed on error: %q", c.Name, out)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: Canonical(%q): %v", c.Name, raw, err)
			continue
		}
		if got := string(out); got != "prefix:"+c.Output {
			t.Errorf("%s: Canonical(%q)\n got %q\nwant %q", c.Name, raw, strings.TrimPrefix(got, "prefix:"), c.Output)
		}
		if lerr != nil || n != c.Length {
			t.Errorf("%s: CanonicalLen = %d, %v; want %d", c.Name, n, lerr, c.Length)
		}
		if u := UTF16Len(c.Output); u != c.Length {
			t.Errorf("%s: UTF16Len(output) = %d, want %d", c.Name, u, c.Length)
		}
		if c.StringLength != nil {
			s, err := Unquote(raw)
			if err != nil {
				t.Errorf("%s: Unquote: %v", c.Name, err)
				continue
			}
			if got := string(AppendString(nil, s)); got != c.Output {
				t.Errorf("%s: AppendString(Unquote(%q)) = %q, want %q", c.Name, raw, got, c.Output)
			}
			if got := UTF16Len(s); got != *c.StringLength {
				t.Errorf("%s: UTF16Len(Unquote(%q)) = %d, want %d", c.Name, raw, got, *c.StringLength)
			}
		}
	}
}

func TestRawStringsGolden(t *testing.T) {
	t.Parallel()
	g := loadGolden(t)
	for _, c := range g.RawStrings {
		s := string(unhex(t, c.InputHex))
		if got := string(AppendString(nil, s)); got != c.Output {
			t.Errorf("%s: AppendString(%q) = %q, want %q", c.Name, s, got, c.Output)
		}
		if got := UTF16Len(s); got != c.Length {
			t.Errorf("%s: UTF16Len(%q) = %d, want %d", c.Name, s, got, c.Length)
		}
	}
}

func TestCompareUTF16Golden(t *testing.T) {
	t.Parallel()
	g := loadGolden(t)
	strs := make([]string, len(g.SortInputs))
	for i, lit := range g.SortInputs {
		s, err := Unquote([]byte(lit))
		if err != nil {
			t.Fatalf("Unquote(%s): %v", lit, err)
		}
		strs[i] = s
	}
	idx := make([]int, len(strs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return CompareUTF16(strs[a], strs[b]) })
	if !slices.Equal(idx, g.SortOrder) {
		t.Errorf("sort order\n got %v\nwant %v (node)", idx, g.SortOrder)
	}
	// Every pair, both ways, against node's order.
	for i, a := range g.SortOrder {
		for j, b := range g.SortOrder {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := CompareUTF16(strs[a], strs[b]); got != want {
				t.Errorf("CompareUTF16(%q, %q) = %d, want %d", strs[a], strs[b], got, want)
			}
		}
	}
}

func TestAppendNumberGolden(t *testing.T) {
	t.Parallel()
	g := loadGolden(t)
	for _, c := range g.Numbers {
		bits, err := strconv.ParseUint(c.Bits, 16, 64)
		if err != nil {
			t.Fatalf("bad bits %q", c.Bits)
		}
		f := math.Float64frombits(bits)
		if got := string(AppendNumber(nil, f)); got != c.Output {
			t.Errorf("AppendNumber(%v [%s]) = %s, want %s", f, c.Bits, got, c.Output)
		}
	}
}
