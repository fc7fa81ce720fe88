package sessionio

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/compactor-dev/compactor/pi"
)

// ErrPaddedHeader is CheckLoads' error: the header line has characters around its JSON that
// the loader of Pi >= 0.78.1 does not accept (a byte-order mark, most often).
var ErrPaddedHeader = errors.New("no valid session header for this Pi")

// CheckLoads reports whether Pi r would load file as a session, where the releases' loaders
// differ: before 0.78.1 Pi trimmed the whole content (a byte-order mark or other Unicode
// space before the header went); with LineLoader it parses each line as it is, so a header
// line with such characters around its JSON is skipped and the file refused ("not a valid
// session"). Everything both refuse (no header at all, an empty file) is left to the read,
// which says so. Only the first non-blank line is read.
func CheckLoads(file string, r pi.Release) error { return Named(file).CheckLoads(r) }

// CheckLoads is CheckLoads for this file.
func (src *File) CheckLoads(r pi.Release) error {
	if !r.Has(pi.LineLoader) {
		return nil
	}
	file := src.Name()
	f, _, err := src.open(os.O_RDONLY)
	if err != nil {
		return nil // the read reports it
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	for n := 1; ; n++ {
		line, err := br.ReadSlice('\n')
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
			return &FileError{File: file, Line: n, Err: fmt.Errorf("%w: the header line has %s; Pi %s refuses the file (Pi before 0.78.1 read it)", ErrPaddedHeader, what, r)}
		}
		return nil // not a header either way: the read says what is wrong
	}
}
