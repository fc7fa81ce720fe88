package auth

import (
	"context"
	"errors"
	"fmt"
	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/fleetops"
	"github.com/compactor-dev/compactor/wire"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/compactor-dev/compactor/internal/cli/command"
)

// Command is compactor auth.
var Command = &command.Command{Name: "auth", Summary: "print the NATS server's users and permissions for a fleet's stores and roles (or nsc commands)", Run: run}

const authHelp = `
Print the NATS server configuration that gives each host of a fleet its own NATS account
and, in it, its own store and no other (docs/security.md): an accounts block with one
account per host (per --store; --store a,b for a host serving several stores), each with
JetStream limits and one user per role, each with the publish and subscribe permissions
of docs/security.md; with --tls-cert, a tls block. Include it in the server's
configuration (include "compactor-auth.conf"). Users, in each host's account:

  admin-<store>      compactor setup (creates and changes its streams, buckets, consumers)
  operator-<store>   compactor dlq, compactor status, reading across its stores
  worker-<store>     compactor run --store <store>=DIR, compactor sweep
  agent-<store>      enqueue, the Pi extension

An account is the boundary NATS enforces: no permission, header or JetStream request of
one account's users reaches another account's streams (a JetStream reply, which the
server sends wherever a request asks, stays in the requester's account). Hosts that share
an account trust each other.

Each account's JetStream is limited: --max-storage (what its streams may hold; the server
reserves every stream's byte limit in it), its streams (exactly as many as compactor setup
makes), --max-consumers, and the connections and subscriptions of its users. The sum of
the accounts' storage must fit the server's max_file_store: the configuration says how
much it is.

Every user authenticates with an nkey: its seed is written into --credentials DIR as
<user>.nk (readable by its owner only; kept and reused when the command runs again), to
be given to that host's compactor with --nkey (or COMPACTOR_NATS_NKEY) and nothing else;
the configuration holds the public keys alone. DIR/fleet.json lists the accounts, their
stores and users' seed files: 'compactor setup', 'dlq' and 'status' take --credentials
DIR to act in every account. --nsc prints the same accounts and users as nsc commands
instead (decentralized JWT authentication: nsc makes the keys).

Each client sends its replies to an inbox of its own role and store (_INBOX_<role>_<store>;
--inbox-prefix or COMPACTOR_NATS_INBOX_PREFIX to choose another of its stores' when the
first in sorted order is not the one meant).

Examples:
  compactor auth --store hostA --store hostB --credentials /etc/nats/compactor > /etc/nats/compactor-auth.conf
  compactor auth --store hostA --role worker,agent --credentials ./creds --tls-cert server.pem --tls-key server-key.pem
  compactor auth --store hostA --max-storage 8GiB --replicas 3 --credentials ./creds
  compactor auth --store hostA --nsc | sh
  compactor auth --store hostA --json     # the accounts and permissions alone`

// authUser is one user of the generated configuration.
type authUser struct {
	Name        string             `json:"user"`
	Role        access.Role        `json:"role"`
	Account     string             `json:"account"`
	Stores      []string           `json:"stores,omitempty"`
	InboxPrefix string             `json:"inboxPrefix"`
	NKey        string             `json:"nkey,omitempty"` // public key
	SeedFile    string             `json:"seedFile,omitempty"`
	Permissions access.Permissions `json:"permissions"`
}

// authAccount is one host's NATS account: its stores, its limits, its users.
type authAccount struct {
	Name   string        `json:"account"`
	Stores []string      `json:"stores"`
	Limits accountLimits `json:"limits"`
	Users  []authUser    `json:"users"`
}

// accountLimits are an account's JetStream and connection limits.
type accountLimits struct {
	MaxStorage       int64 `json:"maxStorage"`
	MaxStreams       int   `json:"maxStreams"`
	MaxConsumers     int   `json:"maxConsumers"`
	MaxConnections   int   `json:"maxConnections"`
	MaxSubscriptions int   `json:"maxSubscriptions"`
}

// accountName is the NATS account of a store group.
func accountName(group []string) string { return "compactor-" + strings.Join(group, "+") }

