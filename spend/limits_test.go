package spend

import (
	"testing"
	"time"

	"github.com/compactor-dev/compactor/access"
	"github.com/compactor-dev/compactor/wire"
)

// A store's worker may write its store's spend counts and the fleet's (the keys Key
// makes), and no other store's.
func TestSpendKeysArePermitted(t *testing.T) {
	t.Parallel()
	p, err := access.PermissionsFor(access.RoleWorker, []string{"hostA"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 5, 10, 30, 0, 0, time.UTC)
	allowed := func(subject string) bool {
		for _, s := range p.Publish {
			if _, ok := access.MatchTemplate(s, subject); ok {
				return true
			}
		}
		return false
	}
	for _, l := range []Limit{{Store: "hostA", Window: time.Hour, Tokens: 1}, {Window: 24 * time.Hour, Tokens: 1}} {
		key, _ := Key(l, now)
		for _, subj := range []string{"$KV." + wire.BucketSpend + "." + key, "$JS.API.DIRECT.GET.KV_" + wire.BucketSpend + ".$KV." + wire.BucketSpend + "." + key} {
			if !allowed(subj) {
				t.Errorf("worker of hostA may not publish %s (limit %s)", subj, l)
			}
		}
	}
	other, _ := Key(Limit{Store: "hostB", Window: time.Hour, Tokens: 1}, now)
	if allowed("$KV." + wire.BucketSpend + "." + other) {
		t.Errorf("worker of hostA may write hostB's spend count %s", other)
	}
}
