package command

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/spend"
	"github.com/compactor-dev/compactor/wire"
)

var ErrHelp = errors.New("help requested")

// NewFlagSet returns a FlagSet that reports errors instead of exiting. args is the
// command's usage after its name ("FILE [--json] ..."); description says what it does.
// The flag package prints nothing itself: --help prints the usage once, on stdout (exit
// 0); a flag error prints the error and then the usage, both on stderr (exit 2), so a
// pipe into jq sees nothing but results.
func NewFlagSet(env *Env, name, args, description string) *FlagSet {
	fs := &FlagSet{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), env: env}
	if env.OnFlagSet != nil {
		env.OnFlagSet(fs.FlagSet, args, description) // the configuration reference (cli.Describe)
	}
	fs.SetOutput(io.Discard)
	fs.FlagSet.Usage = func() {}
	fs.usage = func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s\n\n%s\n\nFlags:\n", strings.TrimSpace(env.ProgName()+" "+args), strings.TrimSpace(description))
		printFlags(w, fs.FlagSet)
	}
	return fs
}

// placeholderer is a flag value that names its own placeholder in the help.
type placeholderer interface{ Placeholder() string }

// FlagPlaceholder is the word --help shows after a flag: none for a boolean; the
// backticked word of its usage when that is a placeholder (no space, an upper-case letter:
// NAME=DIR, BYTES), else the value's own name or its type (string, int, duration). A
// backticked command or example in a usage text (` + "`compactor setup`" + `) is no placeholder.
func FlagPlaceholder(f *flag.Flag) (name, usage string) {
	name, usage = flag.UnquoteUsage(f)
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return "", usage
	}
	if p, ok := f.Value.(placeholderer); ok {
		return p.Placeholder(), usage
	}
	if _, ok := f.Value.(*secretString); ok {
		return "string", usage
	}
	if strings.Contains(f.Usage, "`") && (strings.ContainsAny(name, " \t") || strings.ToLower(name) == name) {
		// The type's name, as the flag package gives it without a backticked word.
		name, _ = flag.UnquoteUsage(&flag.Flag{Name: f.Name, Value: f.Value, Usage: strings.ReplaceAll(f.Usage, "`", "")})
	}
	return name, usage
}

// printFlags prints a flag set's flags as flag.PrintDefaults does, with flagPlaceholder's
// placeholders.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := FlagPlaceholder(f)
		var b strings.Builder
		fmt.Fprintf(&b, "  -%s", f.Name)
		if name != "" {
			b.WriteString(" " + name)
		}
		b.WriteString("\n    \t")
		b.WriteString(strings.ReplaceAll(usage, "\n", "\n    \t"))
		if !zeroDefault(f) {
			if isStringFlag(f) {
				fmt.Fprintf(&b, " (default %q)", f.DefValue)
			} else {
				fmt.Fprintf(&b, " (default %v)", f.DefValue)
			}
		}
		fmt.Fprintln(w, b.String())
	})
}

// isStringFlag reports whether f is a flag.String (its default is quoted, as
// flag.PrintDefaults quotes it).
func isStringFlag(f *flag.Flag) bool {
	return fmt.Sprintf("%T", f.Value) == "*flag.stringValue"
}

// zeroDefault reports whether the flag's default is what its type's zero value prints
// (not printed, as flag.PrintDefaults does).
func zeroDefault(f *flag.Flag) bool {
	t := reflect.TypeOf(f.Value)
	var z reflect.Value
	if t.Kind() == reflect.Pointer {
		z = reflect.New(t.Elem())
	} else {
		z = reflect.Zero(t)
	}
	v, ok := z.Interface().(flag.Value)
	if !ok {
		return f.DefValue == ""
	}
	return f.DefValue == v.String()
}

// FlagSet is a command's flags and its usage text.
type FlagSet struct {
	*flag.FlagSet
	env   *Env
	usage func(io.Writer)
}

// ParseConfigured is ParseArgs for a command that also reads --config (configFile, the flag
// being parsed, read once the command line is): the file's settings
// apply to the flags not given on the command line (those of the service alone skipped),
// and an argument is refused unless the command takes positional ones (takesArgs).
func (fs *FlagSet) ParseConfigured(args []string, configFile *string, takesArgs bool) ([]string, error) {
	pos, err := fs.ParseArgs(args)
	if err != nil {
		return nil, err
	}
	if err := ApplyConfigFile(fs.FlagSet, *configFile, ServiceSetting); err != nil {
		return nil, err
	}
	if !takesArgs && len(pos) > 0 {
		return nil, Usagef("unexpected argument %q", pos[0])
	}
	return pos, nil
}

