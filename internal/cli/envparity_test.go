package cli

import (
	"encoding/json"
	"github.com/compactor-dev/compactor/access"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/compactor-dev/compactor/internal/cli/command"
	"github.com/compactor-dev/compactor/pipeline"
)

// The Go CLI and the Pi extension read the same environment the same way: every case of extensions/pi/test/testdata/env-parity.json, which the extension's own
// test reads too.
func TestEnvParity(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "extensions", "pi", "test", "testdata", "env-parity.json"))
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		Cases []struct {
			Name     string            `json:"name"`
			Env      map[string]string `json:"env"`
			AgentDir string            `json:"agentDir"`
			NATS     map[string]string `json:"nats"`
			Stores   []struct {
				Name string `json:"name"`
				Dir  string `json:"dir"`
			} `json:"stores"`
			Refused []string `json:"refused"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	if len(table.Cases) < 5 {
		t.Fatalf("%d cases", len(table.Cases))
	}
	home, _ := os.UserHomeDir()
	tilde := func(p string) string {
		if strings.HasPrefix(p, "~/") {
			return filepath.Join(home, p[2:])
		}
		return p
	}
	for _, c := range table.Cases {
		t.Run(c.Name, func(t *testing.T) {
			getenv := func(k string) string { return c.Env[k] }
			n := command.NATSFromEnv(getenv)
			if n.URL == "" {
				n.URL = access.DefaultClientURL // what a client without a local service uses
			}
			got := map[string]string{"url": n.URL, "user": n.User, "password": n.Password, "token": n.Token, "credsFile": n.CredsFile,
				"nkeySeedFile": n.NKeySeedFile, "tlsCaFile": n.TLSCA, "tlsCertFile": n.TLSCert, "tlsKeyFile": n.TLSKey,
				"passwordFile": n.PasswordFile, "tokenFile": n.TokenFile, "inboxPrefix": n.InboxPrefix}
			for k, v := range got {
				if v == "" {
					delete(got, k)
				}
			}
			if !reflect.DeepEqual(got, c.NATS) {
				t.Errorf("NATS settings\n got %v\nwant %v", got, c.NATS)
			}
			stores, _, err := command.EnvStores(getenv)
			if len(c.Refused) > 0 {
				for _, part := range c.Refused {
					if err == nil || !strings.Contains(err.Error(), `"`+part+`": want NAME=DIR`) {
						t.Errorf("COMPACTOR_STORES with %q: %v, want it refused", part, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var want []pipeline.Store
			for _, st := range c.Stores {
				want = append(want, pipeline.Store{Name: st.Name, Dir: tilde(st.Dir)})
			}
			if !reflect.DeepEqual(stores, want) {
				t.Errorf("stores %v, want %v", stores, want)
			}
		})
	}
}
