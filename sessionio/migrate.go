package sessionio

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// migrateV1 gives a v1 file's entries ids and a linear parent chain in memory, as Pi's
// migrateV1ToV2 does on load, and turns compaction firstKeptEntryIndex (an index into the
// parsed lines, header at 0) into firstKeptEntryId. Pi uses random ids; compactor derives
// them from the position so that repeated reads agree. Nothing is written to disk: compactor
// never appends to v1/v2 files.
func (s *Session) migrateV1(lines []parsedLine, all []*Entry) {
	prev := ""
	n := 0
	for i, e := range all {
		if e == nil {
			continue
		}
		n++
		e.ID = fmt.Sprintf("%08x", n)
		e.ParentID = prev
		prev = e.ID
		var fields []kv
		fields = append(fields, kv{"id", mustJSON(e.ID)})
		if e.ParentID == "" {
			fields = append(fields, kv{"parentId", []byte("null")})
		} else {
			fields = append(fields, kv{"parentId", mustJSON(e.ParentID)})
		}
		var drop []string
		if e.Type == TypeCompaction && len(lines[i].re.FirstKeptEntryIndex) > 0 {
			if idx, ok := jsonNumber(lines[i].re.FirstKeptEntryIndex); ok {
				if j := int(idx); float64(j) == idx && j >= 0 && j < len(all) && all[j] != nil {
					e.FirstKeptEntryID = all[j].ID
					fields = append(fields, kv{"firstKeptEntryId", mustJSON(e.FirstKeptEntryID)})
				}
				drop = append(drop, "firstKeptEntryIndex")
			}
		}
		if raw, err := editObject(e.Raw, drop, fields, nil); err == nil {
			e.Raw = raw
		}
	}
	s.diag(Diagnostic{Kind: DiagMigrated, Message: fmt.Sprintf("version %d file migrated to v3 in memory (ids derived from positions); the file on disk is not changed and compactor will not append to it", s.Header.Version)})
}

// migrateV2 renames the message role hookMessage to custom (Pi's migrateV2ToV3).
func (s *Session) migrateV2() {
	for _, e := range s.Entries {
		if e.Type != TypeMessage || e.Message == nil || e.Message.Role != "hookMessage" {
			continue
		}
		e.Message.Role = RoleCustom
		if raw, err := editObject(e.Message.Raw, nil, nil, map[string][]byte{"role": mustJSON(RoleCustom)}); err == nil {
			e.Message.Raw = raw
			if outer, err := editObject(e.Raw, nil, nil, map[string][]byte{"message": raw}); err == nil {
				e.Raw = outer
			}
		}
	}
	if s.Header.Version == 2 {
		s.diag(Diagnostic{Kind: DiagMigrated, Message: "version 2 file migrated to v3 in memory; the file on disk is not changed and compactor will not append to it"})
	}
}

type kv struct {
	key string
	val []byte
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// editObject rewrites a JSON object's top level: it drops keys, replaces values in place
// and appends new keys at the end (JS property order), leaving every other value's bytes
// untouched.
func editObject(raw []byte, drop []string, add []kv, replace map[string][]byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("edit object: not an object")
	}
	var fields []kv
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("edit object: %w", err)
		}
		key, _ := kt.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, fmt.Errorf("edit object: %w", err)
		}
		fields = append(fields, kv{key, val})
	}
	out := []byte{'{'}
	emit := func(k string, v []byte) {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, mustJSON(k)...)
		out = append(out, ':')
		out = append(out, v...)
	}
	seen := map[string]bool{}
	for _, f := range fields {
		if contains(drop, f.key) {
			continue
		}
		seen[f.key] = true
		if r, ok := replace[f.key]; ok {
			emit(f.key, r)
			continue
		}
		if i := indexKV(add, f.key); i >= 0 {
			emit(f.key, add[i].val) // an existing key keeps its position (JS assignment)
			continue
		}
		emit(f.key, f.val)
	}
	for _, a := range add {
		if !seen[a.key] {
			emit(a.key, a.val)
		}
	}
	return append(out, '}'), nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func indexKV(list []kv, key string) int {
	for i, x := range list {
		if x.key == key {
			return i
		}
	}
	return -1
}
