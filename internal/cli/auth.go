package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/compactor-dev/compactor/pipeline"
)

func init() {
	register(&Command{Name: "auth", Summary: "print the NATS server's users and permissions for a fleet's stores and roles (or nsc commands)", Run: runAuth})
}

const authHelp = `
Print the NATS server configuration that gives each host of a fleet its own store and no
other (docs/security.md): an authorization block with one user per role, each with the
publish and subscribe permissions of docs/security.md, and, with --tls-cert, a tls block.
Include it in the server's configuration (include "compactor-auth.conf"). Users:

  admin              compactor setup (creates and changes streams, buckets, consumers)
  operator           compactor dlq, and reading across stores
  worker-<store>     compactor run --store <store>=DIR, compactor sweep
  agent-<store>      enqueue, the Pi extension

A --store of several names joined by commas (--store a,b) makes one worker and one agent
for those stores together (a host serving several stores with one compactor run).

Every user authenticates with an nkey: its seed is written into --credentials DIR as
<user>.nk (readable by its owner only; kept and reused when the command runs again), to
be given to that host's compactor with --nkey (or COMPACTOR_NATS_NKEY) and nothing else;
the configuration holds the public keys alone. --nsc ACCOUNT prints the same users as nsc
commands instead (decentralized JWT authentication: nsc makes the keys).

Each client sends its replies to an inbox of its own role and store (_INBOX_<role>_<store>;
--inbox-prefix or COMPACTOR_NATS_INBOX_PREFIX to choose another of its stores' when the
first in sorted order is not the one meant).

Examples:
  compactor auth --store hostA --store hostB --credentials /etc/nats/compactor > /etc/nats/compactor-auth.conf
  compactor auth --store hostA --role worker,agent --credentials ./creds --tls-cert server.pem --tls-key server-key.pem
  compactor auth --store hostA --nsc COMPACTOR | sh
  compactor auth --store hostA --json     # the permissions alone`

// authUser is one user of the generated configuration.
type authUser struct {
	Name        string               `json:"user"`
	Role        pipeline.Role        `json:"role"`
	Stores      []string             `json:"stores,omitempty"`
	InboxPrefix string               `json:"inboxPrefix"`
	NKey        string               `json:"nkey,omitempty"` // public key
	SeedFile    string               `json:"seedFile,omitempty"`
	Permissions pipeline.Permissions `json:"permissions"`
}

func runAuth(ctx context.Context, env *Env) error {
	fs := newFlagSet(env, "auth", "--store NAME[,NAME]... [flags]", authHelp)
	var groups stringList
	fs.Var(&groups, "store", "a store, or several joined by commas for one user of each role (repeatable)")
	roles := fs.String("role", "admin,operator,worker,agent", "the roles to print users for: admin, operator, worker, agent (comma-separated)")
	creds := fs.String("credentials", "", "directory for each user's nkey seed (<user>.nk, mode 0600): written once, reused after")
	nsc := fs.String("nsc", "", "print nsc commands adding the users to this account instead of a server configuration")
	asJSON := fs.Bool("json", false, "print the users and their permissions as JSON (no keys are made)")
	tlsCert := fs.String("tls-cert", "", "the server's TLS certificate: print a tls block that requires TLS")
	tlsKey := fs.String("tls-key", "", "the key of --tls-cert")
	tlsCA := fs.String("tls-ca", "", "CA certificate of clients' certificates (with --tls-verify)")
	tlsVerify := fs.Bool("tls-verify", false, "require and verify client certificates (signed by --tls-ca)")
	pos, err := fs.parse(env.Args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("unexpected argument %q (stores are given with --store NAME)", pos[0])
	}
	var want []pipeline.Role
	for _, r := range strings.Split(*roles, ",") {
		role, err := pipeline.ParseRole(strings.TrimSpace(r))
		if err != nil {
			return usageErrorf("--role: %v", err)
		}
		want = append(want, role)
	}
	var storeGroups [][]string
	for _, g := range groups {
		var names []string
		for _, n := range strings.Split(g, ",") {
			n = strings.TrimSpace(n)
			if err := pipeline.ValidateStoreName(n); err != nil {
				return usageErrorf("--store %q: %v", g, err)
			}
			names = append(names, n)
		}
		slices.Sort(names)
		storeGroups = append(storeGroups, slices.Compact(names))
	}
	if len(storeGroups) == 0 && (slices.Contains(want, pipeline.RoleWorker) || slices.Contains(want, pipeline.RoleAgent)) {
		return usageErrorf("--store NAME is needed for the worker and agent roles")
	}
	if (*tlsCert == "") != (*tlsKey == "") || (*tlsVerify && *tlsCA == "") {
		return usageErrorf("--tls-cert and --tls-key go together; --tls-verify needs --tls-ca")
	}
	users, err := authUsers(want, storeGroups)
	if err != nil {
		return usageErrorf("%v", err)
	}
	switch {
	case *asJSON:
		return writeJSON(env.Stdout, users)
	case *nsc != "":
		writeNSC(env.Stdout, *nsc, users)
		return nil
	case *creds == "":
		return usageErrorf("--credentials DIR is needed: each user's nkey seed is written there (or print --nsc commands, or --json)")
	}
	if err := os.MkdirAll(*creds, 0o700); err != nil {
		return fmt.Errorf("--credentials: %w", err)
	}
	for i := range users {
		if err := userKey(&users[i], *creds); err != nil {
			return err
		}
	}
	writeServerAuth(env.Stdout, groups, users, tlsBlock{cert: *tlsCert, key: *tlsKey, ca: *tlsCA, verify: *tlsVerify})
	for _, u := range users {
		fmt.Fprintf(env.Stderr, "%s: %s\n", u.Name, u.SeedFile)
	}
	return nil
}

