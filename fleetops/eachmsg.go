package fleetops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/compactor-dev/compactor/access"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// EachMsg calls f with every message of stream under filter, in order (a read by
// sequence, the next message on the filter each time: the admin's request). A stream that
// does not exist has none.
func EachMsg(ctx context.Context, js jetstream.JetStream, stream, filter string, f func(*jetstream.RawStreamMsg) error) error {
	str, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	info, err := str.Info(ctx)
	if err != nil {
		return err
	}
	for seq := max(info.State.FirstSeq, 1); seq <= info.State.LastSeq; {
		m, err := msgGet(ctx, js.Conn(), stream, seq, filter)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := f(m); err != nil {
			return err
		}
		seq = m.Sequence + 1
	}
	return nil
}

// msgGet reads the first message of stream at seq or after on filter with the JSON API
// ($JS.API.STREAM.MSG.GET, the admin's and the operator's): its sequence is the server's
// field, never a header the message may carry (a direct get's answer puts the server's
// headers after the message's own, and the client library reads the first).
func msgGet(ctx context.Context, nc *nats.Conn, stream string, seq uint64, filter string) (*jetstream.RawStreamMsg, error) {
	req, _ := json.Marshal(map[string]any{"seq": seq, "next_by_subj": filter})
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, err := nc.RequestWithContext(rctx, access.APIPrefix+"STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Error *jetstream.APIError `json:"error"`
		Msg   *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Header  []byte    `json:"hdrs"`
			Data    []byte    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(r.Data, &resp); err != nil {
		return nil, fmt.Errorf("get %s %d: %w", stream, seq, err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return nil, jetstream.ErrMsgNotFound
		}
		return nil, resp.Error
	}
	if resp.Msg == nil {
		return nil, jetstream.ErrMsgNotFound
	}
	m := &jetstream.RawStreamMsg{Subject: resp.Msg.Subject, Sequence: resp.Msg.Seq, Data: resp.Msg.Data, Time: resp.Msg.Time, Header: nats.Header{}}
	if len(resp.Msg.Header) > 0 {
		hm, err := nats.DecodeHeadersMsg(resp.Msg.Header)
		if err == nil {
			m.Header = hm
		}
	}
	return m, nil
}
