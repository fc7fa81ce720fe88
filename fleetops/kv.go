package fleetops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/compactor-dev/compactor/access"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The buckets, read and written with the subjects a NATS permission can name: a value is
// published to $KV.<bucket>.<key> and read by a direct get whose API subject ends in the
// key ($JS.API.DIRECT.GET.KV_<bucket>.$KV.<bucket>.<key>), and a watch is a consumer
// created with its filter in the API subject ($JS.API.CONSUMER.CREATE.KV_<bucket>.<name>.
// $KV.<bucket>.<keys>). So "this store's keys only" is a permission on subjects that start
// with the store's name (docs/security.md). The client library's own KeyValue binds a
// bucket by reading its stream's information ($JS.API.STREAM.INFO), which a permission
// cannot scope: whoever may read it may list every key of every store.

// Bucket is one bucket. Its errors are the client library's (jetstream.ErrKeyNotFound,
// ErrKeyExists, a wrong-last-sequence API error for a revision that moved on).
type Bucket struct {
	js     jetstream.JetStream
	nc     *nats.Conn
	name   string // the bucket
	stream string // KV_<bucket>
	pre    string // $KV.<bucket>.
}

// Name is the bucket's name.
func (b *Bucket) Name() string { return b.name }

func OpenBucket(js jetstream.JetStream, name string) *Bucket {
	return &Bucket{js: js, nc: js.Conn(), name: name, stream: "KV_" + name, pre: "$KV." + name + "."}
}

// Entry is a value read from a bucket (jetstream.KeyValueEntry).
type Entry struct {
	bucket, key string
	value       []byte
	rev         uint64
	created     time.Time
	delta       uint64
	op          jetstream.KeyValueOp
}

func (e *Entry) Bucket() string                  { return e.bucket }
func (e *Entry) Key() string                     { return e.key }
func (e *Entry) Value() []byte                   { return e.value }
func (e *Entry) Revision() uint64                { return e.rev }
func (e *Entry) Created() time.Time              { return e.created }
func (e *Entry) Delta() uint64                   { return e.delta }
func (e *Entry) Operation() jetstream.KeyValueOp { return e.op }

// KV headers (the client library's wire format, so that its watchers and ours agree).
const (
	kvOpHeader = "KV-Operation"
	kvOpDel    = "DEL"
	kvOpPurge  = "PURGE"
)

func opOf(h nats.Header) jetstream.KeyValueOp {
	switch h.Get(kvOpHeader) {
	case kvOpDel:
		return jetstream.KeyValueDelete
	case kvOpPurge:
		return jetstream.KeyValuePurge
	}
	switch h.Get(jetstream.MarkerReasonHeader) {
	case "MaxAge", "Purge":
		return jetstream.KeyValuePurge
	case "Remove":
		return jetstream.KeyValueDelete
	}
	return jetstream.KeyValuePut
}

// Get returns the key's value; a key never written, deleted or expired is
// jetstream.ErrKeyNotFound.
func (b *Bucket) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	e, err := b.Last(ctx, key)
	if err != nil {
		return nil, err
	}
	if e.op != jetstream.KeyValuePut {
		return nil, jetstream.ErrKeyNotFound
	}
	return e, nil
}

// Last is the key's last message, a delete marker included.
func (b *Bucket) Last(ctx context.Context, key string) (*Entry, error) {
	m, err := DirectLast(ctx, b.nc, b.stream, b.pre+key)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, jetstream.ErrKeyNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("bucket %s: get %s: %w", b.name, key, err)
	}
	return &Entry{bucket: b.name, key: key, value: m.Data, rev: m.Sequence, created: m.Time, op: opOf(m.Header)}, nil
}

// Put writes the key whatever it holds and returns the new revision.
func (b *Bucket) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	ack, err := b.js.Publish(ctx, b.pre+key, value)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// Create writes the key only if it holds no value (never written, deleted or expired);
// else jetstream.ErrKeyExists.
func (b *Bucket) Create(ctx context.Context, key string, value []byte) (uint64, error) {
	rev, err := b.Update(ctx, key, value, 0)
	if err == nil || !IsWrongLastSeq(err) {
		return rev, err
	}
	// Something is there: a value, or a delete marker that a create may replace.
	e, gerr := b.Last(ctx, key)
	if gerr == nil && e.op != jetstream.KeyValuePut {
		return b.Update(ctx, key, value, e.rev)
	}
	return 0, jetstream.ErrKeyExists
}

