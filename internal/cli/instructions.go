package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/user"
	"sort"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/summarize"
	"github.com/compactor-dev/compactor/wire"
)

// Custom summary instructions are data (docs/security.md, "Instructions are data"): every
// command that takes them checks them (summarize.CheckInstructions) before it reads or
// sends anything, a worker refuses them for a store told to refuse them, and the operator
// passes on a dead letter's instructions only when asked to, with its identity said.

// instructionsFlag registers --instructions with the help every command gives it.
func instructionsFlag(fs *flag.FlagSet, also string) *string {
	return fs.String("instructions", "", fmt.Sprintf("custom summary instructions: a focus request quoted into the prompt as data (at most %d bytes; no control characters but tab and newline)%s", summarize.MaxInstructions, also))
}

// checkInstructionsFlag refuses --instructions that cannot be quoted safely, naming the flag.
func checkInstructionsFlag(s string) error {
	if err := summarize.CheckInstructions(s); err != nil {
		return usageErrorf("--instructions: %v", err)
	}
	return nil
}

// storeInstructionsFlag collects repeatable --store-instructions NAME=allow|refuse; NAME
// "*" is every store the worker serves that has no entry of its own (worker.RefuseInstructions
// applies it).
type storeInstructionsFlag map[string]bool // store → refuse

func (s *storeInstructionsFlag) String() string {
	var parts []string
	for name, refuse := range *s {
		parts = append(parts, name+"="+map[bool]string{true: "refuse", false: "allow"}[refuse])
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (s *storeInstructionsFlag) Set(v string) error {
	name, policy, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("%q: want NAME=allow or NAME=refuse (NAME * for every store)", v)
	}
	if name != "*" {
		if err := wire.ValidateStoreName(name); err != nil {
			return fmt.Errorf("%q: %w", v, err)
		}
	}
	var refuse bool
	switch policy {
	case "refuse":
		refuse = true
	case "allow":
	default:
		return fmt.Errorf("%q: the policy is allow or refuse", v)
	}
	if *s == nil {
		*s = storeInstructionsFlag{}
	}
	(*s)[name] = refuse
	return nil
}

// check refuses a store name the worker does not serve.
func (s storeInstructionsFlag) check(stores []pipeline.Store) error {
	for name := range s {
		if name == "*" {
			continue
		}
		if !containsStore(stores, name) {
			return usageErrorf("--store-instructions %s: no store of that name (stores: %s)", name, storeNames(stores))
		}
	}
	return nil
}

func containsStore(stores []pipeline.Store, name string) bool {
	for _, st := range stores {
		if st.Name == name {
			return true
		}
	}
	return false
}

// operatorIdentity says who runs a command for the log: the NATS identity its credentials
// name (the nkey's public key, from an nkey seed or a creds file; the user name; "token"),
// then the OS user and host. The server does not tell a client who it is: this is what
// the operator's own credentials say.
func operatorIdentity(c pipeline.NATSConfig) string {
	var nats string
	switch {
	case c.NKeySeedFile != "":
		nats = "nkey " + publicKeyOf(c.NKeySeedFile)
	case c.CredsFile != "":
		nats = "creds user " + publicKeyOf(c.CredsFile)
	case c.User != "":
		nats = "user " + c.User
	case c.Token != "" || c.TokenFile != "":
		nats = "a token (no user name)"
	default:
		nats = "no NATS credentials"
	}
	who := "unknown"
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("NATS %s; OS user %s on %s", nats, who, host)
}

// publicKeyOf is the public key of the seed in file, or why it is not known.
func publicKeyOf(file string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	kp, err := nkeys.ParseDecoratedNKey(b) // a seed alone, or a creds file's
	clear(b)
	if err != nil {
		return "(no seed in " + file + ")"
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return "(no public key)"
	}
	return pub
}

// instructionsDigest names instructions in a log without repeating them: their length and
// the start of their SHA-256 (`compactor dlq show` prints them whole).
func instructionsDigest(s string) string {
	h := sha256.Sum256([]byte(s))
	return fmt.Sprintf("%d bytes, sha256 %s", len(s), hex.EncodeToString(h[:8]))
}
