package command

import (
	"io"
	"log/slog"
	"os"

	"golang.org/x/term"
)

// NewLogger builds the service log: text on a terminal, JSON elsewhere, with durations in
// seconds in JSON (a float, as Prometheus counts time) rather than Go's nanoseconds. Its
// level is lv, set from level here (a reload sets it again).
func NewLogger(w io.Writer, format, level string, lv *slog.LevelVar) (*slog.Logger, error) {
	if err := ParseLevel(level, lv); err != nil {
		return nil, err
	}
	if format == "" {
		format = "json"
		if IsTerminal(w) {
			format = "text"
		}
	}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lv})), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lv, ReplaceAttr: durationSeconds})), nil
	}
	return nil, Usagef("--log-format: %q is not text or json", format)
}

// ParseLevel sets lv from a --log-level value.
func ParseLevel(level string, lv *slog.LevelVar) error {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return Usagef("--log-level: %v", err)
	}
	lv.Set(l)
	return nil
}

func durationSeconds(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.Float64Value(a.Value.Duration().Seconds())
	}
	return a
}

// IsTerminal reports whether w is a terminal (progress and human summaries are drawn for
// people; pipes and files get plain lines).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
