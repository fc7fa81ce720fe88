//go:build redteam

package redteam

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/access"
)

// The smaller findings of the red team: an embedded server beyond loopback (taking anyone
// with --insecure-local, or its token in clear text), and `compactor status` with a
// store's keys, which waited 10 s before.

func init() {
	register(Case{Name: "an embedded server beyond loopback: --insecure-local, or its token without TLS", Roles: []access.Role{access.RoleWorker},
		Attack: func(ctx context.Context, a *Attacker) (func(), error) {
			for _, extra := range [][]string{{"--insecure-local"}, {}} {
				args := append([]string{"run", "--once", "--store", "rt=" + a.Root, "--data-dir", filepath.Join(a.f.dir, "rt-embedded"), "--listen", "0.0.0.0:0"}, extra...)
				rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, errOut, err := run(rctx, args...)
				cancel()
				if err == nil || !strings.Contains(errOut, "beyond this machine") {
					return nil, fmt.Errorf("taken: compactor run %v: %v %s", extra, err, errOut)
				}
			}
			return nil, nil
		}})
	register(Case{Name: "compactor status with hostA's keys: at once, nothing of hostB's", Roles: []access.Role{access.RoleWorker, access.RoleAgent, access.RoleOperator},
		Attack: func(ctx context.Context, a *Attacker) (func(), error) {
			for _, store := range []string{"hostA", "hostB"} {
				start := time.Now()
				out, errOut, err := a.CLI(ctx, "status", "--store", store, "--json")
				if took := time.Since(start); took > 5*time.Second {
					return nil, fmt.Errorf("status --store %s took %s: %v %s", store, took, err, errOut)
				}
				if store == "hostB" && strings.Contains(out, `"worker"`) {
					return nil, fmt.Errorf("leak: status of hostB with hostA's key: %s", out)
				}
			}
			return nil, nil
		}})
}
