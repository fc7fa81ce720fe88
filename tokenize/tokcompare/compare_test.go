//go:build tokcompare

// Run from this directory:
//
//	go test -tags tokcompare -run . -bench . -benchtime 3x -cpu 1
package tokcompare

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"os"
	"testing"

	"github.com/tiktoken-go/tokenizer"

	"github.com/compactor-dev/compactor/tokenize"
)

func loadSample(tb testing.TB) []string {
	tb.Helper()
	f, err := os.Open("../testdata/tiktoken-sample.jsonl.gz")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 64<<20)
	var out []string
	for sc.Scan() {
		var s string
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			tb.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func goldens(tb testing.TB, enc string) []int {
	tb.Helper()
	data, err := os.ReadFile("../testdata/tiktoken-goldens.json")
	if err != nil {
		tb.Fatal(err)
	}
	var g struct {
		Encodings map[string]struct {
			Sample []int `json:"sample"`
		} `json:"encodings"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		tb.Fatal(err)
	}
	return g.Encodings[enc].Sample
}

var encs = map[string]tokenizer.Encoding{
	tokenize.O200KBase:  tokenizer.O200kBase,
	tokenize.CL100KBase: tokenizer.Cl100kBase,
}

// TestSameCounts: does tiktoken-go/tokenizer give OpenAI's counts on the sample?
func TestSameCounts(t *testing.T) {
	sample := loadSample(t)
	for name, enc := range encs {
		codec, err := tokenizer.Get(enc)
		if err != nil {
			t.Fatal(err)
		}
		want := goldens(t, name)
		bad := 0
		for i, s := range sample {
			got, err := codec.Count(s)
			if err != nil {
				t.Fatalf("%s %d: %v", name, i, err)
			}
			if got != want[i] {
				bad++
				if bad <= 3 {
					t.Errorf("%s sample %d (%.50q): %d, tiktoken %d", name, i, s, got, want[i])
				}
			}
		}
		t.Logf("%s: %d of %d strings differ from OpenAI's tiktoken", name, bad, len(sample))
	}
}

func bytesOf(sample []string) int64 {
	var n int64
	for _, s := range sample {
		n += int64(len(s))
	}
	return n
}

func BenchmarkCompactor(b *testing.B) {
	sample := loadSample(b)
	for name := range encs {
		b.Run(name, func(b *testing.B) {
			tk, err := tokenize.NewTiktoken(name)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(bytesOf(sample))
			for b.Loop() {
				for _, s := range sample {
					tk.CountText(s)
				}
			}
		})
	}
}

func BenchmarkTiktokenGoTokenizer(b *testing.B) {
	sample := loadSample(b)
	for name, enc := range encs {
		b.Run(name, func(b *testing.B) {
			codec, err := tokenizer.Get(enc)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(bytesOf(sample))
			for b.Loop() {
				for _, s := range sample {
					codec.Count(s)
				}
			}
		})
	}
}
