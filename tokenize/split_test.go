package tokenize

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"pgregory.net/rapid"
)

// regexpPieces splits s with regexp2 running tiktoken-go's expression: the reference.
func regexpPieces(t testing.TB, enc, s string) []string {
	t.Helper()
	re := regexp2.MustCompile(splitPatterns[enc], regexp2.None)
	runes := []rune(s)
	var out []string
	m, err := re.FindRunesMatch(runes)
	for m != nil && err == nil {
		out = append(out, string(runes[m.Index:m.Index+m.Length]))
		m, err = re.FindNextMatch(m)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func ourPieces(enc, s string) []string {
	var out []string
	eachPiece(s, splitters[enc], func(p string) { out = append(out, p) })
	return out
}

func equalPieces(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// splitGen mixes every character class the expressions distinguish: upper, lower,
// title-case, modifier and other letters, combining marks, digits of several kinds,
// every kind of whitespace (including \v, NEL, NBSP, U+2028), apostrophes and
// contraction letters in both cases, punctuation, slashes and emoji.
func splitGen() *rapid.Generator[string] {
	chars := []string{"a", "b", "s", "t", "r", "e", "v", "m", "l", "d", "S", "T", "R", "E", "V", "M", "L", "D", "A", "Z",
		"ǅ", "ʰ", "ー", "漢", "ا", "\u0301", "\u0903", "\u20dd", "é", "ß", "İ", "ſ", "K", "Ω",
		"0", "7", "٣", "Ⅻ", "½", "²",
		" ", "  ", "\t", "\n", "\r", "\r\n", "\v", "\f", "\u0085", "\u00a0", "\u2028", "\u3000",
		"'", "'", "’", ".", ",", "/", "//", "-", "_", "(", ")", "{", "\"", "<|", "|>", "$", "😀", "🧪", "\x00", "\x7f"}
	return rapid.Custom(func(t *rapid.T) string {
		var b strings.Builder
		for _, i := range rapid.SliceOfN(rapid.IntRange(0, len(chars)-1), 0, 60).Draw(t, "chars") {
			b.WriteString(chars[i])
		}
		return b.String()
	})
}

func TestSplitMatchesRegexp(t *testing.T) {
	t.Parallel()
	for _, enc := range []string{O200KBase, CL100KBase} {
		rapid.Check(t, func(rt *rapid.T) {
			s := splitGen().Draw(rt, "s")
			want := regexpPieces(t, enc, s)
			if got := ourPieces(enc, s); !equalPieces(got, want) {
				rt.Fatalf("%s %q:\n got  %q\n want %q", enc, s, got, want)
			}
		})
	}
}

// TestSplitMatchesRegexpOnSample compares piece boundaries on real session text: every
// 25th string by default (regexp2 is slow, under -race especially), all of them with
// COMPACTOR_LONG_TESTS=1. TestTiktokenGoldens covers every string's count regardless.
func TestSplitMatchesRegexpOnSample(t *testing.T) {
	t.Parallel()
	sample := loadSample(t)
	step := 25
	if longTests() {
		step = 1
	}
	for _, enc := range []string{O200KBase, CL100KBase} {
		for i := 0; i < len(sample); i += step {
			s := sample[i]
			if !utf8.ValidString(s) {
				continue
			}
			if got, want := ourPieces(enc, s), regexpPieces(t, enc, s); !equalPieces(got, want) {
				for k := 0; k < min(len(got), len(want)); k++ {
					if got[k] != want[k] {
						t.Fatalf("%s sample %d piece %d: got %q, want %q", enc, i, k, got[k], want[k])
					}
				}
				t.Fatalf("%s sample %d: %d pieces, want %d", enc, i, len(got), len(want))
			}
		}
	}
}
