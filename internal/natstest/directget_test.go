package natstest

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DirectGet reads a KV value's last revision, and nil once it is deleted or when there
// never was one.
func TestDirectGetReadsTheLastValue(t *testing.T) {
	t.Parallel()
	nc, err := nats.Connect(StartServer(t).ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "B"})
	if err != nil {
		t.Fatal(err)
	}
	get := func(key string) string {
		t.Helper()
		v, err := DirectGet(ctx, nc, "KV_B", "$KV.B."+key)
		if err != nil {
			t.Fatalf("DirectGet %s: %v", key, err)
		}
		if v == nil {
			return "<nil>"
		}
		return string(v)
	}
	for _, v := range []string{"one", "two"} {
		if _, err := kv.PutString(ctx, "k", v); err != nil {
			t.Fatal(err)
		}
	}
	if got := get("k"); got != "two" {
		t.Fatalf("the last value: %s", got)
	}
	if got := get("never"); got != "<nil>" {
		t.Fatalf("a key never put: %s", got)
	}
	if err := kv.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if got := get("k"); got != "<nil>" {
		t.Fatalf("a deleted key: %s", got)
	}
}