func run(ctx context.Context, env *command.Env) error {
	fs := command.NewFlagSet(env, "auth", "--store NAME[,NAME]... [flags]", authHelp)
	var groups command.StringList
	fs.Var(&groups, "store", "a host's store, or several joined by commas for one account and one user of each role (repeatable)")
	roles := fs.String("role", "admin,operator,worker,agent", "the roles to print users for: admin, operator, worker, agent (comma-separated)")
	creds := fs.String("credentials", "", "directory for each user's nkey seed (<user>.nk, mode 0600): written once, reused after; and fleet.json, the accounts' list")
	nsc := fs.Bool("nsc", false, "print nsc commands adding the accounts and users instead of a server configuration")
	asJSON := fs.Bool("json", false, "print the accounts, users and their permissions as JSON (no keys are made)")
	tlsCert := fs.String("tls-cert", "", "the server's TLS certificate: print a tls block that requires TLS")
	tlsKey := fs.String("tls-key", "", "the key of --tls-cert")
	tlsCA := fs.String("tls-ca", "", "CA certificate of clients' certificates (with --tls-verify)")
	tlsVerify := fs.Bool("tls-verify", false, "require and verify client certificates (signed by --tls-ca)")
	replicas := fs.Int("replicas", 1, "the replicas compactor setup will give the streams (--replicas of setup): the default --max-storage holds them")
	var storage command.ByteSize
	fs.Var(&storage, "max-storage", "each account's JetStream file storage, in `BYTES` (default: what compactor setup's default limits reserve, with --replicas)")
	maxConsumers := fs.Int("max-consumers", 0, "each account's consumers (default: two per store, the watches of its sweep records, 8 per store and at least 64, and the operator's 24 reads)")
	maxConns := fs.Int("max-connections", 1024, "each account's connections at once (its agents, workers and commands)")
	maxSubs := fs.Int("max-subscriptions", 65536, "each account's subscriptions at once")
	pos, err := fs.ParseArgs(env.Args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return command.Usagef("unexpected argument %q (stores are given with --store NAME)", pos[0])
	}
	want, err := parseRoles(*roles)
	if err != nil {
		return err
	}
	storeGroups, err := parseStoreGroups(groups)
	if err != nil {
		return err
	}
	if (*tlsCert == "") != (*tlsKey == "") || (*tlsVerify && *tlsCA == "") {
		return command.Usagef("--tls-cert and --tls-key go together; --tls-verify needs --tls-ca")
	}
	if *replicas < 1 || *replicas > 5 {
		return command.Usagef("--replicas: %d, need 1..5", *replicas)
	}
	if storage == 0 {
		storage = command.ByteSize(fleetops.AccountStorage(*replicas))
	}
	if *maxConns < 1 || *maxSubs < 1 || *maxConsumers < 0 {
		return command.Usagef("--max-connections, --max-subscriptions and --max-consumers: want at least 1")
	}
	accounts, err := authAccounts(want, storeGroups, accountLimits{MaxStorage: int64(storage), MaxStreams: fleetops.AccountStreams(),
		MaxConsumers: *maxConsumers, MaxConnections: *maxConns, MaxSubscriptions: *maxSubs})
	if err != nil {
		return command.Usagef("%v", err)
	}
	switch {
	case *asJSON:
		return command.WriteJSON(env.Stdout, accounts)
	case *nsc:
		writeNSC(env.Stdout, accounts)
		return nil
	case *creds == "":
		return command.Usagef("--credentials DIR is needed: each user's nkey seed is written there (or print --nsc commands, or --json)")
	}
	if err := writeCredentials(*creds, accounts); err != nil {
		return err
	}
	writeServerAuth(env.Stdout, groups, accounts, tlsBlock{cert: *tlsCert, key: *tlsKey, ca: *tlsCA, verify: *tlsVerify})
	for _, a := range accounts {
		for _, u := range a.Users {
			fmt.Fprintf(env.Stderr, "%s (account %s): %s\n", u.Name, a.Name, u.SeedFile)
		}
	}
	return nil
}

// parseRoles parses --role.
func parseRoles(list string) ([]access.Role, error) {
	var want []access.Role
	for _, r := range strings.Split(list, ",") {
		role, err := access.ParseRole(strings.TrimSpace(r))
		if err != nil {
			return nil, command.Usagef("--role: %v", err)
		}
		want = append(want, role)
	}
	return want, nil
}

