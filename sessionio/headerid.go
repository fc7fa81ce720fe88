package sessionio

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
)

// maxHeaderLine bounds how far HeaderID reads for the end of the header line: a header
// names an id, a time, a directory and a parent file, far less than this.
const maxHeaderLine = 1 << 20

// HeaderID returns the session id of the header the file starts with, as the read finds
// the header: the first line after the white space Pi trims from the start of the
// content (blank lines and a byte-order mark included). It is "" when that line is not a
// session header, or the file holds nothing but white space. A header line longer than
// maxHeaderLine is an error: no header Pi writes is, and one that were would stop a
// check keyed on it from being made. The file is read from its start only, in growing
// pieces, so that the cost is that of the header, whatever the file's size.
func (src *File) HeaderID() (string, error) {
	f, _, err := src.open(0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	head := make([]byte, 0, 4<<10)
	for {
		if len(head) == cap(head) {
			head = slices.Grow(head, cap(head))
		}
		n, err := f.Read(head[len(head):cap(head)])
		head = head[:len(head)+n]
		if err != nil && err != io.EOF {
			return "", &FileError{File: src.name, Err: fmt.Errorf("read the header: %w", err)}
		}
		trimmed, line := jsTrimStart(head)
		end := bytes.IndexByte(trimmed, '\n')
		if end < 0 && err == io.EOF {
			end = len(trimmed)
		}
		switch {
		case end > maxHeaderLine || end < 0 && len(trimmed) > maxHeaderLine:
			return "", &FileError{File: src.name, Line: line, Err: fmt.Errorf("the header line is longer than %d bytes", maxHeaderLine)}
		case end >= 0:
			return headerIDOf(trimmed[:end]), nil
		}
	}
}

// headerIDOf is the id of a session header line, "" for any other line.
func headerIDOf(line []byte) string {
	line, _ = jsTrim(line)
	var h struct {
		Type string `json:"type"`
		ID   string `json:"id"`
	}
	if json.Unmarshal(line, &h) != nil || h.Type != "session" {
		return ""
	}
	return h.ID
}