// ParseArgs parses args allowing flags and positional arguments in any order (compactor plan
// FILE --json as well as compactor plan --json FILE) and returns the positional ones.
func (fs *FlagSet) ParseArgs(args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.usage(fs.env.Stdout)
				return nil, ErrHelp
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

// OneFile is the positional-argument check of the commands that take one session file.
func OneFile(args []string) (string, error) {
	if len(args) != 1 {
		return "", Usagef("expected one session FILE, got %d arguments (see --help)", len(args))
	}
	return args[0], nil
}

// natsEnv are the environment variables of the NATS connection, read as the Pi extension
// reads them (extensions/pi/src/config.ts): COMPACTOR_NATS_<NAME> first, then NATS_*. The
// two sides agree on every name (TestNATSEnvParity and the extension's test read one
// table: extensions/pi/test/testdata/env-parity.json).
var natsEnv = []struct {
	flag   string
	keys   []string
	secret bool // the flag's default (from the environment) is never printed
	field  func(*access.NATSConfig) *string
	usage  string
}{
	{"nats-url", []string{"COMPACTOR_NATS_URL", "NATS_URL"}, false, func(c *access.NATSConfig) *string { return &c.URL }, "NATS server URL(s), comma-separated"},
	{"nats-user", []string{"COMPACTOR_NATS_USER", "NATS_USER"}, false, func(c *access.NATSConfig) *string { return &c.User }, "NATS user"},
	{"nats-password", []string{"COMPACTOR_NATS_PASSWORD", "NATS_PASSWORD"}, true, func(c *access.NATSConfig) *string { return &c.Password }, "NATS `password` (visible to every user in the process list when given here: prefer the environment)"},
	{"nats-token", []string{"COMPACTOR_NATS_TOKEN", "NATS_TOKEN"}, true, func(c *access.NATSConfig) *string { return &c.Token }, "NATS `token` (visible to every user in the process list when given here: prefer the environment)"},
	{"nats-password-file", []string{"COMPACTOR_NATS_PASSWORD_FILE"}, false, func(c *access.NATSConfig) *string { return &c.PasswordFile }, "file holding the NATS password (its content, trimmed)"},
	{"nats-token-file", []string{"COMPACTOR_NATS_TOKEN_FILE"}, false, func(c *access.NATSConfig) *string { return &c.TokenFile }, "file holding the NATS token (its content, trimmed); without any credentials, a local service's generated token (--data-dir's nats.token) is used"},
	{"nkey", []string{"COMPACTOR_NATS_NKEY", "NATS_NKEY"}, false, func(c *access.NATSConfig) *string { return &c.NKeySeedFile }, "NATS nkey seed file"},
	{"creds", []string{"COMPACTOR_NATS_CREDS", "NATS_CREDS"}, false, func(c *access.NATSConfig) *string { return &c.CredsFile }, "NATS credentials file"},
	{"tls-ca", []string{"COMPACTOR_NATS_TLS_CA", "NATS_CA"}, false, func(c *access.NATSConfig) *string { return &c.TLSCA }, "CA certificate for NATS TLS"},
	{"tls-cert", []string{"COMPACTOR_NATS_TLS_CERT", "NATS_CERT"}, false, func(c *access.NATSConfig) *string { return &c.TLSCert }, "client certificate for NATS TLS"},
	{"tls-key", []string{"COMPACTOR_NATS_TLS_KEY", "NATS_KEY"}, false, func(c *access.NATSConfig) *string { return &c.TLSKey }, "client key for NATS TLS"},
	{"inbox-prefix", []string{"COMPACTOR_NATS_INBOX_PREFIX"}, false, func(c *access.NATSConfig) *string { return &c.InboxPrefix },
		"where replies come (default _INBOX_<role>_<first store>, as `compactor auth` permits each role; docs/security.md)"},
}

// FirstEnv is the first of keys that is set and not empty.
func FirstEnv(getenv func(string) string, keys ...string) string {
	for _, k := range keys {
		if v := getenv(k); v != "" {
			return v
		}
	}
	return ""
}

// NATSFromEnv is the NATS connection the environment gives, before any flag.
func NATSFromEnv(getenv func(string) string) access.NATSConfig {
	var c access.NATSConfig
	for _, e := range natsEnv {
		*e.field(&c) = FirstEnv(getenv, e.keys...)
	}
	return c
}

// BindNATSFlags registers the NATS connection flags shared by run, sweep, enqueue and
// dlq, with defaults from the environment (natsEnv). A secret's default is not printed by
// --help.
func BindNATSFlags(fs *flag.FlagSet, c *access.NATSConfig, getenv func(string) string) {
	*c = NATSFromEnv(getenv)
	for _, e := range natsEnv {
		usage := fmt.Sprintf("%s (env %s)", e.usage, strings.Join(e.keys, ", "))
		if e.secret {
			fs.Var((*secretString)(e.field(c)), e.flag, usage)
			continue
		}
		fs.StringVar(e.field(c), e.flag, *e.field(c), usage)
	}
}

// secretString is a string flag whose value --help never prints.
type secretString string

func (s *secretString) String() string     { return "" }
func (s *secretString) Set(v string) error { *s = secretString(v); return nil }

// StoreFlag collects repeatable --store NAME=DIR flags.
type StoreFlag []pipeline.Store

func (s *StoreFlag) String() string {
	parts := make([]string, len(*s))
	for i, st := range *s {
		parts[i] = st.Name + "=" + st.Dir
	}
	return strings.Join(parts, ",")
}

func (s *StoreFlag) Set(v string) error {
	st, err := ParseStore(v)
	if err != nil {
		return err
	}
	*s = append(*s, st)
	return nil
}

// ParseStore parses a store NAME=DIR. A bare DIR is refused rather than named "default"
// silently: jobs carry the store's name, so it has to be the name the workers use. (The Pi
// extension refuses it too, and skips it.)
func ParseStore(spec string) (pipeline.Store, error) {
	name, dir, ok := strings.Cut(spec, "=")
	if !ok {
		return pipeline.Store{}, fmt.Errorf("%q: want NAME=DIR (for example default=%s)", spec, spec)
	}
	if err := wire.ValidateStoreName(name); err != nil {
		return pipeline.Store{}, fmt.Errorf("%q: %w", spec, err)
	}
	if dir == "" {
		return pipeline.Store{}, fmt.Errorf("%q: the directory is empty", spec)
	}
	return pipeline.Store{Name: name, Dir: dir}, nil
}

// DefaultStores describes the store list when neither --store nor COMPACTOR_STORES gives
// one: Pi's own session directory, as the Pi extension's default (DefaultStoresSpec).
const DefaultStores = "default=<Pi's agent dir>/sessions ($PI_CODING_AGENT_DIR, else ~/.pi/agent)"

// DefaultStoresSpec is the default store list: store "default" at Pi's session directory,
// <agent dir>/sessions, where Pi's agent directory is $PI_CODING_AGENT_DIR (a leading ~
// is the home directory) or ~/.pi/agent, as Pi's getAgentDir says.
func DefaultStoresSpec(getenv func(string) string) string {
	home, _ := os.UserHomeDir()
	dir := getenv("PI_CODING_AGENT_DIR")
	switch {
	case dir == "":
		dir = filepath.Join(home, ".pi", "agent")
	case dir == "~":
		dir = home
	case strings.HasPrefix(dir, "~/"):
		dir = filepath.Join(home, dir[2:])
	}
	return pipeline.DefaultStoreName + "=" + filepath.Join(dir, "sessions")
}

// EnvStores reads COMPACTOR_STORES ("NAME=DIR,NAME2=DIR2", parts split on ',' or ';' and
// trimmed; default: DefaultStoresSpec), the one place the variable is parsed (run, sweep
// and enqueue), as the Pi extension parses it. It returns the spec it read for messages.
func EnvStores(getenv func(string) string) ([]pipeline.Store, string, error) {
	spec := getenv("COMPACTOR_STORES")
	if spec == "" {
		spec = DefaultStoresSpec(getenv)
	}
	var stores []pipeline.Store
	for _, part := range strings.FieldsFunc(spec, func(r rune) bool { return r == ',' || r == ';' }) {
		st, err := ParseStore(strings.TrimSpace(part))
		if err != nil {
			return nil, spec, Usagef("COMPACTOR_STORES: %v", err)
		}
		stores = append(stores, st)
	}
	if len(stores) == 0 {
		return nil, spec, Usagef("COMPACTOR_STORES %q names no store", spec)
	}
	return stores, spec, nil
}

// SpendFlag is --spend-limit, repeatable: [STORE=]TOKENS/hour or [STORE=]TOKENS/day.
type SpendFlag []spend.Limit

func (s *SpendFlag) String() string {
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

func (s *SpendFlag) Set(v string) error {
	spec := v
	var l spend.Limit
	if store, rest, ok := strings.Cut(spec, "="); ok {
		if err := wire.ValidateStoreName(store); err != nil {
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

// StringList is a repeatable string flag.
type StringList []string

func (s *StringList) String() string     { return strings.Join(*s, ",") }
func (s *StringList) Set(v string) error { *s = append(*s, v); return nil }
