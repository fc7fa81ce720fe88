package command

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/compactor-dev/compactor/access"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// A fleet's credentials directory (compactor auth --credentials DIR): each user's nkey seed
// and fleet.json, which lists the NATS accounts (one per host), their stores and the seed
// file of each role's user. setup, dlq and status take --credentials DIR to act in every
// account (or the account of --store) as their role.

// ManifestFile is the accounts' list in a credentials directory.
const ManifestFile = "fleet.json"

// Manifest is fleet.json: the accounts of a fleet, each with its stores and its users' seeds.
type Manifest struct {
	V        int               `json:"v"`
	Accounts []ManifestAccount `json:"accounts"`
}

// ManifestAccount is one account of fleet.json.
type ManifestAccount struct {
	Account string   `json:"account"`
	Stores  []string `json:"stores"`
	// Seeds are the seed files of the account's users by role, relative to the directory.
	Seeds map[access.Role]string `json:"seeds"`
}

// WriteManifest writes DIR/fleet.json (replacing an earlier one: the server's
// configuration holds these accounts and no other).
func WriteManifest(dir string, m Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ManifestFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("--credentials: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, ManifestFile)); err != nil {
		return fmt.Errorf("--credentials: %w", err)
	}
	return nil
}

// FleetAccount is one account to act in: its name, the stores to act on and the NATS
// settings of the role's user there.
type FleetAccount struct {
	Account string
	Stores  []string
	NATS    access.NATSConfig
}

// FleetAccounts reads DIR/fleet.json and returns the accounts that hold any of stores (every
// account when stores is empty), each with the stores of it to act on and base's NATS
// settings with the role's seed file. An account without a user of role, or a store of
// no account, is an error naming it.
func FleetAccounts(dir string, role access.Role, stores []string, base access.NATSConfig) ([]FleetAccount, error) {
	raw, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, Usagef("--credentials %s: no %s in it (the directory compactor auth --credentials wrote)", dir, ManifestFile)
	}
	if err != nil {
		return nil, fmt.Errorf("--credentials: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil || m.V != 1 {
		return nil, fmt.Errorf("--credentials: %s is not a fleet's list of accounts (compactor auth writes it): %v", filepath.Join(dir, ManifestFile), err)
	}
	var out []FleetAccount
	found := map[string]bool{}
	for _, a := range m.Accounts {
		act := a.Stores
		if len(stores) > 0 {
			act = nil
			for _, st := range a.Stores {
				if slices.Contains(stores, st) {
					act, found[st] = append(act, st), true
				}
			}
			if len(act) == 0 {
				continue
			}
		}
		seed, ok := a.Seeds[role]
		if !ok {
			return nil, Usagef("--credentials: account %s has no %s user (compactor auth --role)", a.Account, role)
		}
		n := base
		n.NKeySeedFile, n.CredsFile, n.Token, n.TokenFile, n.User, n.Password, n.PasswordFile = filepath.Join(dir, seed), "", "", "", "", "", ""
		n.Role = role
		if role.PerStore() {
			n.Stores = a.Stores
		}
		out = append(out, FleetAccount{Account: a.Account, Stores: act, NATS: n})
	}
	var missing []string
	for _, st := range stores {
		if !found[st] {
			missing = append(missing, st)
		}
	}
	if len(missing) > 0 {
		return nil, Usagef("--credentials: no account of %s holds store %s", filepath.Join(dir, ManifestFile), strings.Join(missing, ", "))
	}
	return out, nil
}

// AccountErr names the account of an error (none: the one the NATS flags reach).
func AccountErr(account string, err error) error {
	if account == "" {
		return err
	}
	return fmt.Errorf("account %s: %w", account, err)
}
