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
// snapshot rows. Columns are the rows' JSON field names, in order; nested values are
// flattened with dotted names (eval.recall.request.found), and an absent one (a row
// without an eval) leaves its cells empty.
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
	header := csvColumns(reflect.TypeFor[T](), "")
	if err := cw.Write(header); err != nil {
		return fmt.Errorf("experiment: write csv: %w", err)
	}
	for _, row := range rows {
		rec := csvValues(reflect.ValueOf(row), nil)
		if err := cw.Write(rec); err != nil {
			return fmt.Errorf("experiment: write csv: %w", err)
		}
	}
	return nil
}

// csvColumns names the leaf fields of t (exported fields only), depth first.
func csvColumns(t reflect.Type, prefix string) []string {
	switch t.Kind() {
	case reflect.Pointer:
		return csvColumns(t.Elem(), prefix)
	case reflect.Struct:
		var out []string
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() {
				out = append(out, csvColumns(f.Type, prefix+jsonName(f)+".")...)
			}
		}
		return out
	case reflect.Array:
		var out []string
		for i := range t.Len() {
			out = append(out, csvColumns(t.Elem(), prefix+strconv.Itoa(i)+".")...)
		}
		return out
	}
	return []string{strings.TrimSuffix(prefix, ".")}
}

// csvValues appends the leaf values of v in csvColumns' order; a nil pointer gives empty
// cells.
func csvValues(v reflect.Value, out []string) []string {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			for range csvColumns(v.Type(), "") {
				out = append(out, "")
			}
			return out
		}
		return csvValues(v.Elem(), out)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				out = csvValues(v.Field(i), out)
			}
		}
		return out
	case reflect.Array:
		for i := range v.Len() {
			out = csvValues(v.Index(i), out)
		}
		return out
	case reflect.String:
		return append(out, v.String())
	case reflect.Int:
		return append(out, strconv.FormatInt(v.Int(), 10))
	case reflect.Bool:
		return append(out, strconv.FormatBool(v.Bool()))
	}
	return append(out, fmt.Sprint(v.Interface()))
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
		if err := writeReplayTables(w, tw, r); err != nil {
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

// describeSummarizers names the replay's summarizers for a report's heading.
func describeSummarizers(r *Result) string {
	names := make([]string, len(r.Summarizers))
	for i, s := range r.Summarizers {
		names[i] = s
		if s == SummarizerNone {
			names[i] = fmt.Sprintf("none (stand-in of %d tokens)", r.SummaryTokens)
		}
	}
	return strings.Join(names, ", ")
}

func writeReplayTables(w io.Writer, tw *tabwriter.Writer, r *Result) error {
	fmt.Fprintf(w, "\nREPLAY (summarizer %s; context counted message by message)\n", describeSummarizers(r))
	evalCols := ""
	if r.Evaluated {
		evalCols = "mean summary\tfacts recalled\t"
	}
	fmt.Fprintln(tw, "keep\tpolicy\tsummarizer\tbudget\tentries\tcompactions\tstuck\tstill over\tcost\tmean kept\tmin kept\tmax context\tfinal\tviolations\t"+evalCols+"file\t")
	for _, p := range r.Replay {
		ev := ""
		if p.Eval != nil {
			ev = fmt.Sprintf("%s\t%s\t", num(p.Eval.SummaryTokensMean), recallCell(p.Eval.Recall.Facts()))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s%s\t\n", p.KeepRecentTokens, p.Policy, p.Summarizer, num(p.Budget),
			p.Entries, p.Compactions, p.Stuck, p.StillOverBudget, num(p.SummarizerTokens), num(p.MeanKeptTokens),
			num(p.MinKeptTokens), num(p.MaxContextTokens), num(p.FinalContextTokens), p.Violations, ev, p.File)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nREPLAY TOTALS")
	llm := slices.Contains(r.Summarizers, SummarizerLLM)
	llmCols := ""
	if llm {
		llmCols = "llm calls\tinput tokens\tcached\toutput tokens\t"
	}
	fmt.Fprintln(tw, "keep\tpolicy\tsummarizer\tsessions\tcompacted\tcompactions\tstuck\tstill over\tlists shortened\tcost\tmean kept\tmin kept\tmax context\tviolations\t"+llmCols)
	for _, t := range r.ReplayTotals {
		l := ""
		if llm {
			l = fmt.Sprintf("%d\t%s\t%s\t%s\t", t.LLMCalls, num(t.LLMInputTokens), num(t.LLMCachedInputTokens), num(t.LLMOutputTokens))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%d\t%s\n", t.KeepRecentTokens, t.Policy, t.Summarizer, t.Sessions, t.Compacted,
			t.Compactions, t.Stuck, t.StillOverBudget, t.ShortenedLists, num(t.SummarizerTokens), num(t.MeanKeptTokens), num(t.MinKeptTokens),
			num(t.MaxContextTokens), t.Violations, l)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !r.Evaluated {
		return nil
	}
	fmt.Fprintln(w, "\nRECALL (the probes of each summarized span, found in the context right after its compaction: % found of probes;")
	fmt.Fprintln(w, "facts = every kind but the two file lists; summary = tokens of the compaction summary, file lists included)")
	head := "keep\tpolicy\tsummarizer\tcompactions\tmean summary\tof it file lists\tmax summary\t"
	for _, k := range ProbeKinds() {
		head += k + "\t"
	}
	fmt.Fprintln(tw, head+"facts\t")
	for _, t := range r.ReplayTotals {
		if t.Recall == nil {
			continue
		}
		line := fmt.Sprintf("%d\t%s\t%s\t%d\t%s\t%s\t%s\t", t.KeepRecentTokens, t.Policy, t.Summarizer, t.Compactions, num(t.SummaryTokensMean), num(t.FileListTokensMean), num(t.SummaryTokensMax))
		for _, k := range ProbeKinds() {
			line += recallCell(*t.Recall.Kind(k)) + "\t"
		}
		fmt.Fprintln(tw, line+recallCell(t.Recall.Facts())+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nFIRST SPAN (each session's first compacted span, checked again after its n-th compaction; sessions = those that got that far)")
	head = "keep\tpolicy\tsummarizer\tafter\tsessions\tmean summary\tfacts\tfiles\t"
	for _, k := range ProbeKinds()[2:] {
		head += k + "\t"
	}
	fmt.Fprintln(tw, head)
	for _, e := range r.EarlyTotals {
		line := fmt.Sprintf("%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t", e.KeepRecentTokens, e.Policy, e.Summarizer, e.After, e.Sessions, num(e.SummaryTokensMean),
			recallCell(Recall{Probes: e.FactProbes, Found: e.FactsFound}), recallCell(Recall{Probes: e.FileProbes, Found: e.FilesFound}))
		for _, k := range ProbeKinds()[2:] {
			line += recallCell(*e.FirstSpan.Kind(k)) + "\t"
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

// recallCell is "95.2% of 124", or "-" with no probes.
func recallCell(r Recall) string {
	if r.Probes == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%% of %s", r.Percent(), num(r.Probes))
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