// Update writes the key if its last revision is still rev (0: it was never written).
func (b *Bucket) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	ack, err := b.js.Publish(ctx, b.pre+key, value, jetstream.WithExpectLastSequencePerSubject(rev))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// Delete writes a delete marker (with history 1 the value itself is gone). With lastRev,
// only if the key's last revision is still that.
func (b *Bucket) Delete(ctx context.Context, key string, lastRev ...uint64) error {
	m := nats.NewMsg(b.pre + key)
	m.Header.Set(kvOpHeader, kvOpDel)
	var opts []jetstream.PublishOpt
	if len(lastRev) > 0 {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(lastRev[0]))
	}
	_, err := b.js.PublishMsg(ctx, m, opts...)
	return err
}

// errCodeMsgTTLDisabled is the err_code of a message with a TTL published to a stream that
// does not allow per-message TTLs.
const errCodeMsgTTLDisabled jetstream.ErrorCode = 10166

// DeleteExpiring writes a delete marker that the server removes ttl later, if the key's
// last revision is still rev (0: whatever it is): the watchers of the moment learn that the key is gone, and
// the marker does not stay for ever in a bucket without a TTL of its own. A bucket set up
// before it allowed per-message TTLs gets a plain marker (ttlRefused is then true).
func (b *Bucket) DeleteExpiring(ctx context.Context, key string, rev uint64, ttl time.Duration) (ttlRefused bool, err error) {
	m := nats.NewMsg(b.pre + key)
	m.Header.Set(kvOpHeader, kvOpDel)
	opts := []jetstream.PublishOpt{jetstream.WithMsgTTL(ttl)}
	var revs []uint64
	if rev > 0 {
		opts, revs = append(opts, jetstream.WithExpectLastSequencePerSubject(rev)), []uint64{rev}
	}
	_, err = b.js.PublishMsg(ctx, m, opts...)
	if apiCode(err) == errCodeMsgTTLDisabled {
		return true, b.Delete(ctx, key, revs...)
	}
	return false, err
}

// lastAll reads the last message of every key under prefix (a key's first tokens; "" every
// key), delete markers included, with one batched direct get: no consumer is created, so a
// role that may not create consumers reads them too. At most directBatchMax keys.
func (b *Bucket) lastAll(ctx context.Context, prefix string) ([]*Entry, error) {
	filter := b.pre + ">"
	if prefix != "" {
		filter = b.pre + prefix + ".>"
	}
	msgs, err := directLastAll(ctx, b.nc, b.stream, filter)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: read %s: %w", b.name, filter, err)
	}
	out := make([]*Entry, 0, len(msgs))
	for _, m := range msgs {
		if len(m.Subject) <= len(b.pre) {
			continue
		}
		out = append(out, &Entry{bucket: b.name, key: m.Subject[len(b.pre):], value: m.Data, rev: m.Sequence, created: m.Time, op: opOf(m.Header)})
	}
	return out, nil
}

// Watcher delivers a bucket's values under a key prefix: every current one, then nil,
// then every change, until Stop.
type Watcher struct {
	updates chan jetstream.KeyValueEntry
	sub     *nats.Subscription
}

func (w *Watcher) Updates() <-chan jetstream.KeyValueEntry { return w.updates }

// Stop ends the watch. Its consumer is deleted by the client library (a request the
// worker's permissions refuse: it then expires by itself, see Watch).
func (w *Watcher) Stop() error { return w.sub.Unsubscribe() }