// parseStoreGroups parses the --store flags: each a group of stores, one account, sorted;
// a store in two groups is refused.
func parseStoreGroups(groups []string) ([][]string, error) {
	var storeGroups [][]string
	seen := map[string]string{}
	for _, g := range groups {
		var names []string
		for _, n := range strings.Split(g, ",") {
			n = strings.TrimSpace(n)
			if err := wire.ValidateStoreName(n); err != nil {
				return nil, command.Usagef("--store %q: %v", g, err)
			}
			if other, ok := seen[n]; ok {
				return nil, command.Usagef("--store %q: store %s is in --store %q already: a store is in one account", g, n, other)
			}
			seen[n] = g
			names = append(names, n)
		}
		slices.Sort(names)
		storeGroups = append(storeGroups, slices.Compact(names))
	}
	if len(storeGroups) == 0 {
		return nil, command.Usagef("--store NAME is needed: each host's store (its account)")
	}
	return storeGroups, nil
}

// writeCredentials gives each user its seed in dir (made, or read where it is) and
// writes the accounts' fleet.json there.
func writeCredentials(dir string, accounts []authAccount) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("--credentials: %w", err)
	}
	for i := range accounts {
		for j := range accounts[i].Users {
			if err := userKey(&accounts[i].Users[j], dir); err != nil {
				return err
			}
		}
	}
	return command.WriteManifest(dir, manifest(accounts))
}

// authAccounts are the accounts of the store groups, each with a user of each role.
func authAccounts(roles []access.Role, groups [][]string, limits accountLimits) ([]authAccount, error) {
	var out []authAccount
	for _, g := range groups {
		a := authAccount{Name: accountName(g), Stores: g, Limits: limits}
		if a.Limits.MaxConsumers == 0 {
			a.Limits.MaxConsumers = fleetops.AccountConsumers(len(g))
		}
		suffix := "-" + strings.Join(g, "+")
		for _, role := range roles {
			var stores []string
			if role.PerStore() {
				stores = g
			}
			p, err := access.PermissionsFor(role, stores)
			if err != nil {
				return nil, err
			}
			a.Users = append(a.Users, authUser{Name: string(role) + suffix, Role: role, Account: a.Name, Stores: stores,
				InboxPrefix: access.InboxPrefix(role, stores), Permissions: p})
		}
		out = append(out, a)
	}
	return out, nil
}

// manifest is fleet.json of the accounts: their stores and each role's seed file.
func manifest(accounts []authAccount) command.Manifest {
	m := command.Manifest{V: 1}
	for _, a := range accounts {
		ma := command.ManifestAccount{Account: a.Name, Stores: a.Stores, Seeds: map[access.Role]string{}}
		for _, u := range a.Users {
			ma.Seeds[u.Role] = filepath.Base(u.SeedFile)
		}
		m.Accounts = append(m.Accounts, ma)
	}
	return m
}

// userKey reads the user's seed from dir, or makes one.
func userKey(u *authUser, dir string) error {
	p := filepath.Join(dir, u.Name+".nk")
	seed, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return err
		}
		if seed, err = kp.Seed(); err != nil {
			return err
		}
		if err := os.WriteFile(p, append(seed, '\n'), 0o600); err != nil {
			return fmt.Errorf("--credentials: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("--credentials: %w", err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		return fmt.Errorf("--credentials: %s: %w", p, err)
	}
	if u.NKey, err = kp.PublicKey(); err != nil {
		return err
	}
	u.SeedFile = p
	return nil
}

type tlsBlock struct {
	cert, key, ca string
	verify        bool
}

// roleNote says what a role's user is for, in the configuration's comments.
var roleNote = map[access.Role]string{
	access.RoleAdmin:    "compactor setup: creates and changes the account's streams, buckets and consumers",
	access.RoleOperator: "compactor dlq, status, events, pause, resume and console, reading across the account's stores",
	access.RoleWorker:   "compactor run and compactor sweep",
	access.RoleAgent:    "enqueue and the Pi extension",
}

