package fleetops

import (
	"strings"
	"testing"
)

// How a record's version and a count are read: a record without "v" is version 1's
// shape; a value that is no JSON object, or whose "v" is not a whole number of at least
// 1, is damaged, not newer; a count is its record or, as first written, a bare decimal.
func TestRecordVersions(t *testing.T) {
	for _, c := range []struct {
		in string
		v  int
		ok bool
	}{
		{`{"path":"a"}`, 1, true}, {`{"v":1}`, 1, true}, {`{"v":3,"x":[1]}`, 3, true},
		{`{"v":0}`, 0, false}, {`{"v":1.5}`, 0, false}, {`{"v":"2"}`, 0, false}, {`12`, 0, false}, {`not json`, 0, false},
	} {
		if v, ok := RecordV([]byte(c.in)); v != c.v || ok != c.ok {
			t.Errorf("recordV(%s) = %d, %v; want %d, %v", c.in, v, ok, c.v, c.ok)
		}
	}
	for _, c := range []struct {
		in    string
		n, hb int
		err   string
	}{
		{`7`, 7, 0, ""}, {`{"v":1,"n":3,"handedBack":2}`, 3, 2, ""}, {`{"n":4}`, 4, 0, ""},
		{`{"v":2,"n":3}`, 0, 0, "schema version 2"}, {`seven`, 0, 0, "not a count"},
	} {
		got, err := ParseCount("B", "k", []byte(c.in))
		if (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) || got.N != c.n || got.HandedBack != c.hb {
			t.Errorf("parseCount(%s) = %+v, %v; want n %d, handed back %d, error %q", c.in, got, err, c.n, c.hb, c.err)
		}
	}
}
