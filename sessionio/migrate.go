package sessionio

import (
	"encoding/json"
	"fmt"
	"github.com/compactor-dev/compactor/sessionio/jsonscan"
)

// migrateV1 gives a v1 file's entries ids and a linear parent chain in memory, as Pi's
// migrateV1ToV2 does on load, and turns compaction firstKeptEntryIndex (an index into the
// parsed lines, header at 0) into firstKeptEntryId. Pi uses random ids; compactor derives
// them from the position so that repeated reads agree. Nothing is written to disk: compactor
// never appends to v1/v2 files.
//
// all holds every JSON object line in file order (nil for the header and extra headers,
// the header at index 0); fki the raw firstKeptEntryIndex of compactions.
func (s *Session) migrateV1(all []*Entry, fki map[*Entry][]byte) {
	prev := ""
	n := 0
	for _, e := range all {
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
		if raw := fki[e]; len(raw) > 0 {
			if idx, ok := jsonscan.Number(raw); ok {
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
	ms, notObject, err := jsonscan.ScanObject(raw, nil)
	if err != nil || notObject {
		return nil, fmt.Errorf("edit object: not an object")
	}
	out := make([]byte, 0, len(raw)+64)
	out = append(out, '{')
	emit := func(k []byte, quoted bool, v []byte) {
		if len(out) > 1 {
			out = append(out, ',')
		}
		if quoted {
			out = append(out, '"')
			out = append(out, k...)
			out = append(out, '"')
		} else {
			out = append(out, k...)
		}
		out = append(out, ':')
		out = append(out, v...)
	}
	seen := map[string]bool{}
	for _, m := range ms {
		key := string(m.Key) // keys compactor edits have no escapes
		if contains(drop, key) {
			continue
		}
		seen[key] = true
		if r, ok := replace[key]; ok {
			emit(m.Key, true, r)
			continue
		}
		if i := indexKV(add, key); i >= 0 {
			emit(m.Key, true, add[i].val) // an existing key keeps its position (JS assignment)
			continue
		}
		emit(m.Key, true, m.Val)
	}
	for _, a := range add {
		if !seen[a.key] {
			emit(mustJSON(a.key), false, a.val)
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
