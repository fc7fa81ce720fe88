package tokenize

import (
	"bufio"
	"compress/gzip"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"

	tiktoken "github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
	"pgregory.net/rapid"
)

// longTests reports whether the slow reference comparisons should run in full
// (COMPACTOR_LONG_TESTS=1; the Makefile's long-test target sets it).
func longTests() bool { return os.Getenv("COMPACTOR_LONG_TESTS") == "1" }

// pseudoBytes is xorshift32 from a seed: the same bytes as tiktoken-count.mjs makes.
func pseudoBytes(n int, seed uint32) []byte {
	b := make([]byte, n)
	x := seed
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// hostileStrings must stay identical to hostile() in testdata/tiktoken-count.mjs.
func hostileStrings() map[string]string {
	return map[string]string{
		"endoftext":         "<|endoftext|>",
		"specials":          "a <|endoftext|> b <|fim_prefix|><|fim_middle|><|fim_suffix|><|endofprompt|> <|im_start|>user<|im_end|>",
		"run-a-20000":       strings.Repeat("a", 20000),
		"run-A-20000":       strings.Repeat("A", 20000),
		"run-space-20000":   strings.Repeat(" ", 20000) + "x",
		"run-newline-20000": strings.Repeat("\n", 20000),
		"run-digit-20000":   strings.Repeat("7", 20000),
		"run-dot-20000":     strings.Repeat(".", 20000),
		"run-cjk-5000":      strings.Repeat("漢", 5000),
		"run-emoji-5000":    strings.Repeat("😀", 5000),
		"mixed-case-20000":  strings.Repeat("aB", 10000),
		"base64-400k":       base64.StdEncoding.EncodeToString(pseudoBytes(300000, 12345)),
		"hex-100k":          hex.EncodeToString(pseudoBytes(50000, 777)),
		"contractions":      "It's we'LL they'Re I'M you'VE he'D don'T 'S 'ſ",
		"unicode-mix":       "naïve café Ωμέγα Привет мир こんにちは 世界 🧪🚀 e\u0301 \u2028\u2029 \t\r\n end",
	}
}

type tiktokenGoldens struct {
	Generator string `json:"generator"`
	Encodings map[string]struct {
		Sample  []int          `json:"sample"`
		Hostile map[string]int `json:"hostile"`
	} `json:"encodings"`
}

func loadSample(tb testing.TB) []string {
	tb.Helper()
	f, err := os.Open("testdata/tiktoken-sample.jsonl.gz")
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
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

func mustTiktoken(tb testing.TB, enc string) *Tiktoken {
	tb.Helper()
	tk, err := NewTiktoken(enc)
	if err != nil {
		tb.Fatal(err)
	}
	return tk
}

// TestTiktokenGoldens compares CountText with OpenAI's tiktoken (npm tiktoken, the Rust
// core as WASM) on ~3 MB of session text and the hostile strings, for both encodings.
// Goldens: testdata/tiktoken-count.mjs goldens.
func TestTiktokenGoldens(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("testdata/tiktoken-goldens.json")
	if err != nil {
		t.Fatal(err)
	}
	var g tiktokenGoldens
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	sample := loadSample(t)
	hostile := hostileStrings()
	for _, enc := range []string{O200KBase, CL100KBase} {
		t.Run(enc, func(t *testing.T) {
			t.Parallel()
			tk := mustTiktoken(t, enc)
			want := g.Encodings[enc]
			if len(want.Sample) != len(sample) {
				t.Fatalf("goldens have %d counts for %d sample strings", len(want.Sample), len(sample))
			}
			n := len(sample)
			if testing.Short() {
				n = min(n, 300)
			}
			bytes, bad := 0, 0
			for i, s := range sample[:n] {
				bytes += len(s)
				if got := tk.CountText(s); got != want.Sample[i] {
					bad++
					if bad <= 5 {
						t.Errorf("sample %d (%d bytes, %.60q): %d tokens, tiktoken %d", i, len(s), s, got, want.Sample[i])
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d strings differ", bad, n)
			}
			if len(want.Hostile) != len(hostile) {
				t.Fatalf("goldens have %d hostile strings, test %d", len(want.Hostile), len(hostile))
			}
			for name, s := range hostile {
				if got := tk.CountText(s); got != want.Hostile[name] {
					t.Errorf("%s: %d tokens, tiktoken %d", name, got, want.Hostile[name])
				}
			}
			t.Logf("%s: %d strings, %d bytes equal to %s", enc, n, bytes, g.Generator)
		})
	}
}

// libraryCount is tiktoken-go's own count (encode_ordinary), the reference for our merge.
var libraryEncodings sync.Map

func libraryCount(tb testing.TB, enc, s string) int {
	tb.Helper()
	v, ok := libraryEncodings.Load(enc)
	if !ok {
		e, err := tiktoken.GetEncoding(enc)
		if err != nil {
			tb.Fatal(err)
		}
		v, _ = libraryEncodings.LoadOrStore(enc, e)
	}
	return len(v.(*tiktoken.Tiktoken).EncodeOrdinary(s))
}

// textGen draws strings that stress the split expression and the merge: words in mixed
// case, contractions, digits, whitespace runs, punctuation, non-Latin scripts, emoji,
// combining marks and long runs of one character.
func textGen() *rapid.Generator[string] {
	atoms := []string{"a", "e", "the", "The", "THE", "Hello", "x", "'s", "'LL", "'", " ", "  ", "\t", "\n", "\r\n", "\n\n ",
		"0", "12", "12345", ".", ",", "...", "/", "//", "<|endoftext|>", "{", "}\n", "\":\"", "漢字", "ё", "Ω", "😀", "e\u0301",
		"\u00a0", "\u2028", "ſ", "İ", "ǅ", "ー", "_", "-->", "$("}
	return rapid.Custom(func(t *rapid.T) string {
		var b strings.Builder
		for _, i := range rapid.SliceOfN(rapid.IntRange(0, len(atoms)-1), 0, 40).Draw(t, "atoms") {
			a := atoms[i]
			if rapid.IntRange(0, 9).Draw(t, "long") == 0 {
				a = strings.Repeat(a, rapid.IntRange(2, 300).Draw(t, "reps"))
			}
			b.WriteString(a)
		}
		return b.String()
	})
}

// TestTiktokenMatchesLibrary: our merge (both strategies) gives tiktoken-go's counts.
func TestTiktokenMatchesLibrary(t *testing.T) {
	t.Parallel()
	for _, enc := range []string{O200KBase, CL100KBase} {
		tk := mustTiktoken(t, enc)
		rapid.Check(t, func(rt *rapid.T) {
			s := textGen().Draw(rt, "s")
			if got, want := tk.CountText(s), libraryCount(t, enc, s); got != want {
				rt.Fatalf("%s %q: %d, tiktoken-go %d", enc, s, got, want)
			}
		})
	}
}

// TestMergeStrategiesAgree runs the heap merge and the reference merge on the same pieces,
// including pieces far longer than smallPiece where only the heap is normally used.
func TestMergeStrategiesAgree(t *testing.T) {
	t.Parallel()
	tk := mustTiktoken(t, O200KBase)
	ranks := tk.v.ranks
	alphabet := []string{"a", "b", "e", "n", "t", " ", "th", "in", "ab", "é", "漢", "0", "="}
	rapid.Check(t, func(rt *rapid.T) {
		var b strings.Builder
		for _, i := range rapid.SliceOfN(rapid.IntRange(0, len(alphabet)-1), 2, smallPiece/2).Draw(rt, "p") {
			b.WriteString(alphabet[i])
		}
		p := b.String()
		if len(p) > smallPiece {
			p = p[:smallPiece]
		}
		if h, s := mergeHeap(p, ranks), mergeSmall(p, ranks); h != s {
			rt.Fatalf("%q: heap %d, reference %d", p, h, s)
		}
	})
	// Long single pieces against tiktoken-go's own (quadratic) merge.
	for _, p := range []string{strings.Repeat("a", 3000), strings.Repeat("ab", 1500), strings.Repeat("Mississippi", 200), strings.Repeat("漢", 700)} {
		if got, want := tk.CountText(p), libraryCount(t, O200KBase, p); got != want {
			t.Errorf("%.20q x%d: %d, tiktoken-go %d", p, len(p), got, want)
		}
	}
}

// TestLongStringsAreLinear counts the inputs that make tiktoken quadratic. No timing is
// asserted (see BenchmarkCountTextHostile); the test just has to finish, and the counts
// follow the exact pattern the goldens show at 20,000 characters (8 letters a token).
// Sizes are 256 KiB by default (the race detector slows the merge tenfold), 1 MiB and a
// 3 MB base64 line compared with tiktoken-go with COMPACTOR_LONG_TESTS=1.
func TestLongStringsAreLinear(t *testing.T) {
	t.Parallel()
	tk := mustTiktoken(t, O200KBase)
	size := 256 << 10
	if longTests() {
		size = 1 << 20
	}
	if got := tk.CountText(strings.Repeat("a", size)); got != size/8 {
		t.Errorf("%d x 'a': %d tokens, want %d", size, got, size/8)
	}
	if got := tk.CountText(strings.Repeat(" ", size) + "x"); got < 1 || got > size/8 {
		t.Errorf("%d spaces: %d tokens", size, got)
	}
	if longTests() { // tiktoken-go itself needs seconds for this
		b64 := base64.StdEncoding.EncodeToString(pseudoBytes(3<<20*3/4, 99))
		if got, want := tk.CountText(b64), libraryCount(t, O200KBase, b64); got != want {
			t.Errorf("3 MB base64: %d, tiktoken-go %d", got, want)
		}
	}
}

func TestTiktokenConcurrent(t *testing.T) {
	t.Parallel()
	sample := loadSample(t)[:200]
	tk := mustTiktoken(t, CL100KBase)
	want := make([]int, len(sample))
	for i, s := range sample {
		want[i] = tk.CountText(s)
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk2, err := NewTiktoken(CL100KBase)
			if err != nil || tk2 != tk {
				t.Errorf("NewTiktoken again: %p %v", tk2, err)
				return
			}
			for i, s := range sample {
				if got := tk2.CountText(s); got != want[i] {
					t.Errorf("concurrent count %d: %d, want %d", i, got, want[i])
				}
			}
		}()
	}
	wg.Wait()
}

func TestNewCounter(t *testing.T) {
	t.Parallel()
	if c, err := New("estimate", ""); err != nil || c.Name() != "estimate" {
		t.Errorf("estimate: %v %v", c, err)
	}
	if c, err := New("tiktoken", ""); err != nil || c.Name() != "tiktoken:o200k_base" {
		t.Errorf("tiktoken default: %v %v", c, err)
	}
	if c, err := New("tiktoken", CL100KBase); err != nil || c.Name() != "tiktoken:cl100k_base" {
		t.Errorf("tiktoken cl100k: %v %v", c, err)
	}
	if _, err := New("tiktoken", "p50k_base"); err == nil {
		t.Error("p50k_base accepted")
	}
	if _, err := New("words", ""); err == nil {
		t.Error("unknown counter accepted")
	}
}

// TestTiktokenMessageRules pins the tiktoken cost rules of the package doc.
func TestTiktokenMessageRules(t *testing.T) {
	t.Parallel()
	tk := mustTiktoken(t, O200KBase)
	c := tk.CountText
	tests := []struct {
		name string
		raw  string
		want int
	}{
		{"user string", `{"role":"user","content":"Hello there, world"}`, c("Hello there, world") + MessageOverhead},
		{"user image costs", `{"role":"user","content":[{"type":"text","text":"look"},{"type":"image","data":"AAAA","mimeType":"image/png"}]}`, c("look") + ImageTokens + MessageOverhead},
		{"assistant", `{"role":"assistant","content":[{"type":"thinking","thinking":"hmm ok","thinkingSignature":"sig sig sig"},{"type":"text","text":"Done."},{"type":"toolCall","id":"t1","name":"bash","arguments":{ "command" : "ls -la",  "timeout":1.0 }}]}`,
			c("hmm ok") + c("Done.") + c("bash") + c(`{"command":"ls -la","timeout":1}`) + MessageOverhead},
		{"toolResult", `{"role":"toolResult","toolCallId":"t1","toolName":"bash","content":[{"type":"text","text":"a.txt\nb.txt"}],"isError":false}`, c("a.txt\nb.txt") + MessageOverhead},
		{"bash", `{"role":"bashExecution","command":"make test","output":"ok all"}`, c("make test") + c("ok all") + MessageOverhead},
		{"bash excluded", `{"role":"bashExecution","command":"make test","output":"ok all","excludeFromContext":true}`, 0},
		{"custom", `{"role":"custom","customType":"note","content":"remember this","display":true}`, c("remember this") + MessageOverhead},
		{"compaction summary", `{"role":"compactionSummary","summary":"We did things.","tokensBefore":9}`, c("We did things.") + MessageOverhead},
		{"branch summary", `{"role":"branchSummary","summary":"Tried X.","fromId":"a"}`, c("Tried X.") + MessageOverhead},
		{"system (Pi 1.x)", `{"role":"system","content":"Be brief.","sections":{"env":"cwd=/x","gone":null},"toolsAdded":[{"name":"read", "description":"Read"}]}`,
			c("Be brief.") + c("cwd=/x") + c(`[{"name":"read","description":"Read"}]`) + MessageOverhead},
		{"unknown role", `{"role":"hookMessage","content":"x"}`, 0},
	}
	for _, tc := range tests {
		if got := tk.Count(msg(t, tc.raw)); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
	if tk.Count(nil) != 0 {
		t.Error("nil message")
	}
}

// TestParseRanksMatchesLoader: compactor's vocabulary table holds exactly the tokens and
// ranks of the map tiktoken-go-loader builds, for both encodings, and finds nothing else.
func TestParseRanksMatchesLoader(t *testing.T) {
	t.Parallel()
	for _, enc := range []string{O200KBase, CL100KBase} {
		want, err := tiktokenloader.NewOfflineLoader().LoadTiktokenBpe(enc + ".tiktoken")
		if err != nil {
			t.Fatal(err)
		}
		v, err := loadVocab(enc)
		if err != nil {
			t.Fatal(err)
		}
		if v.ranks.tokens() != len(want) || len(want) < 100000 {
			t.Fatalf("%s: %d ranks, loader %d", enc, v.ranks.tokens(), len(want))
		}
		for k, r := range want {
			if got, ok := v.ranks.get(k); !ok || got != r {
				t.Fatalf("%s: rank of %q = %d (%v), loader %d", enc, k, got, ok, r)
			}
			// Strings one byte off a token are looked up too: a miss must be a miss.
			for _, miss := range []string{k + "\x00", "\xff" + k} {
				if got, ok := v.ranks.get(miss); ok {
					if wr, in := want[miss]; !in || wr != got {
						t.Fatalf("%s: %q found with rank %d, loader %d (%v)", enc, miss, got, wr, in)
					}
				}
			}
		}
	}
	// Ranks that are not positions (and a repeated token) are kept as given.
	if tab, err := parseRanks(strings.NewReader("QQ== 5\nQg== 7\nQQ== 9\nQUI= 0\n"), 28); err != nil {
		t.Fatal(err)
	} else {
		for tok, want := range map[string]int{"A": 9, "B": 7, "AB": 0} {
			if got, ok := tab.get(tok); !ok || got != want {
				t.Errorf("rank of %q = %d (%v), want %d", tok, got, ok, want)
			}
		}
		if tab.tokens() != 3 {
			t.Errorf("%d tokens, want 3", tab.tokens())
		}
	}
	for _, bad := range []string{"QUJD 1\nnot-base64!! 2\n", "QUJD 1\nQUJD x\n", "QUJD 1\nQ=== 2\n", "QUJD 1\nQUJ 2\n", "QUJD 1\n=UJD 2\n"} {
		if _, err := parseRanks(strings.NewReader(bad), len(bad)); err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("bad vocabulary line in %q: %v", bad, err)
		}
	}
	// The hand-written base64 decoder agrees with encoding/base64 on every length and
	// padding (QUI= is "AB", QQ== is "A").
	for _, tok := range []string{"A", "AB", "ABC", "ABCD", "\x00\xff", "\xfb\xef\xbe", "QUI="} {
		line := base64.StdEncoding.EncodeToString([]byte(tok)) + " 7"
		got, rank, ok := parseRankLine(nil, []byte(line))
		if !ok || string(got) != tok || rank != 7 {
			t.Errorf("%q: %q %d %v", line, got, rank, ok)
		}
	}
}
