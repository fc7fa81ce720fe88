package jsjson

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Field is one member of an ordered object.
type Field struct {
	Key   string
	Value any
}

// Fields is an object whose members are written in the order given, the way a
// JavaScript object literal keeps insertion order. Pi's entry lines depend on that order,
// so build them as Fields rather than maps or structs.
//
// As in JavaScript, keys that are array indices ("0", "1", … up to "4294967294") still
// come first in ascending numeric order, and a repeated key keeps its first position with
// its last value.
type Fields []Field

// Omit is the stand-in for JavaScript's undefined. A Field (or map entry) whose Value is
// Omit{} is left out entirely, as JSON.stringify leaves out undefined properties (Pi's
// optional keys such as details or parentSession); inside a []any it is written as null,
// as JSON.stringify writes undefined array elements.
type Omit struct{}

// Appender is implemented by types that write their own JSON.stringify form. AppendValue
// calls AppendJS for them, which lets other packages make their structs marshal in Pi's
// key order without going through Fields.
type Appender interface {
	AppendJS(dst []byte) ([]byte, error)
}

// Marshal returns the bytes JSON.stringify would produce for the JavaScript value v
// models. See AppendValue for the supported types.
func Marshal(v any) ([]byte, error) {
	return AppendValue(nil, v)
}

// AppendValue appends the JSON.stringify form of v to dst. Supported types:
//
//   - nil → null; bool; string (WTF-8, written by AppendString);
//   - float64, float32, int, int8…int64, uint, uint8…uint64: converted to float64, as
//     every JavaScript number is, and written by AppendNumber (so integers above 2^53
//     lose precision exactly as they would in JavaScript, and NaN/±Inf become null);
//   - []string, []any, []Fields, Fields, map[string]any, map[string]string;
//   - json.RawMessage: written as Canonical(raw), i.e. as if JSON.parse had read it;
//   - Appender.
//
// Go maps have no insertion order, so a map is written with array-index keys first in
// ascending numeric order (as JavaScript would) and then the other keys sorted by
// CompareUTF16, which is what Object.keys(o).sort() gives; use Fields when the order
// matters. A top-level Omit is an error (JSON.stringify(undefined) is not a string), and
// so is any other type.
func AppendValue(dst []byte, v any) ([]byte, error) {
	if _, ok := v.(Omit); ok {
		return dst, fmt.Errorf("jsjson: cannot marshal Omit as a value")
	}
	return appendValue(dst, v, 0)
}

func appendValue(dst []byte, v any, depth int) ([]byte, error) {
	if depth > MaxDepth {
		return dst, fmt.Errorf("jsjson: nesting deeper than %d", MaxDepth)
	}
	if n, ok := numberOf(v); ok {
		return AppendNumber(dst, n), nil
	}
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		if x {
			return append(dst, "true"...), nil
		}
		return append(dst, "false"...), nil
	case string:
		return AppendString(dst, x), nil
	case json.RawMessage:
		out, err := Canonical(dst, x)
		if err != nil {
			return dst, fmt.Errorf("jsjson: raw message: %w", err)
		}
		return out, nil
	case []string:
		dst = append(dst, '[')
		for i, s := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendString(dst, s)
		}
		return append(dst, ']'), nil
	case []any:
		return appendArray(dst, x, depth)
	case []Fields:
		return appendObjects(dst, x, depth)
	case Fields:
		return appendFields(dst, x, depth)
	case map[string]any:
		return appendFields(dst, mapFields(x), depth)
	case map[string]string:
		m := make(map[string]any, len(x))
		for k, s := range x {
			m[k] = s
		}
		return appendFields(dst, mapFields(m), depth)
	case Appender:
		return x.AppendJS(dst)
	default:
		return dst, fmt.Errorf("jsjson: unsupported type %T", v)
	}
}

// numberOf returns v as the float64 a JavaScript number holds, for Go's number types.
func numberOf(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int:
		return float64(x), true
	case int8:
		return float64(x), true
	case int16:
		return float64(x), true
	case int32:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint:
		return float64(x), true
	case uint8:
		return float64(x), true
	case uint16:
		return float64(x), true
	case uint32:
		return float64(x), true
	case uint64:
		return float64(x), true
	}
	return 0, false
}

// appendArray appends an array of values; an Omit element is written as null, as
// JSON.stringify writes undefined in an array.
func appendArray(dst []byte, x []any, depth int) ([]byte, error) {
	var err error
	dst = append(dst, '[')
	for i, e := range x {
		if i > 0 {
			dst = append(dst, ',')
		}
		if _, ok := e.(Omit); ok {
			dst = append(dst, "null"...)
			continue
		}
		if dst, err = appendValue(dst, e, depth+1); err != nil {
			return dst, err
		}
	}
	return append(dst, ']'), nil
}

// appendObjects appends an array of objects.
func appendObjects(dst []byte, x []Fields, depth int) ([]byte, error) {
	var err error
	dst = append(dst, '[')
	for i, e := range x {
		if i > 0 {
			dst = append(dst, ',')
		}
		if dst, err = appendFields(dst, e, depth+1); err != nil {
			return dst, err
		}
	}
	return append(dst, ']'), nil
}

// mapFields orders a map's entries as documented on AppendValue.
func mapFields(m map[string]any) Fields {
	fs := make(Fields, 0, len(m))
	for k, v := range m {
		fs = append(fs, Field{k, v})
	}
	slices.SortFunc(fs, func(a, b Field) int { return CompareUTF16(a.Key, b.Key) })
	return fs // appendFields moves index keys to the front
}

// appendFields writes an ordered object. The common case (no index keys, no repeats)
// is written straight through; otherwise the members are written and then put in
// JavaScript order by the same routine Canonical uses.
func appendFields(dst []byte, fs Fields, depth int) ([]byte, error) {
	start := len(dst)
	dst = append(dst, '{')
	var stack [16]member
	ms := stack[:0]
	var seen map[string]int
	reorder := false
	sawName := false
	lastIndex := int64(-1)
	n := 0
	for _, f := range fs {
		if _, ok := f.Value.(Omit); ok {
			continue
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		kStart := len(dst)
		dst = AppendString(dst, f.Key)
		m := member{kStart: kStart, kEnd: len(dst), index: arrayIndex(dst[kStart+1 : len(dst)-1]), src: n}
		if m.index >= 0 {
			if sawName || m.index < lastIndex {
				reorder = true
			}
			lastIndex = max(lastIndex, m.index)
		} else {
			sawName = true
		}
		if j := findDup(dst, ms, m, &seen); j >= 0 {
			reorder = true
			ms[j].src = n
			m.src = -1
		}
		dst = append(dst, ':')
		var err error
		if dst, err = appendValue(dst, f.Value, depth+1); err != nil {
			return dst[:start], err
		}
		m.vEnd = len(dst)
		ms = append(ms, m)
		n++
	}
	if reorder {
		dst, _, _ = reorderMembers(dst, start, ms, nil, nil)
	}
	return append(dst, '}'), nil
}
