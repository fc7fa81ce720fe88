// Command read is `make bench-read`: whole-process timings of reading sessions, compactor
// against the real Pi (interop/pi/pi) measured in the same run, and compactor on long-lived
// sessions against the same sessions holding only their live context.
//
//	go run ./bench/read -dir .compactor/bench-read -compactor bin/compactor -pi interop/pi/pi
//
// The sessions are generated on first use into -dir by gen-sessions.mjs with Pi's own
// SessionManager (Node and the Pi harness's install are needed once; nothing large is in the
// repository). Wall times are medians of -runs runs with hyperfine when it is installed, else
// with this program's own timer; the commands of one comparison run interleaved (A B A B ...)
// with the own timer, so that a load spike on the machine hits both sides. Peak memory is the
// maximum resident set size the kernel reports for the process (wait4/rusage), the largest of
// the runs.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	dir := flag.String("dir", ".compactor/bench-read", "where the generated sessions are kept (created on first use)")
	compactor := flag.String("compactor", "bin/compactor", "the compactor binary to measure")
	oracle := flag.String("pi", "interop/pi/pi", "the Pi harness (the real Pi; PI_VERSION picks the version)")
	runs := flag.Int("runs", 7, "runs per command (the median is reported)")
	history := flag.String("history", "5,10,20", "compaction counts of the long-lived sessions")
	piHistory := flag.Bool("pi-history", false, "also time Pi on the long-lived sessions (slow: ~100 MiB)")
	timer := flag.String("timer", "auto", "auto (hyperfine when installed), hyperfine or own")
	flag.Parse()
	b := &bench{dir: *dir, compactor: *compactor, oracle: *oracle, runs: *runs}
	switch *timer {
	case "auto":
		_, err := exec.LookPath("hyperfine")
		b.hyperfine = err == nil
	case "hyperfine":
		b.hyperfine = true
	case "own":
	default:
		fail(fmt.Errorf("-timer %q: want auto, hyperfine or own", *timer))
	}
	if err := b.run(strings.Split(*history, ","), *piHistory); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench-read:", err)
	os.Exit(1)
}

type bench struct {
	dir, compactor, oracle string
	runs                   int
	hyperfine              bool
}

// result is one command's measurement.
type result struct {
	name      string
	median    time.Duration
	min, max  time.Duration
	peakRSSKB int64
}

