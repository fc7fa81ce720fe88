package cli

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor-dev/compactor/internal/natstest"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/wire"
)

func TestByteSizeFlag(t *testing.T) {
	for in, want := range map[string]int64{"1073741824": 1 << 30, "512MiB": 512 << 20, "1GiB": 1 << 30, "100MB": 100e6, "64 KiB": 64 << 10, "2kB": 2000} {
		var b byteSize
		if err := b.Set(in); err != nil || int64(b) != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "1.5GiB", "12XB", "-1", "99999999999TiB"} {
		var b byteSize
		if err := b.Set(in); err == nil {
			t.Errorf("Set(%q) = %d, want an error", in, b)
		}
	}
	for n, want := range map[int64]string{1 << 30: "1GiB", 3 << 20: "3MiB", 1000: "1000"} {
		if b := byteSize(n); b.String() != want {
			t.Errorf("byteSize(%d) = %s, want %s", n, b.String(), want)
		}
	}
}

// compactor setup sets the limits of the jobs and events streams from its flags (and
// refuses one that cannot be, naming the flag).
func TestSetupStreamLimits(t *testing.T) {
	t.Parallel()
	url := natstest.StartServer(t).ClientURL()
	if code, _, errs := runCLI(t, "setup", "--nats-url", url, "--store", "a", "--jobs-max-age", "1s"); code != 2 || !strings.Contains(errs, "--jobs-max-age: 1s: want at least the duplicate window") {
		t.Errorf("setup --jobs-max-age 1s: exit %d, %s; want 2 naming the flag", code, errs)
	}
	code, out, errs := runCLI(t, "setup", "--nats-url", url, "--store", "a", "--jobs-max-age", "48h", "--jobs-max-bytes", "256MiB", "--events-max-age", "12h", "--events-max-bytes", "64MiB")
	if code != 0 {
		t.Fatalf("setup: exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "jobs kept 48h0m0s and 256MiB at most, events 12h0m0s and 64MiB") {
		t.Errorf("setup's summary: %s", out)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	for name, want := range map[string]string{wire.StreamJobs: "48h0m0s 268435456", wire.StreamEvents: "12h0m0s 67108864"} {
		str, err := js.Stream(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		c := str.CachedInfo().Config
		if got := c.MaxAge.String() + " " + strconv.FormatInt(c.MaxBytes, 10); got != want {
			t.Errorf("%s: max age and bytes %s, want %s", name, got, want)
		}
	}
}

// compactor setup --prune: with the fleet's list (a), a dry run names what store b holds and
// removes nothing; the prune removes it (TestPruneRetiredStores in pipeline: the refusal
// while b's worker reports, and everything removed and kept).
func TestSetupPrune(t *testing.T) {
	t.Parallel()
	url := natstest.StartServer(t).ClientURL()
	if code, _, errs := runCLI(t, "setup", "--nats-url", url, "--store", "a", "--store", "b"); code != 0 {
		t.Fatalf("setup: exit %d: %s", code, errs)
	}
	if code, _, errs := runCLI(t, "setup", "--nats-url", url, "--dry-run", "--store", "a"); code != 2 || !strings.Contains(errs, "--dry-run goes with --prune") {
		t.Errorf("--dry-run alone: exit %d: %s", code, errs)
	}
	code, out, errs := runCLI(t, "setup", "--nats-url", url, "--store", "a", "--prune", "--dry-run")
	if code != 0 || !strings.Contains(out, "would remove store b") || !strings.Contains(out, "consumers compactor-b, compactor-dlq-b") {
		t.Fatalf("prune --dry-run: exit %d: %s%s", code, out, errs)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.Consumer(context.Background(), wire.StreamJobs, pipeline.ConsumerName("b")); err != nil {
		t.Fatalf("the dry run removed b's consumer: %v", err)
	}
	code, out, errs = runCLI(t, "setup", "--nats-url", url, "--store", "a", "--prune")
	t.Logf("setup --store a --prune:\n%s", out)
	if code != 0 || !strings.Contains(out, "removed store b") || !strings.Contains(out, "set up (layout 3): stores a;") {
		t.Fatalf("prune: exit %d: %s%s", code, out, errs)
	}
	if _, err := js.Consumer(context.Background(), wire.StreamJobs, pipeline.ConsumerName("b")); err == nil {
		t.Error("b's consumer is still there")
	}
}

// --nats-sync is the embedded server's: given with --nats-url it is refused, naming it; a bad
// value is refused too; `run --once` on the embedded server with always works.
func TestNATSSyncFlag(t *testing.T) {
	t.Parallel()
	store := t.TempDir()
	if code, _, errs := runCLI(t, "run", "--once", "--nats-url", "nats://127.0.0.1:1", "--store", "s="+store, "--nats-sync", "always"); code != 2 || !strings.Contains(errs, "--nats-sync: a setting of the embedded server") {
		t.Errorf("--nats-sync with --nats-url: exit %d: %s", code, errs)
	}
	if code, _, errs := runCLI(t, "run", "--once", "--store", "s="+store, "--nats-sync", "sometimes"); code != 2 || !strings.Contains(errs, "want always or a duration") {
		t.Errorf("--nats-sync sometimes: exit %d: %s", code, errs)
	}
	code, _, errs := runCLI(t, "run", "--once", "--store", "s="+store, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--nats-sync", "always", "--log-format", "json")
	if code != 0 || !strings.Contains(errs, `"sync":"always"`) {
		t.Errorf("run --once --nats-sync always: exit %d: %s", code, errs)
	}
}