// Watch follows the keys under prefix (a key's first tokens, e.g. a store's name; ""
// watches every key). The consumer is an ordered push consumer created with its filter
// in the request's subject, so that a permission can allow it for one store's keys.
func (b *Bucket) Watch(ctx context.Context, prefix string) (*Watcher, error) {
	legacy, err := b.nc.JetStream()
	if err != nil {
		return nil, err
	}
	filter := b.pre + ">"
	if prefix != "" {
		filter = b.pre + prefix + ".>"
	}
	w := &Watcher{updates: make(chan jetstream.KeyValueEntry, 256)}
	wi := &watchInit{w: w, last: time.Now(), ready: make(chan struct{})}
	sub, err := legacy.Subscribe(filter, func(m *nats.Msg) { wi.update(b, m) }, nats.BindStream(b.stream), nats.OrderedConsumer(), nats.DeliverLastPerSubject(), nats.Context(ctx))
	if err != nil {
		close(wi.ready)
		return nil, err
	}
	sub.SetClosedHandler(func(string) {
		wi.mu.Lock()
		defer wi.mu.Unlock()
		close(w.updates)
	})
	wi.mu.Lock()
	if n, err := sub.InitialConsumerPending(); err == nil {
		if n == 0 {
			wi.done = true
			w.updates <- nil
		}
		wi.initial = n
	}
	wi.mu.Unlock()
	close(wi.ready)
	w.sub = sub
	go wi.endWhenIdle(sub)
	return w, nil
}

// watchInit is a watch's delivery of the initial values: how many there are, how many came,
// and when the last did; the nil that ends them is sent once.
type watchInit struct {
	w                 *Watcher
	mu                sync.Mutex
	done              bool
	received, initial uint64
	last              time.Time     // the last delivery (or the start)
	ready             chan struct{} // closed once initial is known
}

// update delivers a message of the watch, and the nil after the initial values.
func (wi *watchInit) update(b *Bucket, m *nats.Msg) {
	<-wi.ready
	meta, err := m.Metadata()
	if err != nil || len(m.Subject) <= len(b.pre) {
		return
	}
	wi.mu.Lock()
	defer wi.mu.Unlock()
	wi.last = time.Now()
	wi.w.updates <- &Entry{bucket: b.name, key: m.Subject[len(b.pre):], value: m.Data, rev: meta.Sequence.Stream,
		created: meta.Timestamp, delta: meta.NumPending, op: opOf(m.Header)}
	if !wi.done {
		wi.received++
		if wi.received >= wi.initial || meta.NumPending == 0 {
			wi.done = true
			wi.w.updates <- nil
		}
	}
}

// endWhenIdle ends the initial values when they stall. They end with the message that
// leaves nothing pending. When the last ones vanish before they are delivered (markers that
// expire, keys deleted), that message never comes: once nothing has been delivered for
// watchInitialIdle (and the delivery is not waiting for this watch's reader: it holds mu
// then), the initial values are taken as complete. A value missed that way only comes later.
func (wi *watchInit) endWhenIdle(sub *nats.Subscription) {
	t := time.NewTicker(watchInitialIdle / 4)
	defer t.Stop()
	for range t.C {
		wi.mu.Lock()
		switch {
		case wi.done || !sub.IsValid():
		case time.Since(wi.last) >= watchInitialIdle:
			wi.done = true
			wi.w.updates <- nil
		default:
			wi.mu.Unlock()
			continue
		}
		wi.mu.Unlock()
		return
	}
}

// watchInitialIdle is how long a watch's initial delivery may pause before it is taken as
// complete (see Watch).
const watchInitialIdle = time.Second

// directBatchMax is the most messages a batched direct get answers (nats-server's own
// bound; a larger answer is refused with "413 Too Many Results").
const directBatchMax = 1024

// directLastAll reads the last message of every subject under filter with one batched direct
// get ($JS.API.DIRECT.GET.<stream> with multi_last; nats-server 2.11 or later): the
// messages, then an end-of-batch status. No subject: an empty list.
func directLastAll(ctx context.Context, nc *nats.Conn, stream, filter string) ([]*jetstream.RawStreamMsg, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	req, _ := json.Marshal(struct {
		MultiLast []string `json:"multi_last"`
		Batch     int      `json:"batch"`
	}{[]string{filter}, directBatchMax})
	if err := nc.PublishRequest(access.DirectGetPrefix+stream, inbox, req); err != nil {
		return nil, err
	}
	var out []*jetstream.RawStreamMsg
	for {
		r, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, err
		}
		if len(r.Data) == 0 && r.Header.Get("Status") != "" {
			switch r.Header.Get("Status") {
			case "204": // end of the batch
				return out, nil
			case "404":
				return out, nil
			case "503":
				return nil, nats.ErrNoResponders
			default:
				return nil, fmt.Errorf("direct get %s: %s %s", filter, r.Header.Get("Status"), r.Header.Get("Description"))
			}
		}
		m, err := rawOf(r, filter)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
}

