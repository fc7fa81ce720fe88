// Module tokcompare benchmarks compactor's tiktoken counter against another pure-Go
// tiktoken, github.com/tiktoken-go/tokenizer. It is a separate module so that library never
// becomes a dependency of compactor; its files also carry the build tag tokcompare.
module github.com/compactor-dev/compactor/tokenize/tokcompare

go 1.26.0

replace github.com/compactor-dev/compactor => ../..

require (
	github.com/compactor-dev/compactor v0.0.0-00010101000000-000000000000
	github.com/tiktoken-go/tokenizer v0.10.0
)

require (
	github.com/dlclark/regexp2 v1.10.0 // indirect
	github.com/dlclark/regexp2/v2 v2.5.1 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/pkoukk/tiktoken-go v0.1.8 // indirect
	github.com/pkoukk/tiktoken-go-loader v0.0.2 // indirect
)
