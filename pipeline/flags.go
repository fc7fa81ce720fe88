package pipeline

import (
	"flag"
	"fmt"
)

// DefaultClientURL is where clients (enqueue, sweep) look for NATS when none is configured:
// the embedded server of a `compactor run` on this machine.
var DefaultClientURL = fmt.Sprintf("nats://%s:%d", DefaultEmbeddedHost, DefaultEmbeddedPort)

// BindNATSFlags registers the NATS connection flags shared by compactor and enqueue on fs,
// with defaults from the environment (getenv may be nil). Secrets given by flag are visible
// in the process list: prefer the environment or files for them.
func BindNATSFlags(fs *flag.FlagSet, c *NATSConfig, getenv func(string) string) {
	env := func(keys ...string) string {
		if getenv == nil {
			return ""
		}
		for _, k := range keys {
			if v := getenv(k); v != "" {
				return v
			}
		}
		return ""
	}
	fs.StringVar(&c.URL, "nats-url", env("COMPACTOR_NATS_URL", "NATS_URL"), "NATS server URL (env COMPACTOR_NATS_URL, NATS_URL)")
	fs.StringVar(&c.User, "nats-user", env("NATS_USER"), "NATS user (env NATS_USER)")
	fs.StringVar(&c.Password, "nats-password", env("NATS_PASSWORD"), "NATS password (env NATS_PASSWORD)")
	fs.StringVar(&c.Token, "nats-token", env("NATS_TOKEN"), "NATS token (env NATS_TOKEN)")
	fs.StringVar(&c.NKeySeedFile, "nkey", env("NATS_NKEY"), "NATS nkey seed file (env NATS_NKEY)")
	fs.StringVar(&c.CredsFile, "creds", env("NATS_CREDS"), "NATS credentials file (env NATS_CREDS)")
	fs.StringVar(&c.TLSCA, "tls-ca", env("NATS_CA"), "CA certificate for NATS TLS (env NATS_CA)")
	fs.StringVar(&c.TLSCert, "tls-cert", env("NATS_CERT"), "client certificate for NATS TLS (env NATS_CERT)")
	fs.StringVar(&c.TLSKey, "tls-key", env("NATS_KEY"), "client key for NATS TLS (env NATS_KEY)")
}

// StoreFlag collects repeatable --store name=DIR flags.
type StoreFlag []Store

// String implements flag.Value.
func (s *StoreFlag) String() string {
	out := ""
	for i, st := range *s {
		if i > 0 {
			out += ","
		}
		out += st.Name + "=" + st.Dir
	}
	return out
}

// Set implements flag.Value.
func (s *StoreFlag) Set(v string) error {
	st, err := ParseStore(v)
	if err != nil {
		return err
	}
	*s = append(*s, st)
	return nil
}
