package liveappend

import (
	"encoding/json"
	"testing"

	"github.com/compactor-dev/compactor/pi"
	"github.com/compactor-dev/compactor/sessionio"
)

// The lines these tests build sessions from: a v3 header, a user and an assistant message.

const hdr = `{"type":"session","version":3,"id":"s1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/x"}`

func user(id, parent, text string) string {
	p := "null"
	if parent != "" {
		p = `"` + parent + `"`
	}
	return `{"type":"message","id":"` + id + `","parentId":` + p + `,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"` + text + `","timestamp":1}}`
}

func asst(id, parent, text string) string {
	return `{"type":"message","id":"` + id + `","parentId":"` + parent + `","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":"` + text + `"}],"api":"x","provider":"p","model":"m","usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2},"stopReason":"stop","timestamp":2}}`
}

func mustPath(t *testing.T, s *sessionio.Session, leaf string) []*sessionio.Entry {
	t.Helper()
	p, err := s.Path(leaf)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// pi073 is Pi 0.73.1, whose rules the tests compare with the newest.
var pi073 = pi.MustParseRelease("0.73.1")
