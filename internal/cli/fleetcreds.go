package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/compactor-dev/compactor/access"
)

// A fleet's credentials directory (compactor auth --credentials DIR): each user's nkey seed
// and fleet.json, which lists the NATS accounts (one per host), their stores and the seed
// file of each role's user. setup, dlq and status take --credentials DIR to act in every
// account (or the account of --store) as their role.

const manifestFile = "fleet.json"

type fleetManifest struct {
	V        int               `json:"v"`
	Accounts []manifestAccount `json:"accounts"`
}

type manifestAccount struct {
	Account string   `json:"account"`
	Stores  []string `json:"stores"`
	// Seeds are the seed files of the account's users by role, relative to the directory.
	Seeds map[access.Role]string `json:"seeds"`
}

// writeManifest writes DIR/fleet.json for the accounts (replacing an earlier one: the
// server's configuration holds these accounts and no other).
func writeManifest(dir string, accounts []authAccount) error {
	m := fleetManifest{V: 1}
	for _, a := range accounts {
		ma := manifestAccount{Account: a.Name, Stores: a.Stores, Seeds: map[access.Role]string{}}
		for _, u := range a.Users {
			ma.Seeds[u.Role] = filepath.Base(u.SeedFile)
		}
		m.Accounts = append(m.Accounts, ma)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, manifestFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("--credentials: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, manifestFile)); err != nil {
		return fmt.Errorf("--credentials: %w", err)
	}
	return nil
}

// fleetAccount is one account to act in: its name, the stores to act on and the NATS
// settings of the role's user there.
type fleetAccount struct {
	Account string
	Stores  []string
	NATS    access.NATSConfig
}

// fleetAccounts reads DIR/fleet.json and returns the accounts that hold any of stores (every
// account when stores is empty), each with the stores of it to act on and base's NATS
// settings with the role's seed file. An account without a user of role, or a store of
// no account, is an error naming it.
func fleetAccounts(dir string, role access.Role, stores []string, base access.NATSConfig) ([]fleetAccount, error) {
	raw, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, usageErrorf("--credentials %s: no %s in it (the directory compactor auth --credentials wrote)", dir, manifestFile)
	}
	if err != nil {
		return nil, fmt.Errorf("--credentials: %w", err)
	}
	var m fleetManifest
	if err := json.Unmarshal(raw, &m); err != nil || m.V != 1 {
		return nil, fmt.Errorf("--credentials: %s is not a fleet's list of accounts (compactor auth writes it): %v", filepath.Join(dir, manifestFile), err)
	}
	var out []fleetAccount
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
			return nil, usageErrorf("--credentials: account %s has no %s user (compactor auth --role)", a.Account, role)
		}
		n := base
		n.NKeySeedFile, n.CredsFile, n.Token, n.TokenFile, n.User, n.Password, n.PasswordFile = filepath.Join(dir, seed), "", "", "", "", "", ""
		n.Role = role
		if role.PerStore() {
			n.Stores = a.Stores
		}
		out = append(out, fleetAccount{Account: a.Account, Stores: act, NATS: n})
	}
	var missing []string
	for _, st := range stores {
		if !found[st] {
			missing = append(missing, st)
		}
	}
	if len(missing) > 0 {
		return nil, usageErrorf("--credentials: no account of %s holds store %s", filepath.Join(dir, manifestFile), strings.Join(missing, ", "))
	}
	return out, nil
}
