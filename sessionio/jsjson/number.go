package jsjson

import (
	"math"
	"strconv"
)

// maxSafeInt is 2^53: below it every integer-valued float64 prints as its exact integer,
// so the shortest-digits machinery can be skipped.
const maxSafeInt = 1 << 53

// AppendNumber appends f as JSON.stringify writes a number, which is ECMAScript
// Number::toString(10) except that NaN and ±Infinity become null:
//
//   - integers have no fraction (100, not 1e2 or 100.0), -0 is written 0;
//   - otherwise the shortest digit string that reads back as f is used (0.1, not
//     0.1000000000000000055511151231257827);
//   - exponent form is used when |f| < 1e-6 or |f| >= 1e21 (1e-7, 1e+21, 1.5e+300).
//
// Go's strconv shortest formatting chooses the same digits as V8 (both pick the
// shortest, then the closest); only the layout rules differ, and those are applied here.
func AppendNumber(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	if f == 0 {
		return append(dst, '0') // also -0
	}
	if f == math.Trunc(f) && f > -maxSafeInt && f < maxSafeInt {
		return strconv.AppendInt(dst, int64(f), 10)
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	// "d.ddddde±xx": digits and a decimal exponent, shortest round-trip.
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64)
	var digits [24]byte
	k := 0
	j := 0
	for ; e[j] != 'e'; j++ {
		if e[j] != '.' {
			digits[k] = e[j]
			k++
		}
	}
	exp := 0
	neg := e[j+1] == '-'
	for _, c := range e[j+2:] {
		exp = exp*10 + int(c-'0')
	}
	if neg {
		exp = -exp
	}
	// ECMAScript names: value = 0.d1d2...dk × 10^n.
	n := exp + 1
	d := digits[:k]
	switch {
	case k <= n && n <= 21:
		dst = append(dst, d...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, d[:n]...)
		dst = append(dst, '.')
		dst = append(dst, d[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, d...)
	default:
		dst = append(dst, d[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, d[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}