func (b *bench) run(history []string, piHistory bool) error {
	if _, err := os.Stat(b.compactor); err != nil {
		return fmt.Errorf("compactor binary: %w (run make build)", err)
	}
	if err := b.generate(history); err != nil {
		return err
	}
	timerName := "own timer (interleaved)"
	if b.hyperfine {
		timerName = "hyperfine -N"
	}
	fmt.Printf("# bench-read: medians of %d runs (%s), peak RSS from wait4\n\n", b.runs, timerName)
	if err := b.runLarge(); err != nil {
		return err
	}
	fmt.Println("\n## Long-lived sessions: history-N (N compactions) against live-N (the same live context, no history)")
	fmt.Println()
	fmt.Println("With a checkpoint (the steady state: written by the first read of the file, the warm-up run here),")
	fmt.Println("the first read of the file (it writes the checkpoint; a fresh checkpoint directory each run, own timer),")
	fmt.Println("and with --checkpoints off. The live session is read the same way each time. Every output with a")
	fmt.Println("checkpoint was checked byte for byte against the full read's (--checkpoints off).")
	fmt.Println()
	fmt.Println("| session | size | command | history read | with history | peak RSS | live context only | peak RSS | ratio | same result |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	ckDir := filepath.Join(b.dir, "checkpoints")
	if err := os.RemoveAll(ckDir); err != nil {
		return err
	}
	for _, n := range history {
		if err := b.runHistory(n, ckDir, piHistory); err != nil {
			return err
		}
	}
	rs, err := b.measure([]string{b.compactor, "--help"})
	if err != nil {
		return err
	}
	fmt.Printf("\nstart-up alone (`compactor --help`): %s, %.1f MiB peak RSS\n", ms(rs[0].median), kib(rs[0].peakRSSKB))
	return nil
}

// runLarge measures context and plan of the large Pi-written session against the Pi harness.
func (b *bench) runLarge() error {
	large := b.file("large.jsonl")
	st, err := os.Stat(large)
	if err != nil {
		return err
	}
	fmt.Printf("## %s (%.1f MiB, Pi-written: tool calls, long outputs, images, unicode, branches, compactions)\n\n", filepath.Base(large), mib(st.Size()))
	fmt.Println("compactor with --checkpoints off: every line is read, as on the first read of a file.")
	fmt.Println()
	piVersion, err := exec.Command(b.oracle, "version").Output()
	if err != nil {
		return fmt.Errorf("%s version: %w", b.oracle, err)
	}
	fmt.Printf("| command | compactor | peak RSS | Pi %s | Pi peak RSS | ratio (compactor / Pi) |\n", strings.TrimSpace(string(piVersion)))
	fmt.Println("|---|---|---|---|---|---|")
	for _, c := range []struct{ ours, pi []string }{
		{[]string{b.compactor, "context", large, "--json", "--checkpoints", "off"}, []string{b.oracle, "context", large, "--compact"}},
		{[]string{b.compactor, "plan", large, "--json", "--checkpoints", "off"}, []string{b.oracle, "cut", large, "--compact"}},
	} {
		rs, err := b.measure(c.ours, c.pi)
		if err != nil {
			return err
		}
		fmt.Printf("| `compactor %s` vs `interop/pi/pi %s` | %s | %.1f MiB | %s | %.1f MiB | **%.3fx** |\n",
			c.ours[1], c.pi[1], ms(rs[0].median), kib(rs[0].peakRSSKB), ms(rs[1].median), kib(rs[1].peakRSSKB),
			float64(rs[0].median)/float64(rs[1].median))
	}
	fmt.Printf("\nfile size + 16 MiB = %.1f MiB (the memory bound for context)\n", mib(st.Size())+16)

	return nil
}

// runHistory measures context and plan of history-n against live-n, with a checkpoint, on
// the first read and without, and with piHistory context against the Pi harness too.
func (b *bench) runHistory(n, ckDir string, piHistory bool) error {
	hist, live := b.file("history-"+n+".jsonl"), b.file("live-"+n+".jsonl")
	hs, _ := os.Stat(hist)
	ls, _ := os.Stat(live)
	for _, cmd := range []string{"context", "plan"} {
		same, err := b.sameResult(cmd, hist, live)
		if err != nil {
			return err
		}
		if err := b.sameBytes(cmd, hist, ckDir); err != nil {
			return err
		}
		liveCmd := []string{b.compactor, cmd, live, "--json", "--checkpoints", ckDir}
		for _, mode := range []string{"checkpoint", "first read", "no checkpoint"} {
			var rs []result
			switch mode {
			case "checkpoint":
				rs, err = b.measure([]string{b.compactor, cmd, hist, "--json", "--checkpoints", ckDir}, liveCmd)
			case "first read":
				rs, err = b.measureFresh([]string{b.compactor, cmd, hist, "--json", "--checkpoints"}, liveCmd, filepath.Join(b.dir, "checkpoints-fresh"))
			default:
				rs, err = b.measure([]string{b.compactor, cmd, hist, "--json", "--checkpoints", "off"}, liveCmd)
			}
			if err != nil {
				return err
			}
			fmt.Printf("| history-%s | %.1f MiB (live %.1f MiB) | %s | %s | %s | %.1f MiB | %s | %.1f MiB | **%.2fx** | %s |\n",
				n, mib(hs.Size()), mib(ls.Size()), cmd, mode, ms(rs[0].median), kib(rs[0].peakRSSKB), ms(rs[1].median), kib(rs[1].peakRSSKB),
				float64(rs[0].median)/float64(rs[1].median), same)
		}
	}
	if piHistory {
		rs, err := b.measure([]string{b.compactor, "context", hist, "--json", "--checkpoints", "off"}, []string{b.oracle, "context", hist, "--compact"})
		if err != nil {
			return err
		}
		fmt.Printf("| history-%s | | context vs Pi | no checkpoint | %s | %.1f MiB | Pi: %s | %.1f MiB | **%.3fx** | |\n",
			n, ms(rs[0].median), kib(rs[0].peakRSSKB), ms(rs[1].median), kib(rs[1].peakRSSKB), float64(rs[0].median)/float64(rs[1].median))
	}
	return nil
}

// sameResult compares what the two files must agree on: the context (messages, thinking
// level, model) for context; for plan every field but the file, the path length and the path
// indices (the live file's path is shorter by the history).
func (b *bench) sameResult(cmd, hist, live string) (string, error) {
	get := func(file string) (map[string]any, error) {
		out, err := exec.Command(b.compactor, cmd, file, "--json", "--checkpoints", "off").Output()
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", cmd, file, err)
		}
		var v map[string]any
		if err := json.Unmarshal(out, &v); err != nil {
			return nil, err
		}
		if cmd == "context" {
			return map[string]any{"context": v["context"], "leafId": v["leafId"], "messageEntryIds": v["messageEntryIds"]}, nil
		}
		for _, k := range []string{"file", "pathLength", "firstKeptEntryIndex", "turnStartIndex", "boundaryStartIndex"} {
			delete(v, k)
		}
		return v, nil
	}
	a, err := get(hist)
	if err != nil {
		return "", err
	}
	c, err := get(live)
	if err != nil {
		return "", err
	}
	if reflect.DeepEqual(a, c) {
		return "yes", nil
	}
	for k := range a {
		if !reflect.DeepEqual(a[k], c[k]) {
			return "NO (" + k + ")", nil
		}
	}
	return "NO", nil
}

