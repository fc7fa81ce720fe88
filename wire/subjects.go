package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// Subject roots. Every subject a store owns carries the store's name right after its
// root, so that one NATS permission says "this store only" (docs/security.md).
const (
	JobsPrefix   = "compactor.jobs."
	EventsPrefix = "compactor.events."
	DLQPrefix    = "compactor.dlq."
	HooksPrefix  = "compactor.hooks."
	BridgePrefix = "compactor.bridge."
)

// The streams jobs, events and dead letters are kept in.
const (
	StreamJobs   = "COMPACTOR_JOBS"
	StreamEvents = "COMPACTOR_EVENTS"
	StreamDLQ    = "COMPACTOR_DLQ"
)

// JobSubject is compactor.jobs.<store>.<session token>.<kind>.
func JobSubject(store, sessionID, kind string) string {
	return JobsPrefix + store + "." + SessionToken(sessionID) + "." + kind
}

// EventSubject is compactor.events.<store>.<session token>: the session's events are on
// its subjects, one per job (JobEventSubject).
func EventSubject(store, sessionID string) string {
	return EventsPrefix + store + "." + SessionToken(sessionID)
}

// JobEventSubject is compactor.events.<store>.<session token>.<job seq>: a job's events.
func JobEventSubject(store, sessionID string, jobSeq uint64) string {
	return EventSubject(store, sessionID) + "." + strconv.FormatUint(jobSeq, 10)
}

// DLQSubject is compactor.dlq.<store>.<session token>.
func DLQSubject(store, sessionID string) string {
	return DLQPrefix + store + "." + SessionToken(sessionID)
}

// DLQSubjectFor derives the dead-letter subject from a job subject, whatever its payload:
// compactor.jobs.<store>.<token>.<kind> → compactor.dlq.<store>.<token>.
func DLQSubjectFor(jobSubject string) string { return DLQPrefix + sessionPart(jobSubject) }

// EventSubjectFor is the event subject of the job message seq on jobSubject (the same as
// JobEventSubject of the job's store and session, but available even when the payload
// cannot be parsed).
func EventSubjectFor(jobSubject string, seq uint64) string {
	return EventsPrefix + sessionPart(jobSubject) + "." + strconv.FormatUint(seq, 10)
}

// sessionPart is "<store>.<token>" of compactor.jobs.<store>.<token>.<kind>.
func sessionPart(jobSubject string) string {
	rest := strings.TrimPrefix(jobSubject, JobsPrefix)
	if i := strings.LastIndexByte(rest, '.'); i >= 0 {
		return rest[:i]
	}
	return rest
}

// BridgeSubject is where a bridge for the session is asked for:
// compactor.bridge.<store>.<session token>.
func BridgeSubject(store, sessionID string) string {
	return BridgePrefix + store + "." + SessionToken(sessionID)
}

// HookSubject is where Pi's extension reports each run of Pi's session_before_compact hook
// (a HookReport): compactor.hooks.<store>.<session token>.
func HookSubject(store, sessionID string) string {
	return HooksPrefix + store + "." + SessionToken(sessionID)
}

// ValidateStoreName reports whether name can be a subject token and a consumer name:
// letters, digits, '-' and '_', at most 64 characters.
func ValidateStoreName(name string) error {
	if name == "" {
		return errors.New("store name is empty")
	}
	if len(name) > 64 {
		return fmt.Errorf("store name %q is longer than 64 characters", name)
	}
	for _, r := range name {
		if !(r == '-' || r == '_' || (r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r)))) {
			return fmt.Errorf("store name %q: only ASCII letters, digits, '-' and '_' are allowed (%q is not)", name, r)
		}
	}
	return nil
}

// SessionToken maps a session id to a subject token. Pi's ids (UUIDs) are used as they
// are; an id that cannot be a token (it holds '.', '*', '>', spaces or control characters,
// or is very long) is replaced by "h-" and a hash of it, so every session still gets its
// own subject and the mapping is stable.
func SessionToken(id string) string {
	if validToken(id) && !strings.HasPrefix(id, "h-") {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "h-" + hex.EncodeToString(sum[:16])
}

func validToken(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == '.' || r == '*' || r == '>' || r == 0x7f || r > 127 {
			return false
		}
	}
	return true
}
