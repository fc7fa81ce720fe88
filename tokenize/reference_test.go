package tokenize

import (
	"strings"

	tiktoken "github.com/pkoukk/tiktoken-go"
	tiktokenloader "github.com/pkoukk/tiktoken-go-loader"
)

func init() {
	// tiktoken-go's default loader downloads vocabularies over HTTP. The tests that run the
	// library as the reference use the vocabularies embedded by tiktoken-go-loader: no test
	// touches the network.
	tiktoken.SetBpeLoader(tiktokenloader.NewOfflineLoader())
}

// splitPatterns are the pre-tokenization regular expressions of each encoding, exactly as
// tiktoken-go v0.1.8 compiles them (encoding.go), in regexp2 syntax. split.go implements
// them by hand; the tests check it against regexp2 running these.
var splitPatterns = map[string]string{
	O200KBase: strings.Join([]string{
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
		`\p{N}{1,3}`,
		` ?[^\s\p{L}\p{N}]+[\r\n/]*`,
		`\s*[\r\n]+`,
		`\s+(?!\S)`,
		`\s+`,
	}, "|"),
	CL100KBase: `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
}
