package command

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/compactor-dev/compactor/internal/visible"
)

// JSONOut wraps w for JSON printed by a command: the hidden characters of what a store's
// key wrote (a dead letter's reason, an event's error, a worker's host...) are written as
// JSON escapes (visible.JSON), the same strings to a JSON reader, nothing a terminal acts
// on. encoding/json writes each value in one Write.
func JSONOut(w io.Writer) io.Writer { return jsonWriter{w} }

type jsonWriter struct{ w io.Writer }

func (j jsonWriter) Write(p []byte) (int, error) {
	if _, err := j.w.Write(visible.JSON(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// WriteJSON prints v as indented JSON, without HTML escapes.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func Plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
