package jsjson

// Arrays and objects of the canonical parser. An object's members are written as they are
// read and only rewritten when its keys need it: JavaScript lists array-index keys first
// in numeric order, and JSON.parse keeps a repeated key at its first position with its
// last value.

import (
	"slices"
)

// member is one object member already parsed.
type member struct {
	kStart, kEnd int   // canonical key, quotes included, in out
	vEnd         int   // end of the canonical value in out (emit mode)
	vLen         int   // UTF-16 length of the value (count mode)
	index        int64 // the key's array index, or -1
	src          int   // member (relative) whose value wins; -1 for a later duplicate
}

func (p *parser) array() (int, error) {
	if err := p.enter(); err != nil {
		return 0, err
	}
	p.pos++
	if !p.count {
		p.out = append(p.out, '[')
	}
	total := 2
	p.skipWS()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
	} else {
		for n := 0; ; n++ {
			if n > 0 {
				if p.count {
					total++
				} else {
					p.out = append(p.out, ',')
				}
			}
			v, err := p.value()
			if err != nil {
				return 0, err
			}
			total += v
			p.skipWS()
			if p.pos < len(p.data) && p.data[p.pos] == ',' {
				p.pos++
				continue
			}
			if p.pos < len(p.data) && p.data[p.pos] == ']' {
				p.pos++
				break
			}
			return 0, p.unexpected("',' or ']'")
		}
	}
	p.depth--
	if p.count {
		return total, nil
	}
	p.out = append(p.out, ']')
	return 0, nil
}

// linearDupLimit is how many members an object may have before duplicate keys are found
// through a map instead of by comparing against every earlier key.
const linearDupLimit = 16

func (p *parser) object() (int, error) {
	if err := p.enter(); err != nil {
		return 0, err
	}
	p.pos++
	objStart := len(p.out)
	if !p.count {
		p.out = append(p.out, '{')
	}
	base := len(p.members)
	reorder, err := p.objectMembers(base)
	if err != nil {
		return 0, err
	}
	p.depth--
	ms := p.members[base:]
	p.members = p.members[:base] // ms stays readable: nothing appends until we return
	if p.count {
		n := p.objectLen(ms)
		p.out = p.out[:objStart]
		return n, nil
	}
	if reorder {
		p.out, p.scratch, p.order = reorderMembers(p.out, objStart, ms, p.scratch, p.order)
	}
	p.out = append(p.out, '}')
	return 0, nil
}

// objectMembers reads an object's members up to its closing brace, appending them to
// p.members after base and (unless counting) their bytes to p.out; reorder says whether the
// keys need sorting (an array index after a name, or indexes out of order) or de-duplicating.
func (p *parser) objectMembers(base int) (reorder bool, err error) {
	sawName := false // a non-index key has been seen
	lastIndex := int64(-1)
	var seen map[string]int // key → first member, once the object is large

	p.skipWS()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return false, nil
	}
	for {
		p.skipWS()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return false, p.unexpected("a string key")
		}
		rel := len(p.members) - base
		if rel > 0 && !p.count {
			p.out = append(p.out, ',')
		}
		kStart := len(p.out)
		if err := p.str(); err != nil {
			return false, err
		}
		m := member{kStart: kStart, kEnd: len(p.out), index: arrayIndex(p.out[kStart+1 : len(p.out)-1]), src: rel}
		if m.index >= 0 {
			if sawName || m.index < lastIndex {
				reorder = true
			}
			lastIndex = max(lastIndex, m.index)
		} else {
			sawName = true
		}
		first := findDup(p.out, p.members[base:], m, &seen)
		if first >= 0 {
			reorder = true
			p.members[base+first].src = rel
			m.src = -1
		}
		p.skipWS()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return false, p.unexpected("':'")
		}
		p.pos++
		if !p.count {
			p.out = append(p.out, ':')
		}
		v, err := p.value()
		if err != nil {
			return false, err
		}
		m.vEnd, m.vLen = len(p.out), v
		p.members = append(p.members, m)
		p.skipWS()
		if p.pos < len(p.data) && p.data[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.pos < len(p.data) && p.data[p.pos] == '}' {
			p.pos++
			return reorder, nil
		}
		return false, p.unexpected("',' or '}'")
	}
}

// objectLen is the UTF-16 length of the object JSON.stringify writes for members ms
// (counting mode: the keys are in p.out, the values' lengths in the members).
func (p *parser) objectLen(ms []member) int {
	total, n := 2, 0
	for _, m := range ms {
		if m.src < 0 {
			continue
		}
		total += validUTF16Len(p.out[m.kStart:m.kEnd]) + 1 + ms[m.src].vLen
		n++
	}
	if n > 1 {
		total += n - 1
	}
	return total
}

// findDup returns the (relative) index of the earlier member of ms whose key equals
// m's, or -1 and remembers m. Keys are compared as canonical bytes in buf, which is
// exact because the canonical encoding of a string is unique. Small objects compare
// linearly; from linearDupLimit members on, a map (created in *seen) is used.
func findDup(buf []byte, ms []member, m member, seen *map[string]int) int {
	key := buf[m.kStart:m.kEnd]
	if *seen == nil && len(ms) < linearDupLimit {
		for j, o := range ms {
			if o.src >= 0 && o.kEnd-o.kStart == len(key) && string(buf[o.kStart:o.kEnd]) == string(key) {
				return j
			}
		}
		return -1
	}
	if *seen == nil {
		*seen = make(map[string]int, 2*len(ms))
		for j, o := range ms {
			if o.src >= 0 {
				(*seen)[string(buf[o.kStart:o.kEnd])] = j
			}
		}
	}
	if j, ok := (*seen)[string(key)]; ok {
		return j
	}
	(*seen)[string(key)] = len(ms)
	return -1
}

// reorderMembers rewrites the members of the object whose '{' is at out[objStart] into
// JavaScript property order, dropping earlier values of repeated keys. ms describe the
// members as written. It returns out without the closing '}', and the grown buffers.
func reorderMembers(out []byte, objStart int, ms []member, scratch []byte, order []int) ([]byte, []byte, []int) {
	order = order[:0]
	for i, m := range ms {
		if m.src >= 0 && m.index >= 0 {
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(a, b int) int {
		switch ia, ib := ms[a].index, ms[b].index; {
		case ia < ib:
			return -1
		case ia > ib:
			return 1
		}
		return 0
	})
	for i, m := range ms {
		if m.src >= 0 && m.index < 0 {
			order = append(order, i)
		}
	}
	scratch = scratch[:0]
	for n, i := range order {
		if n > 0 {
			scratch = append(scratch, ',')
		}
		m := ms[i]
		v := ms[m.src]
		scratch = append(scratch, out[m.kStart:m.kEnd]...)
		scratch = append(scratch, out[v.kEnd:v.vEnd]...) // ':' and the value
	}
	out = append(out[:objStart+1], scratch...)
	return out, scratch, order
}

// arrayIndex returns the numeric value of key if it is an array index in canonical form
// ("0", or no leading zero, at most 4294967294), which JavaScript lists before other
// keys; otherwise -1.
func arrayIndex(key []byte) int64 {
	if len(key) == 0 || len(key) > 10 || key[0] < '0' || key[0] > '9' || key[0] == '0' && len(key) > 1 {
		return -1
	}
	var v int64
	for _, c := range key {
		if c < '0' || c > '9' {
			return -1
		}
		v = v*10 + int64(c-'0')
	}
	if v > 4294967294 {
		return -1
	}
	return v
}
