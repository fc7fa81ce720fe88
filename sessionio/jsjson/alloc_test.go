//go:build !race

package jsjson

import "testing"

// The race detector makes sync.Pool drop items at random, so allocation counts are only
// checked without it.
func TestCanonicalAllocs(t *testing.T) {
	raw := []byte(`{"z":[1.0,12345678901234567890,1e-7,-0,"\u00e9\ud800\n"],"1":{"b":1,"a":2,"b":3},"0":true}`)
	buf := make([]byte, 0, 1024)
	if _, err := Canonical(buf, raw); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = Canonical(buf[:0], raw) }); n != 0 {
		t.Errorf("Canonical allocates %v times per call, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = CanonicalLen(raw) }); n != 0 {
		t.Errorf("CanonicalLen allocates %v times per call, want 0", n)
	}
}
