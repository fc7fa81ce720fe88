package wire

// BucketPrepared holds one prepared summary per session (job kind "prepare"), keyed by
// PreparedKey, and the session's base beside it (BaseKey). Pi's extension reads it in its
// session_before_compact hook.
const BucketPrepared = "COMPACTOR_PREPARED"

// PreparedKey is the key of a session's prepared summary: <store>.<session token>.
func PreparedKey(store, sessionID string) string { return store + "." + SessionToken(sessionID) }

// BaseKey is the key of a session's base, beside its prepared summary: <store>.<session
// token>.base.
func BaseKey(store, sessionID string) string { return PreparedKey(store, sessionID) + ".base" }

// KVSubjectRoot starts the subjects of a KV bucket's keys: $KV.<bucket>.<key>.
const KVSubjectRoot = "$KV."

// PreparedSubject is the subject of a session's prepared summary in its bucket.
func PreparedSubject(store, sessionID string) string {
	return KVSubjectRoot + BucketPrepared + "." + PreparedKey(store, sessionID)
}
