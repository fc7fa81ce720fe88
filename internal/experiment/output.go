package experiment

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Output formats.
const (
	FormatTable = "table"
	FormatJSON  = "json"
	FormatCSV   = "csv"
	FormatHTML  = "html"
)

// Formats lists the formats Write knows.
func Formats() []string { return []string{FormatTable, FormatJSON, FormatCSV, FormatHTML} }

// FormatFor picks the output format: format when given (it must be one of Formats), else
// the one a known extension of out names (.json, .csv, .html, .htm, .txt), else the table
// when out is empty (standard output). Any other extension is refused, not written as a
// table under a name that says otherwise (report.xlsx).
func FormatFor(format, out string) (string, error) {
	if format != "" {
		if !slices.Contains(Formats(), format) {
			return "", fmt.Errorf("unknown format %q (want %s)", format, strings.Join(Formats(), ", "))
		}
		return format, nil
	}
	if out == "" {
		return FormatTable, nil
	}
	switch ext := strings.ToLower(filepath.Ext(out)); ext {
	case ".json":
		return FormatJSON, nil
	case ".csv":
		return FormatCSV, nil
	case ".html", ".htm":
		return FormatHTML, nil
	case ".txt":
		return FormatTable, nil
	default:
		return "", fmt.Errorf("%q: no known format has the extension %q (.json, .csv, .html, .htm, .txt); name the format (%s)", out, ext, strings.Join(Formats(), ", "))
	}
}

// Write renders the result in one format.
func Write(w io.Writer, r *Result, format string) error {
	switch format {
	case FormatTable:
		return WriteTable(w, r)
	case FormatJSON:
		return WriteJSON(w, r)
	case FormatCSV:
		return WriteCSV(w, r)
	case FormatHTML:
		return WriteHTML(w, r)
	}
	return fmt.Errorf("experiment: unknown format %q (want %s)", format, strings.Join(Formats(), ", "))
}

// WriteJSON writes the result as indented JSON.
func WriteJSON(w io.Writer, r *Result) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("experiment: encode json: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteCSV writes one table for notebooks: the replay rows when the run replayed, else the
// snapshot rows. Columns are the rows' JSON field names, in order.
func WriteCSV(w io.Writer, r *Result) error {
	cw := csv.NewWriter(w)
	var err error
	if r.Replayed {
		err = writeCSVRows(cw, r.Replay)
	} else {
		err = writeCSVRows(cw, r.Snapshot)
	}
	if err != nil {
		return err
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("experiment: write csv: %w", err)
	}
	return nil
}

func writeCSVRows[T any](cw *csv.Writer, rows []T) error {
	t := reflect.TypeFor[T]()
	header := make([]string, t.NumField())
	for i := range header {
		header[i] = jsonName(t.Field(i))
	}
	if err := cw.Write(header); err != nil {
		return fmt.Errorf("experiment: write csv: %w", err)
	}
	rec := make([]string, len(header))
	for _, row := range rows {
		v := reflect.ValueOf(row)
		for i := range rec {
			switch f := v.Field(i); f.Kind() {
			case reflect.String:
				rec[i] = f.String()
			case reflect.Int:
				rec[i] = strconv.FormatInt(f.Int(), 10)
			case reflect.Bool:
				rec[i] = strconv.FormatBool(f.Bool())
			default:
				rec[i] = fmt.Sprint(f.Interface())
			}
		}
		if err := cw.Write(rec); err != nil {
			return fmt.Errorf("experiment: write csv: %w", err)
		}
	}
	return nil
}

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "" {
		return f.Name
	}
	return name
}

// WriteTable writes the terminal report: the snapshot rows and their totals per policy,
// the replay rows and their totals when the run replayed, and the skipped files.
func WriteTable(w io.Writer, r *Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	window := "each session's catalog window"
	if r.ContextWindow > 0 {
		window = strconv.Itoa(r.ContextWindow)
	}
	fmt.Fprintf(w, "compactor experiment: %d files, %d sessions; counter %s, reserve %d, window %s\n\n",
		r.Files, r.Sessions, r.Counter, r.ReserveTokens, window)

	fmt.Fprintln(w, "SNAPSHOT (one plan per session, current path as on disk)")
	fmt.Fprintln(tw, "keep\tpolicy\tbefore\tkept\tsummarized\tprefix\tsplit\tdistance\tviolations\tpi?\tfile\t")
	for _, s := range r.Snapshot {
		if !s.Prepared {
			fmt.Fprintf(tw, "%d\t%s\t%s\t-\t-\t-\t-\t-\t-\t%s\t%s\t\n", s.KeepRecentTokens, s.Policy, num(s.TokensBefore), yes(s.AgreesWithPi), s.File+" (no plan)")
			continue
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t\n", s.KeepRecentTokens, s.Policy, num(s.TokensBefore),
			num(s.KeptTokens), num(s.SummarizedTokens), num(s.TurnPrefixTokens), yes(s.SplitTurn), num(s.TargetDistance),
			s.Violations, yes(s.AgreesWithPi), s.File)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nSNAPSHOT TOTALS (sums and means over prepared plans)")
	fmt.Fprintln(tw, "keep\tpolicy\tsessions\tprepared\tmean kept\tmean |distance|\tsplit turns\tsummarized\tprefix\tviolations\tagree with pi\t")
	for _, t := range r.SnapshotTotals {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%s\t%d\t%s\t%s\t%d\t%d\t\n", t.KeepRecentTokens, t.Policy, t.Sessions, t.Prepared,
			num(t.MeanKeptTokens), num(t.MeanAbsDistance), t.SplitTurns, num(t.SummarizedTokens), num(t.TurnPrefixTokens),
			t.Violations, t.AgreesWithPi)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Replayed {
		sum := r.Summarizer
		if r.Summarizer == SummarizerNone {
			sum = fmt.Sprintf("none (stand-in of %d tokens)", r.SummaryTokens)
		}
		fmt.Fprintf(w, "\nREPLAY (summarizer %s; context counted message by message)\n", sum)
		fmt.Fprintln(tw, "keep\tpolicy\tbudget\tentries\tcompactions\tstuck\tstill over\tcost\tmean kept\tmin kept\tmax context\tfinal\tviolations\tfile\t")
		for _, p := range r.Replay {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t\n", p.KeepRecentTokens, p.Policy, num(p.Budget),
				p.Entries, p.Compactions, p.Stuck, p.StillOverBudget, num(p.SummarizerTokens), num(p.MeanKeptTokens),
				num(p.MinKeptTokens), num(p.MaxContextTokens), num(p.FinalContextTokens), p.Violations, p.File)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w, "\nREPLAY TOTALS")
		fmt.Fprintln(tw, "keep\tpolicy\tsessions\tcompacted\tcompactions\tstuck\tstill over\tcost\tmean kept\tmin kept\tmax context\tviolations\t")
		for _, t := range r.ReplayTotals {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%d\t\n", t.KeepRecentTokens, t.Policy, t.Sessions, t.Compacted,
				t.Compactions, t.Stuck, t.StillOverBudget, num(t.SummarizerTokens), num(t.MeanKeptTokens), num(t.MinKeptTokens),
				num(t.MaxContextTokens), t.Violations)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.Errors) > 0 {
		fmt.Fprintf(w, "\nSKIPPED %d files\n", len(r.Errors))
		for _, e := range r.Errors {
			fmt.Fprintf(w, "  %s: %s\n", e.File, firstLine(e.Reason))
		}
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// num formats an integer with thousands separators (12,345).
func num(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
