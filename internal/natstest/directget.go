package natstest

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
)

// requestWait bounds one request to the server within the caller's context: a guard
// against a request nobody answers, not a measure.
const requestWait = 10 * time.Second

// DirectGet reads the last message of subject in stream through JetStream's direct-get API,
// the one read a role without the stream API keeps (an agent reading its prepared value);
// nil when there is none or it is a KV delete marker.
func DirectGet(ctx context.Context, nc *nats.Conn, stream, subject string) ([]byte, error) {
	rctx, cancel := context.WithTimeout(ctx, requestWait)
	defer cancel()
	m, err := nc.RequestWithContext(rctx, "$JS.API.DIRECT.GET."+stream+"."+subject, nil)
	if err != nil {
		return nil, err
	}
	if m.Header.Get("Status") == "404" || m.Header.Get("KV-Operation") != "" {
		return nil, nil
	}
	return m.Data, nil
}
