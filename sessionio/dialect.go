package sessionio

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Dialect is the Pi release whose rules compactor follows for a session: how its context is
// built, how a compaction is planned and what an appended entry holds. Pi renamed its package
// at 0.74.0 (@mariozechner/pi-coding-agent became @earendil-works/pi-coding-agent), and 1.x
// changed what it writes and how it reads it: system messages that carry the prompt, context
// edits that hide or replace earlier messages, usage entries, compactions that carry a
// checkpoint of the system prompt (pi-1.6-changes.md). A session file does not say which Pi
// wrote it, so the dialect is a setting (per store; the newest by default).
//
// The zero value means DialectLatest.
type Dialect uint8

const (
	// Pi073 is @mariozechner/pi-coding-agent 0.73.1, the last release under that name.
	Pi073 Dialect = iota + 1
	// Pi16 is @earendil-works/pi-coding-agent 1.6.0.
	Pi16
)

// DialectLatest is the dialect of the newest Pi compactor follows: the default everywhere.
const DialectLatest = Pi16

// Dialects lists every dialect, oldest first.
func Dialects() []Dialect { return []Dialect{Pi073, Pi16} }

// String is the exact Pi version the dialect follows ("0.73.1", "1.6.0").
func (d Dialect) String() string {
	switch d.Or() {
	case Pi073:
		return "0.73.1"
	default:
		return "1.6.0"
	}
}

// Package is the npm package of that Pi.
func (d Dialect) Package() string {
	if d.Or() == Pi073 {
		return "@mariozechner/pi-coding-agent"
	}
	return "@earendil-works/pi-coding-agent"
}

// Or is d, or DialectLatest for the zero value.
func (d Dialect) Or() Dialect {
	if d == 0 {
		return DialectLatest
	}
	return d
}

// Projects reports whether the dialect builds contexts through Pi 1.x's projection: context
// edits applied, system messages, compaction checkpoints.
func (d Dialect) Projects() bool { return d.Or() >= Pi16 }

// ParseDialect reads a Pi version as a user writes it: "1.6.0", "1.6", "0.73.1", "0.73",
// "latest" or "" (the newest). Other versions are refused, naming the ones compactor follows.
func ParseDialect(s string) (Dialect, error) {
	v := strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "v")
	switch v {
	case "", "latest":
		return DialectLatest, nil
	case "0.73", "0.73.1":
		return Pi073, nil
	case "1.6", "1.6.0":
		return Pi16, nil
	}
	names := make([]string, 0, 2)
	for _, d := range Dialects() {
		names = append(names, d.String())
	}
	return 0, fmt.Errorf("unknown Pi version %q (compactor follows %s; latest is %s)", s, strings.Join(names, " and "), DialectLatest)
}

// ErrPaddedHeader is CheckLoads' error: the header line has characters around its JSON that
// Pi 1.x's loader does not accept (a byte-order mark, most often).
var ErrPaddedHeader = errors.New("no valid session header for Pi 1.x")

// CheckLoads reports whether the Pi of dialect d would load file as a session, where the
// releases' loaders differ: Pi 0.73 trimmed the whole content (a byte-order mark or other
// Unicode space before the header went), Pi 1.x parses each line as it is, so a header line
// with such characters around its JSON is skipped and the file refused ("not a valid
// session"). Everything both refuse (no header at all, an empty file) is left to the read,
// which says so. Only the first non-blank line is read.
func CheckLoads(file string, d Dialect) error { return Named(file).CheckLoads(d) }

// CheckLoads is CheckLoads for this file.
func (src *File) CheckLoads(d Dialect) error {
	if !d.Or().Projects() {
		return nil
	}
	file := src.Name()
	f, _, err := src.open(os.O_RDONLY)
	if err != nil {
		return nil // the read reports it
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	for n := 1; ; n++ {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil // a header this long is left to the read
		}
		if len(line) == 0 && err != nil {
			return nil
		}
		if t, _ := jsTrim(line); len(t) == 0 {
			if err != nil {
				return nil
			}
			continue // a blank line, skipped by both
		}
		j := bytes.Trim(line, " \t\r\n")
		if len(j) > 0 && j[0] == '{' && j[len(j)-1] == '}' {
			return nil
		}
		if t, _ := jsTrim(line); len(t) > 0 && t[0] == '{' && t[len(t)-1] == '}' {
			what := "characters JSON does not allow around it (Unicode spaces)"
			if bytes.HasPrefix(line, []byte("\xef\xbb\xbf")) {
				what = "a byte-order mark (U+FEFF) before it"
			}
			return &FileError{File: file, Line: n, Err: fmt.Errorf("%w: the header line has %s; Pi %s refuses the file (Pi 0.73.1 read it)", ErrPaddedHeader, what, d.Or())}
		}
		return nil // not a header either way: the read says what is wrong
	}
}
