// Package jsjson reproduces, byte for byte, the JSON that JavaScript's JSON.stringify
// emits, and measures it the way JavaScript does (String.prototype.length, i.e. UTF-16
// code units).
//
// Pi writes every session line with JSON.stringify and estimates tokens from
// JSON.stringify(...).length, so compactor cannot use encoding/json for either job:
// encoding/json escapes <, >, & and U+2028/U+2029, replaces lone surrogates with U+FFFD,
// formats numbers differently and sorts map keys by bytes.
//
// # String representation
//
// A JavaScript string is a sequence of UTF-16 code units and may contain unpaired
// ("lone") surrogates. In Go this package represents such a string as WTF-8: ordinary
// UTF-8, except that a lone surrogate is stored as its 3-byte generalized UTF-8 form
// (0xED 0xA0..0xBF 0x80..0xBF). Functions that take a Go string (AppendString, UTF16Len,
// CompareUTF16, AppendValue) read it that way; a high-surrogate form directly followed by
// a low-surrogate form counts as the pair it denotes. Any other invalid byte sequence is
// read as U+FFFD, one per maximal invalid subpart, which is what Node's UTF-8 decoder
// (and the WHATWG Encoding standard) does when it reads a file.
//
// Functions that take raw JSON text (Canonical, CanonicalLen, Unquote) read bytes as
// Node reads a file: strict UTF-8, so raw surrogate bytes are invalid and become U+FFFD.
// A lone surrogate can only enter through a \uXXXX escape, exactly as in Pi's files.
package jsjson