// rawOf reads a direct get's answer. The server adds its headers (the message's sequence,
// time and subject) after the message's own: a message may carry headers of those names
// itself (a client wrote them, or a relayed answer kept them, docs/security.md), so the
// server's are the last values.
func rawOf(r *nats.Msg, subject string) (*jetstream.RawStreamMsg, error) {
	last := func(k string) string {
		v := r.Header.Values(k)
		if len(v) == 0 {
			return ""
		}
		return v[len(v)-1]
	}
	seq, err := strconv.ParseUint(last(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("direct get %s: bad sequence header %q", subject, last(jetstream.SequenceHeader))
	}
	at, err := time.Parse(time.RFC3339Nano, last(jetstream.TimeStampHeaer))
	if err != nil {
		return nil, fmt.Errorf("direct get %s: bad time stamp header %q", subject, last(jetstream.TimeStampHeaer))
	}
	return &jetstream.RawStreamMsg{Subject: last(jetstream.SubjectHeader), Sequence: seq, Header: r.Header, Data: r.Data, Time: at}, nil
}

// DirectLast reads the last message of stream on subject with a direct get whose API
// subject names the subject, so that a permission can scope it ($JS.API.DIRECT.GET.
// <stream>.<subject>; the stream must allow direct gets). A subject without a message is
// jetstream.ErrMsgNotFound; a stream that does not exist or does not allow direct gets
// answers nothing (nats.ErrNoResponders).
func DirectLast(ctx context.Context, nc *nats.Conn, stream, subject string) (*jetstream.RawStreamMsg, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	r, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream+"."+subject, nil)
	if err != nil {
		return nil, err
	}
	if len(r.Data) == 0 {
		switch r.Header.Get("Status") {
		case "":
		case "404":
			return nil, jetstream.ErrMsgNotFound
		default:
			desc := r.Header.Get("Description")
			if desc == "" {
				desc = "unable to get message"
			}
			return nil, fmt.Errorf("direct get %s: %s %s", subject, r.Header.Get("Status"), desc)
		}
	}
	return rawOf(r, subject)
}

// IsMaxConsumers matches a consumer refused because its stream or its account holds as
// many consumers as its limit allows (10026), from either client API.
func IsMaxConsumers(err error) bool {
	var legacy *nats.APIError
	return apiCode(err) == jetstream.JSErrCodeMaximumConsumersLimit ||
		errors.As(err, &legacy) && legacy.ErrorCode == nats.ErrorCode(jetstream.JSErrCodeMaximumConsumersLimit)
}

// ConflictWait is how long a compare-and-set loop waits before it reads a record again
// after its write lost (n = 1 after the first loss), a pure function of n. A write loses to
// another writer, or because the read it was based on was answered by a follower that had
// not applied the last write yet (a replicated stream's followers answer direct gets): read
// again at once, the same follower, the nearest, gives the same stale answer.
func ConflictWait(n int) time.Duration { return doubling(5*time.Millisecond, 500*time.Millisecond, n) }

// AfterConflict waits ConflictWait(n), or until ctx ends (its error).
func AfterConflict(ctx context.Context, n int) error { return wait(ctx, ConflictWait(n)) }

// doubling is first for n = 1, twice as long for each n after, at most ceiling.
func doubling(first, ceiling time.Duration, n int) time.Duration {
	return min(first<<min(max(n-1, 0), 16), ceiling)
}

// wait waits d, or until ctx ends (its error).
func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// IsWrongLastSeq matches a compare-and-set refusal by its code (10071, or 10164 on
// replicated streams), whatever the client wrapped around it.
func IsWrongLastSeq(err error) bool {
	c := apiCode(err)
	return c == jetstream.JSErrCodeStreamWrongLastSequence || c == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}