// authUsers are the users of the roles, one per store group for a store's roles.
func authUsers(roles []pipeline.Role, groups [][]string) ([]authUser, error) {
	var out []authUser
	for _, role := range roles {
		if !role.PerStore() {
			p, err := pipeline.PermissionsFor(role, nil)
			if err != nil {
				return nil, err
			}
			out = append(out, authUser{Name: string(role), Role: role, InboxPrefix: pipeline.InboxPrefix(role, nil), Permissions: p})
			continue
		}
		for _, g := range groups {
			p, err := pipeline.PermissionsFor(role, g)
			if err != nil {
				return nil, err
			}
			out = append(out, authUser{Name: string(role) + "-" + strings.Join(g, "+"), Role: role, Stores: g,
				InboxPrefix: pipeline.InboxPrefix(role, g), Permissions: p})
		}
	}
	return out, nil
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
var roleNote = map[pipeline.Role]string{
	pipeline.RoleAdmin:    "compactor setup: creates and changes streams, buckets and consumers",
	pipeline.RoleOperator: "compactor dlq, and reading across stores",
	pipeline.RoleWorker:   "compactor run and compactor sweep",
	pipeline.RoleAgent:    "enqueue and the Pi extension",
}

// writeServerAuth prints the nats-server configuration.
func writeServerAuth(w io.Writer, groups []string, users []authUser, t tlsBlock) {
	fmt.Fprintf(w, "# NATS users of a compactor fleet: `compactor auth --store %s` (compactor %s).\n", strings.Join(groups, " --store "), Version())
	fmt.Fprintln(w, "# Each user authenticates with the nkey seed in its <user>.nk file; every permission is explained in docs/security.md.")
	fmt.Fprintln(w, "authorization {")
	fmt.Fprintln(w, "  users = [")
	for _, u := range users {
		fmt.Fprintf(w, "    # %s: %s", u.Name, roleNote[u.Role])
		if u.InboxPrefix != "" {
			fmt.Fprintf(w, "; replies on %s", u.InboxPrefix)
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "    {\n      nkey: %q\n      permissions: {\n", u.NKey)
		fmt.Fprintf(w, "        publish: { allow: %s }\n", confList(u.Permissions.Publish, "          "))
		fmt.Fprintf(w, "        subscribe: { allow: %s }\n", confList(u.Permissions.Subscribe, "          "))
		if u.Permissions.AllowResponses {
			fmt.Fprintln(w, "        allow_responses: true")
		}
		fmt.Fprintln(w, "      }\n    }")
	}
	fmt.Fprintln(w, "  ]")
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

// writeNSC prints nsc commands that add the users to account.
func writeNSC(w io.Writer, account string, users []authUser) {
	quote := func(list []string) string { return "'" + strings.Join(list, ",") + "'" }
	fmt.Fprintf(w, "# NATS users of a compactor fleet for nsc (account %s); every permission is explained in docs/security.md.\n", account)
	for _, u := range users {
		fmt.Fprintf(w, "# %s: %s\n", u.Name, roleNote[u.Role])
		fmt.Fprintf(w, "nsc add user --account %s --name %s --allow-pub %s --allow-sub %s", shellWord(account), u.Name, quote(u.Permissions.Publish), quote(u.Permissions.Subscribe))
		if u.Permissions.AllowResponses {
			fmt.Fprint(w, " --allow-pub-response=1")
		}
		fmt.Fprintln(w)
	}
}

func shellWord(s string) string {
	if strings.ContainsAny(s, " '\"$\\`;&|<>*?") {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	return s
}
