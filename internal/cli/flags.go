package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/pipeline"
)

var errHelp = errors.New("help requested")

// newFlagSet returns a FlagSet that reports errors instead of exiting. args is the
// command's usage after its name ("FILE [--json] ..."); description says what it does.
// The flag package prints nothing itself: --help prints the usage once, on stdout (exit
// 0); a flag error prints the error and then the usage, both on stderr (exit 2), so a
// pipe into jq sees nothing but results.
func newFlagSet(env *Env, name, args, description string) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), env: env}
	if env.onFlagSet != nil {
		env.onFlagSet(fs.FlagSet, args, description) // the configuration reference (configref.go)
	}
	fs.SetOutput(io.Discard)
	fs.FlagSet.Usage = func() {}
	fs.usage = func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s\n\n%s\n\nFlags:\n", strings.TrimSpace(env.prog()+" "+args), strings.TrimSpace(description))
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// flagSet is a command's flags and its usage text.
type flagSet struct {
	*flag.FlagSet
	env   *Env
	usage func(io.Writer)
}

// parse parses args allowing flags and positional arguments in any order (compactor plan
// FILE --json as well as compactor plan --json FILE) and returns the positional ones.
func (fs *flagSet) parse(args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.usage(fs.env.Stdout)
				return nil, errHelp
			}
			return nil, &UsageError{Err: err, usage: fs.usage}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// oneFile is the positional-argument check of the commands that take one session file.
func oneFile(args []string) (string, error) {
	if len(args) != 1 {
		return "", usageErrorf("expected one session FILE, got %d arguments (see --help)", len(args))
	}
	return args[0], nil
}

// bindNATSFlags registers the NATS connection flags shared by run, sweep and enqueue, with
// defaults from the environment. Secrets given by flag are visible in the process list:
// prefer the environment or files for them.
func bindNATSFlags(fs *flag.FlagSet, c *pipeline.NATSConfig, getenv func(string) string) {
	env := func(keys ...string) string {
		for _, k := range keys {
			if v := getenv(k); v != "" {
				return v
			}
		}
		return ""
	}
	fs.StringVar(&c.URL, "nats-url", env("COMPACTOR_NATS_URL", "NATS_URL"), "NATS server URL (env COMPACTOR_NATS_URL, NATS_URL)")
	fs.StringVar(&c.User, "nats-user", env("NATS_USER"), "NATS user (env NATS_USER)")
	fs.StringVar(&c.Password, "nats-password", env("NATS_PASSWORD"), "NATS password (env NATS_PASSWORD)")
	fs.StringVar(&c.Token, "nats-token", env("NATS_TOKEN"), "NATS token (env NATS_TOKEN)")
	fs.StringVar(&c.NKeySeedFile, "nkey", env("NATS_NKEY"), "NATS nkey seed file (env NATS_NKEY)")
	fs.StringVar(&c.CredsFile, "creds", env("NATS_CREDS"), "NATS credentials file (env NATS_CREDS)")
	fs.StringVar(&c.TLSCA, "tls-ca", env("NATS_CA"), "CA certificate for NATS TLS (env NATS_CA)")
	fs.StringVar(&c.TLSCert, "tls-cert", env("NATS_CERT"), "client certificate for NATS TLS (env NATS_CERT)")
	fs.StringVar(&c.TLSKey, "tls-key", env("NATS_KEY"), "client key for NATS TLS (env NATS_KEY)")
}

// storeFlag collects repeatable --store NAME=DIR flags.
type storeFlag []pipeline.Store

func (s *storeFlag) String() string {
	parts := make([]string, len(*s))
	for i, st := range *s {
		parts[i] = st.Name + "=" + st.Dir
	}
	return strings.Join(parts, ",")
}

func (s *storeFlag) Set(v string) error {
	st, err := parseStore(v)
	if err != nil {
		return err
	}
	*s = append(*s, st)
	return nil
}

// parseStore parses a store NAME=DIR. A bare DIR is refused rather than named "default"
// silently: jobs carry the store's name, so it has to be the name the workers use.
func parseStore(spec string) (pipeline.Store, error) {
	name, dir, ok := strings.Cut(spec, "=")
	if !ok {
		return pipeline.Store{}, fmt.Errorf("%q: want NAME=DIR (for example default=%s)", spec, spec)
	}
	if err := pipeline.ValidateStoreName(name); err != nil {
		return pipeline.Store{}, fmt.Errorf("%q: %w", spec, err)
	}
	if dir == "" {
		return pipeline.Store{}, fmt.Errorf("%q: the directory is empty", spec)
	}
	return pipeline.Store{Name: name, Dir: dir}, nil
}

// defaultStores is the store list when neither --store nor COMPACTOR_STORES gives one.
const defaultStores = "default=./sessions"

// envStores reads COMPACTOR_STORES ("NAME=DIR,NAME2=DIR2"; default default=./sessions),
// the one place the variable is parsed (run, sweep and enqueue). It returns the spec it
// read for messages.
func envStores(getenv func(string) string) ([]pipeline.Store, string, error) {
	spec := getenv("COMPACTOR_STORES")
	if spec == "" {
		spec = defaultStores
	}
	var stores []pipeline.Store
	for _, part := range strings.FieldsFunc(spec, func(r rune) bool { return r == ',' || r == ';' }) {
		st, err := parseStore(strings.TrimSpace(part))
		if err != nil {
			return nil, spec, usageErrorf("COMPACTOR_STORES: %v", err)
		}
		stores = append(stores, st)
	}
	if len(stores) == 0 {
		return nil, spec, usageErrorf("COMPACTOR_STORES %q names no store", spec)
	}
	return stores, spec, nil
}

// spendFlag is --spend-limit, repeatable: [STORE=]TOKENS/hour or [STORE=]TOKENS/day.
type spendFlag []pipeline.SpendLimit

func (s *spendFlag) String() string {
	parts := make([]string, len(*s))
	for i, l := range *s {
		window := "day"
		if l.Window == time.Hour {
			window = "hour"
		}
		parts[i] = fmt.Sprintf("%d/%s", l.Tokens, window)
		if l.Store != "" {
			parts[i] = l.Store + "=" + parts[i]
		}
	}
	return strings.Join(parts, ",")
}

func (s *spendFlag) Set(v string) error {
	spec := v
	var l pipeline.SpendLimit
	if store, rest, ok := strings.Cut(spec, "="); ok {
		if err := pipeline.ValidateStoreName(store); err != nil {
			return fmt.Errorf("%q: %v", v, err)
		}
		l.Store, spec = store, rest
	}
	tokens, window, ok := strings.Cut(spec, "/")
	n, err := strconv.Atoi(strings.ReplaceAll(tokens, "_", ""))
	if !ok || err != nil || n < 1 {
		return fmt.Errorf("%q: want [STORE=]TOKENS/hour or [STORE=]TOKENS/day, TOKENS a positive number of input tokens", v)
	}
	switch window {
	case "hour", "h":
		l.Window = time.Hour
	case "day", "d":
		l.Window = 24 * time.Hour
	default:
		return fmt.Errorf("%q: the window %q is not hour or day", v, window)
	}
	l.Tokens = n
	*s = append(*s, l)
	return nil
}