// sameBytes checks that cmd prints the same bytes with the checkpoint as with a full read.
func (b *bench) sameBytes(cmd, file, ckDir string) error {
	var outs [][]byte
	for _, ck := range []string{ckDir, ckDir, "off"} { // writes it (if new), reads through it, reads every line
		out, err := exec.Command(b.compactor, cmd, file, "--json", "--checkpoints", ck).Output()
		if err != nil {
			return fmt.Errorf("%s %s: %w", cmd, file, err)
		}
		outs = append(outs, out)
	}
	if !bytes.Equal(outs[0], outs[2]) || !bytes.Equal(outs[1], outs[2]) {
		return fmt.Errorf("%s %s: the output with a checkpoint is not the full read's", cmd, file)
	}
	return nil
}

func (b *bench) file(name string) string { return filepath.Join(b.dir, name) }

// generate writes the sessions that are missing, with Pi's SessionManager.
func (b *bench) generate(history []string) error {
	specs := []string{}
	if _, err := os.Stat(b.file("large.jsonl")); err != nil {
		specs = append(specs, "large")
	}
	for _, n := range history {
		for _, f := range []string{"history-" + n + ".jsonl", "live-" + n + ".jsonl"} {
			if _, err := os.Stat(b.file(f)); err != nil {
				specs = append(specs, "history:"+n)
				break
			}
		}
	}
	if len(specs) == 0 {
		return nil
	}
	where, err := exec.Command(b.oracle, "where").Output()
	if err != nil {
		return fmt.Errorf("%s where: %w (generating the sessions needs the installed Pi: interop/pi/pi install)", b.oracle, err)
	}
	gen, err := filepath.Abs("bench/read/gen-sessions.mjs")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(b.dir, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "generating %s into %s with Pi's SessionManager...\n", strings.Join(specs, " "), b.dir)
	cmd := exec.Command(b.oracle, append([]string{"exec", gen, "--pi", strings.TrimSpace(string(where)), "--out", b.dir}, specs...)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

// measure times the commands; with the own timer their runs are interleaved.
func (b *bench) measure(cmds ...[]string) ([]result, error) {
	res := make([]result, len(cmds))
	times := make([][]time.Duration, len(cmds))
	for i, c := range cmds {
		res[i].name = strings.Join(c, " ")
		if _, _, err := once(c); err != nil { // warm-up, and a check that it works
			return nil, err
		}
	}
	own := b.runs
	if b.hyperfine {
		own = 3 // hyperfine times; three runs of our own are for the peak memory
	}
	for r := 0; r < own; r++ {
		for i, c := range cmds {
			d, rss, err := once(c)
			if err != nil {
				return nil, err
			}
			times[i] = append(times[i], d)
			res[i].peakRSSKB = max(res[i].peakRSSKB, rss)
		}
	}
	if b.hyperfine {
		return b.viaHyperfine(cmds, res)
	}
	for i := range res {
		slices.Sort(times[i])
		res[i].median, res[i].min, res[i].max = times[i][len(times[i])/2], times[i][0], times[i][len(times[i])-1]
	}
	return res, nil
}

func (b *bench) viaHyperfine(cmds [][]string, res []result) ([]result, error) {
	tmp, err := os.CreateTemp("", "bench-read-*.json")
	if err != nil {
		return nil, err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	args := []string{"-N", "--warmup", "1", "--runs", fmt.Sprint(b.runs), "--style", "none", "--export-json", tmp.Name()}
	for _, c := range cmds {
		args = append(args, shellJoin(c))
	}
	cmd := exec.Command("hyperfine", args...)
	cmd.Stdout = io.Discard
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("hyperfine: %w: %s", err, stderr.String())
	}
	data, err := os.ReadFile(tmp.Name())
	if err != nil {
		return nil, err
	}
	var out struct {
		Results []struct {
			Median, Min, Max float64
		} `json:"results"`
	}
	if err := json.Unmarshal(data, &out); err != nil || len(out.Results) != len(cmds) {
		return nil, fmt.Errorf("hyperfine output: %v", err)
	}
	for i, r := range out.Results {
		res[i].median = time.Duration(r.Median * float64(time.Second))
		res[i].min = time.Duration(r.Min * float64(time.Second))
		res[i].max = time.Duration(r.Max * float64(time.Second))
	}
	return res, nil
}

// measureFresh times first (its last argument the directory of checkpoints: a new, empty one
// each run) against other, interleaved, with the own timer.
func (b *bench) measureFresh(first, other []string, dir string) ([]result, error) {
	res := make([]result, 2)
	times := make([][]time.Duration, 2)
	for r := 0; r < b.runs; r++ {
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
		for i, c := range [][]string{append(slices.Clone(first), dir), other} {
			d, rss, err := once(c)
			if err != nil {
				return nil, err
			}
			times[i] = append(times[i], d)
			res[i].peakRSSKB = max(res[i].peakRSSKB, rss)
		}
	}
	for i := range res {
		slices.Sort(times[i])
		res[i].median, res[i].min, res[i].max = times[i][len(times[i])/2], times[i][0], times[i][len(times[i])-1]
	}
	return res, nil
}

// once runs a command with its output discarded and returns its wall time and peak RSS (KiB).
func once(c []string) (time.Duration, int64, error) {
	cmd := exec.Command(c[0], c[1:]...)
	cmd.Stdout = io.Discard
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 0 {
			return 0, 0, fmt.Errorf("%s: %w: %s", strings.Join(c, " "), err, stderr.String())
		}
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return d, 0, nil
	}
	return d, ru.Maxrss, nil // Linux: kilobytes
}

func shellJoin(c []string) string {
	q := make([]string, len(c))
	for i, a := range c {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }
func mib(n int64) float64       { return float64(n) / (1 << 20) }
func kib(n int64) float64       { return float64(n) / 1024 }
