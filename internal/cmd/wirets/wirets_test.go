package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const repoRoot = "../../.."

// TestGeneratedUpToDate fails when the committed TypeScript or samples differ from what the Go
// contract generates: run `make wire`.
func TestGeneratedUpToDate(t *testing.T) {
	ts, err := GenerateTS()
	if err != nil {
		t.Fatal(err)
	}
	samples, err := GenerateSamples()
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]byte{OutputTS: ts, OutputSamples: samples} {
		got, err := os.ReadFile(filepath.Join(repoRoot, path))
		if err != nil {
			t.Fatalf("%s: %v (run make wire)", path, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run make wire (go run ./internal/cmd/wirets) and commit it", path)
		}
	}
}

// TestBuildersAreGos: every generated builder, given the session's token, names what Go's
// builder names for the session id, for ids used as they are and ids that are hashed.
func TestBuildersAreGos(t *testing.T) {
	for _, row := range sampleSubjects() {
		for _, b := range builders {
			args := map[string]string{}
			for _, p := range b.Params {
				args[p] = row[p]
			}
			if got := b.render(args); got != row[b.Name] {
				t.Errorf("%s(%q): template gives %q, Go %q", b.Name, row["sessionId"], got, row[b.Name])
			}
		}
	}
}

// TestFieldsAreEncodingJSONs: the fields read by reflection are the keys encoding/json writes,
// in its order, for a value with every field set; an optional field left empty is left out,
// and a nullable one left nil is null.
func TestFieldsAreEncodingJSONs(t *testing.T) {
	var s structs
	for _, m := range messages {
		s.add(m.Name, m.Type)
	}
	if s.err != nil {
		t.Fatal(s.err)
	}
	msgs, err := sampleMessages()
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range msgs {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, f := range s.fields[name] {
			want = append(want, f.Name)
		}
		if got := keys(t, b); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: encoding/json writes %v, generated %v", name, got, want)
		}
		empty, err := json.Marshal(zero(v))
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(empty, &obj); err != nil {
			t.Fatal(err)
		}
		for _, f := range s.fields[name] {
			raw, present := obj[f.Name]
			if present == f.Optional {
				t.Errorf("%s.%s: optional %t, but an empty value has it: %t", name, f.Name, f.Optional, present)
			}
			if present && (string(raw) == "null") != f.Nullable {
				t.Errorf("%s.%s: nullable %t, but an empty value writes %s", name, f.Name, f.Nullable, raw)
			}
		}
	}
}

// keys are the top-level keys of a JSON object, in order.
func keys(t *testing.T, b []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	var out []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, k.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// zero is the zero value of v's type.
func zero(v any) any {
	return reflect.New(reflect.TypeOf(v)).Elem().Interface()
}
