package cli

import (
	"encoding/json"
	"fmt"
	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/fleetops"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/compactor-dev/compactor/internal/cli/command"
)

// compactor auth makes one NATS account per --store group, with JetStream limits that hold
// exactly what setup makes (its streams, and by default the storage its limits reserve),
// and lists the accounts in fleet.json for --credentials; the server takes the
// configuration; a store in two groups is refused; no user may answer any reply subject.
func TestAuthAccounts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	creds := filepath.Join(dir, "creds")
	code, conf, errOut := runCLI(t, "auth", "--store", "a", "--store", "b,c", "--credentials", creds, "--replicas", "3")
	if code != ExitOK {
		t.Fatalf("auth: exit %d\n%s", code, errOut)
	}
	for _, want := range []string{`"compactor-a": {`, `"compactor-b+c": {`,
		fmt.Sprintf("max_file: %d, max_mem: 0, max_streams: %d, max_consumers: %d, max_bytes_required: true", fleetops.AccountStorage(3), fleetops.AccountStreams(), fleetops.AccountConsumers(2)),
		fmt.Sprintf("is %d bytes in all", 2*fleetops.AccountStorage(3))} {
		if !strings.Contains(conf, want) {
			t.Errorf("the configuration lacks %q:\n%s", want, conf)
		}
	}
	if strings.Contains(conf, "allow_responses") {
		t.Error("a user may answer any reply subject")
	}
	if err := os.WriteFile(filepath.Join(dir, "auth.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	serverConf := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(serverConf, fmt.Appendf(nil, "port: -1\njetstream { store_dir: %q }\ninclude \"auth.conf\"\n", filepath.Join(dir, "js")), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := server.ProcessConfigFile(serverConf); err != nil {
		t.Fatalf("the server does not take it: %v", err)
	}
	var m command.Manifest
	raw, err := os.ReadFile(filepath.Join(creds, command.ManifestFile))
	if err != nil || json.Unmarshal(raw, &m) != nil || len(m.Accounts) != 2 || m.Accounts[1].Account != "compactor-b+c" ||
		m.Accounts[1].Seeds[access.RoleAdmin] != "admin-b+c.nk" {
		t.Fatalf("fleet.json: %s (%v)", raw, err)
	}
	accts, err := command.FleetAccounts(creds, access.RoleOperator, []string{"c"}, access.NATSConfig{URL: "nats://x"})
	if err != nil || len(accts) != 1 || accts[0].Account != "compactor-b+c" || !strings.HasSuffix(accts[0].NATS.NKeySeedFile, "operator-b+c.nk") ||
		strings.Join(accts[0].Stores, ",") != "c" {
		t.Fatalf("the account of store c: %+v %v", accts, err)
	}
	if _, err := command.FleetAccounts(creds, access.RoleOperator, []string{"z"}, access.NATSConfig{}); err == nil || !strings.Contains(err.Error(), "store z") {
		t.Errorf("a store of no account: %v", err)
	}
	if code, _, errOut := runCLI(t, "auth", "--store", "a", "--store", "a,b", "--json"); code != ExitBadUse || !strings.Contains(errOut, "a store is in one account") {
		t.Errorf("a store in two accounts: exit %d %s", code, errOut)
	}
	code, out, _ := runCLI(t, "auth", "--store", "a", "--nsc")
	if code != ExitOK || !strings.Contains(out, "nsc add account --name compactor-a") || !strings.Contains(out, "nsc add user --account compactor-a --name worker-a") {
		t.Errorf("--nsc: exit %d\n%s", code, out)
	}
}