// writeServerAuth prints the nats-server configuration.
func writeServerAuth(w io.Writer, groups []string, accounts []authAccount, t tlsBlock) {
	fmt.Fprintf(w, "# NATS accounts and users of a compactor fleet: `compactor auth --store %s` (compactor %s).\n", strings.Join(groups, " --store "), command.Version())
	fmt.Fprintln(w, "# One account per host: nothing of one account's users reaches another's streams (docs/security.md).")
	fmt.Fprintln(w, "# Each user authenticates with the nkey seed in its <user>.nk file; every permission is explained in docs/security.md.")
	var total int64
	for _, a := range accounts {
		total += a.Limits.MaxStorage
	}
	fmt.Fprintf(w, "# The accounts' JetStream storage is %d bytes in all: the server's jetstream max_file_store must be at least that.\n", total)
	fmt.Fprintln(w, "accounts {")
	for _, a := range accounts {
		l := a.Limits
		fmt.Fprintf(w, "  # %s: stores %s\n", a.Name, strings.Join(a.Stores, ", "))
		fmt.Fprintf(w, "  %q: {\n", a.Name)
		fmt.Fprintf(w, "    jetstream: { max_file: %d, max_mem: 0, max_streams: %d, max_consumers: %d, max_bytes_required: true }\n",
			l.MaxStorage, l.MaxStreams, l.MaxConsumers)
		fmt.Fprintf(w, "    limits: { max_connections: %d, max_subscriptions: %d }\n", l.MaxConnections, l.MaxSubscriptions)
		fmt.Fprintln(w, "    users = [")
		for _, u := range a.Users {
			fmt.Fprintf(w, "      # %s: %s", u.Name, roleNote[u.Role])
			if u.InboxPrefix != "" {
				fmt.Fprintf(w, "; replies on %s", u.InboxPrefix)
			}
			fmt.Fprintln(w)
			fmt.Fprintf(w, "      {\n        nkey: %q\n        permissions: {\n", u.NKey)
			fmt.Fprintf(w, "          publish: { allow: %s }\n", confList(u.Permissions.Publish, "            "))
			fmt.Fprintf(w, "          subscribe: { allow: %s }\n", confList(u.Permissions.Subscribe, "            "))
			if u.Permissions.AllowResponses {
				fmt.Fprintln(w, "          allow_responses: true")
			}
			fmt.Fprintln(w, "        }\n      }")
		}
		fmt.Fprintln(w, "    ]")
		fmt.Fprintln(w, "  }")
	}
	fmt.Fprintln(w, "}")
	if t.cert != "" {
		fmt.Fprintf(w, "tls {\n  cert_file: %q\n  key_file: %q\n", absPath(t.cert), absPath(t.key))
		if t.ca != "" {
			fmt.Fprintf(w, "  ca_file: %q\n", absPath(t.ca))
		}
		if t.verify {
			fmt.Fprintln(w, "  verify: true")
		}
		fmt.Fprintln(w, "}")
	}
}

// confList is a list of quoted subjects (quoted: a subject starting with $ would otherwise
// be read as a variable).
func confList(subjects []string, indent string) string {
	var b strings.Builder
	b.WriteString("[\n")
	for _, s := range subjects {
		fmt.Fprintf(&b, "%s%q\n", indent, s)
	}
	b.WriteString(indent[:len(indent)-2] + "]")
	return b.String()
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// writeNSC prints nsc commands that add the accounts (with their limits) and their users.
func writeNSC(w io.Writer, accounts []authAccount) {
	quote := func(list []string) string { return "'" + strings.Join(list, ",") + "'" }
	fmt.Fprintln(w, "# NATS accounts and users of a compactor fleet for nsc; one account per host; every permission is explained in docs/security.md.")
	for _, a := range accounts {
		l := a.Limits
		fmt.Fprintf(w, "# %s: stores %s\n", a.Name, strings.Join(a.Stores, ", "))
		fmt.Fprintf(w, "nsc add account --name %s\n", shellWord(a.Name))
		fmt.Fprintf(w, "nsc edit account --name %s --js-disk-storage %d --js-mem-storage 0 --js-streams %d --js-consumer %d --js-max-bytes-required --conns %d\n",
			shellWord(a.Name), l.MaxStorage, l.MaxStreams, l.MaxConsumers, l.MaxConnections)
		for _, u := range a.Users {
			fmt.Fprintf(w, "# %s: %s\n", u.Name, roleNote[u.Role])
			fmt.Fprintf(w, "nsc add user --account %s --name %s --allow-pub %s --allow-sub %s", shellWord(a.Name), shellWord(u.Name), quote(u.Permissions.Publish), quote(u.Permissions.Subscribe))
			if u.Permissions.AllowResponses {
				fmt.Fprint(w, " --allow-pub-response=1")
			}
			fmt.Fprintln(w)
		}
	}
}

func shellWord(s string) string {
	if strings.ContainsAny(s, " '\"$\\`;&|<>*?") {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	return s
}
