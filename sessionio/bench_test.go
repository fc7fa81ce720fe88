package sessionio

import (
	"bytes"
	"encoding/json"
	"github.com/compactor-dev/compactor/sessionio/jsonscan"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkReadTail reads the large generated sessions of `make bench-read` (in the directory
// COMPACTOR_BENCH_SESSIONS; skipped without it) with the needs the commands use, against a
// full read of the same file: the time of a tail read follows the live context, a full
// read's the file.
func BenchmarkReadTail(b *testing.B) {
	dir := os.Getenv("COMPACTOR_BENCH_SESSIONS")
	if dir == "" {
		b.Skip("COMPACTOR_BENCH_SESSIONS is not set (make bench-read sets it)")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if len(files) == 0 {
		b.Skip("no sessions in " + dir)
	}
	for _, file := range files {
		st, err := os.Stat(file)
		if err != nil {
			b.Fatal(err)
		}
		name := filepath.Base(file)
		for _, c := range []struct {
			name string
			need Need
			o    TailOptions
		}{
			{"assess", NeedMessages | NeedModel, TailOptions{}},
			{"plan", NeedContext | NeedRoot, TailOptions{DecodeContent: true}},
			{"context", NeedContext | NeedRoot | NeedFile, TailOptions{}},
		} {
			b.Run(name+"/tail-"+c.name, func(b *testing.B) {
				b.SetBytes(st.Size())
				b.ReportAllocs()
				for b.Loop() {
					if _, err := ReadTailWith(file, c.need, c.o); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		// With a checkpoint of the history (written by the first read, outside the timing):
		// only the lines after it are read.
		ck := &Checkpoints{Dir: b.TempDir()}
		for _, c := range []struct {
			name string
			need Need
			o    TailOptions
		}{
			{"plan", NeedContext | NeedRoot, TailOptions{DecodeContent: true, FileLater: true, Checkpoints: ck}},
			{"context", NeedContext | NeedRoot | NeedFile, TailOptions{LeaveMessagesOnDisk: true, Checkpoints: ck}},
		} {
			b.Run(name+"/checkpoint-"+c.name, func(b *testing.B) {
				if _, err := ReadTailWith(file, NeedContext|NeedRoot|NeedFile, TailOptions{Checkpoints: ck}); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(st.Size())
				b.ReportAllocs()
				for b.Loop() {
					if _, err := ReadTailWith(file, c.need, c.o); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		b.Run(name+"/tail-context-1worker", func(b *testing.B) { // the same without parallel batches
			seq := defaultSizes
			seq.workers = 1
			b.SetBytes(st.Size())
			b.ReportAllocs()
			for b.Loop() {
				f, err := os.Open(file)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := readTail(f, st.Size(), file, NeedContext|NeedRoot|NeedFile, TailOptions{}, seq, nil); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		})
		b.Run(name+"/full-light", func(b *testing.B) {
			b.SetBytes(st.Size())
			b.ReportAllocs()
			for b.Loop() {
				s, err := ReadFileWith(file, Options{Light: true})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Path(""); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkScanLines validates every line of 08-large as JSON.parse would and finds its
// members: compactor's one-pass scanner against encoding/json on the same lines (json.Valid,
// and the Unmarshal into raw members a reader built on encoding/json would do).
//
//	go test -run '^$' -bench ScanLines -benchmem ./sessionio
func BenchmarkScanLines(b *testing.B) {
	data, err := os.ReadFile("../testdata/corpus/08-large.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	b.Run("scanner", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		var ms []jsonscan.Member
		for b.Loop() {
			for _, l := range lines {
				var err error
				if ms, _, err = jsonscan.ScanObject(l, ms[:0]); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("encoding-json-valid", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			for _, l := range lines {
				if !json.Valid(l) {
					b.Fatal("invalid line")
				}
			}
		}
	})
	b.Run("encoding-json-unmarshal", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			for _, l := range lines {
				var m map[string]json.RawMessage
				if err := json.Unmarshal(l, &m); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
