package cli

import (
	"flag"
	"fmt"
	"github.com/compactor-dev/compactor/wire"
	"sort"
	"strings"

	"github.com/compactor-dev/compactor/internal/cli/command"
	"github.com/compactor-dev/compactor/pipeline"
	"github.com/compactor-dev/compactor/summarize"
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
		return command.Usagef("--instructions: %v", err)
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
			return command.Usagef("--store-instructions %s: no store of that name (stores: %s)", name, storeNames(stores))
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
