package fleetops

import (
	"slices"
	"strings"
	"time"

	"github.com/compactor-dev/compactor/wire"
	"github.com/nats-io/nats.go"
)

// DefaultPreparedTTL is how long a prepared summary is kept at most: a preparation is only
// useful while its session grows toward its next compaction. It is deleted before that,
// once used or compacted past (forgetPrepared): a summary holds someone's code, errors and
// sometimes secrets, and lives no longer than it is needed.
const DefaultPreparedTTL = 24 * time.Hour

// BaseLabels are the base and refusal labels of a report, bounded to the known words.
func BaseLabels(r wire.HookReport) (base, refused string) {
	base, refused = "other", "other"
	if r.Base == "" {
		base = "pi"
	} else if slices.Contains(wire.HookBases, r.Base) {
		base = r.Base
	}
	if r.BaseRefused == "" {
		refused = "none"
	} else if slices.Contains(wire.HookBaseRefusals, r.BaseRefused) {
		refused = r.BaseRefused
	}
	return base, refused
}

// HookLabels are the result and reason labels of a report, bounded to the known words.
func HookLabels(r wire.HookReport) (result, reason string) {
	result = r.Result
	switch result {
	case wire.HookResultPrepared, wire.HookResultExtract, wire.HookResultPi:
	default:
		result = "other"
	}
	reason = "other"
	if slices.Contains(wire.HookReasons, r.ReasonCode) {
		reason = r.ReasonCode
	}
	return result, reason
}

// Delivered reports whether m came from a JetStream consumer rather than from a client: its
// reply is the consumer's acknowledgement subject. A user that may create a consumer on its
// own data can have it deliver to any subject (NATS does not check the delivery subject
// against the creator's permissions): bridge requests and hook reports that arrive that
// way are ignored (docs/security.md, "What a host can still do").
func Delivered(m *nats.Msg) bool { return strings.HasPrefix(m.Reply, "$JS.ACK.") }
