package pve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// PVE is written in Perl and its JSON encoder types scalars by how they were
// last used: booleans are mostly 0/1, sometimes true/false; numbers are
// sometimes strings ("vmid":"100" in older task lists, "maxmem":"..." after a
// string operation). The types below accept every form PVE has been seen to
// send and nothing else; the exported result types hold plain Go values.

// Bool is a boolean as PVE sends it: JSON true/false, 0/1, or the strings
// "0"/"1"/"true"/"false". null and absence read as false.
type Bool bool

// UnmarshalJSON implements json.Unmarshaler.
func (b *Bool) UnmarshalJSON(data []byte) error {
	// The shapes PVE sends, without trimming or a string (hot: every VM of
	// /cluster/resources has one).
	if len(data) == 1 {
		switch data[0] {
		case '0':
			*b = false
			return nil
		case '1':
			*b = true
			return nil
		}
	}
	data = bytes.TrimSpace(data)
	switch string(data) {
	case "true", "1", `"1"`, `"true"`:
		*b = true
		return nil
	case "false", "0", `"0"`, `"false"`, `""`, "null":
		*b = false
		return nil
	}
	// 1.0 / 0.0 and the like.
	if f, err := strconv.ParseFloat(string(data), 64); err == nil && (f == 0 || f == 1) {
		*b = f == 1
		return nil
	}
	return fmt.Errorf("pve: %s is not a boolean", truncate(string(data), 40))
}

// MarshalJSON implements json.Marshaler (as a JSON boolean).
func (b Bool) MarshalJSON() ([]byte, error) { return json.Marshal(bool(b)) }

// flexInt is an integer sent as a JSON number (integral) or a decimal string.
type flexInt int64

func (n *flexInt) UnmarshalJSON(data []byte) error {
	if isNullish(data) {
		*n = 0
		return nil
	}
	if v, ok := plainInt(unquoteDigits(data)); ok {
		*n = flexInt(v)
		return nil
	}
	s, ok := numberText(data)
	if !ok {
		return fmt.Errorf("pve: %s is not an integer", truncate(string(data), 40))
	}
	if s == "" {
		*n = 0
		return nil
	}
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		*n = flexInt(v)
		return nil
	}
	// 4294967296.0, 1e3: accept only integral values in range.
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f != math.Trunc(f) || math.Abs(f) > 1<<62 {
		return fmt.Errorf("pve: %s is not an integer", truncate(s, 40))
	}
	*n = flexInt(f)
	return nil
}

// flexFloat is a number sent as a JSON number or a decimal string.
type flexFloat float64

func (n *flexFloat) UnmarshalJSON(data []byte) error {
	if isNullish(data) {
		*n = 0
		return nil
	}
	if f, ok := plainFloat(unquoteDigits(data)); ok {
		*n = flexFloat(f)
		return nil
	}
	s, ok := numberText(data)
	if !ok {
		return fmt.Errorf("pve: %s is not a number", truncate(string(data), 40))
	}
	if s == "" {
		*n = 0
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("pve: %s is not a number", truncate(s, 40))
	}
	*n = flexFloat(f)
	return nil
}

// numberText returns the decimal text of a JSON number or numeric string
// ("" for null and ""), refusing anything but digits, sign, point and
// exponent (no hex, no underscores, no Inf).
func numberText(data []byte) (string, bool) {
	s := string(bytes.TrimSpace(data))
	if s == "null" {
		return "", true
	}
	if strings.HasPrefix(s, `"`) {
		uq, err := strconv.Unquote(s)
		if err != nil {
			return "", false
		}
		s = strings.TrimSpace(uq)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E') {
			return "", false
		}
	}
	return s, true
}

// flexString is a string that PVE may also send as a number ("id":100 in some
// task lists) — the number's text is kept.
type flexString string

func (s *flexString) UnmarshalJSON(data []byte) error {
	if v, ok := plainString(data); ok {
		*s = flexString(v)
		return nil
	}
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		var v string
		if err := json.Unmarshal(data, &v); err != nil {
			return err
		}
		*s = flexString(v)
		return nil
	}
	switch {
	case string(data) == "null":
		*s = ""
		return nil
	case len(data) > 0 && (data[0] == '-' || '0' <= data[0] && data[0] <= '9'):
		var num json.Number
		if err := json.Unmarshal(data, &num); err != nil {
			return err
		}
		*s = flexString(num.String())
		return nil
	}
	return fmt.Errorf("pve: %s is not a string", truncate(string(data), 40))
}

// Fast paths. Each accepts only byte shapes for which it gives exactly what
// the general code below it gives, and leaves everything else (whitespace,
// escapes, exponents, long numbers, hostile input) to that code, so the
// accepted inputs, the values and the errors are the same; they only avoid
// the allocations of strings, strconv and nested json.Unmarshal calls.

// isNullish reports null and "" (numberText's "").
func isNullish(data []byte) bool {
	return string(data) == "null" || string(data) == `""`
}

// unquoteDigits strips the quotes of a string whose content is a plain
// number ("100", "0.5"); anything else is returned unchanged.
func unquoteDigits(data []byte) []byte {
	if len(data) >= 3 && data[0] == '"' && data[len(data)-1] == '"' {
		return data[1 : len(data)-1]
	}
	return data
}

// plainInt reads an optional '-' and 1 to 18 decimal digits (what
// strconv.ParseInt accepts of that shape, always in range).
func plainInt(d []byte) (int64, bool) {
	neg := len(d) > 0 && d[0] == '-'
	if neg {
		d = d[1:]
	}
	if len(d) == 0 || len(d) > 18 {
		return 0, false
	}
	var v int64
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	return v, true
}

// pow10 holds the powers of ten that are exact in a float64.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// plainFloat reads an optional '-', digits and at most one '.' between
// digits, with at most 15 significant digits and 22 decimals: the mantissa
// and the power of ten are then exact float64s, so one division is the
// correctly rounded value, which is what strconv.ParseFloat returns (its own
// "exact" fast path). Exponents and longer numbers go to ParseFloat.
func plainFloat(d []byte) (float64, bool) {
	neg := len(d) > 0 && d[0] == '-'
	if neg {
		d = d[1:]
	}
	if len(d) == 0 || len(d) > 40 || d[0] == '.' || d[len(d)-1] == '.' {
		return 0, false
	}
	var m uint64
	digits, decimals, point := 0, 0, false
	for _, c := range d {
		switch {
		case '0' <= c && c <= '9':
			if point {
				decimals++
			}
			if m == 0 && c == '0' {
				continue // leading zeros are not significant
			}
			digits++
			m = m*10 + uint64(c-'0')
		case c == '.' && !point:
			point = true
		default:
			return 0, false
		}
	}
	if digits > 15 || decimals >= len(pow10) {
		return 0, false
	}
	f := float64(m) / pow10[decimals]
	if neg {
		f = -f
	}
	return f, true
}

// plainString reads a JSON string of printable ASCII without escapes (its
// bytes are its value) and JSON numbers of the shape -?(0|[1-9][0-9]*)
// (their text is their value, as json.Number keeps it).
func plainString(data []byte) (string, bool) {
	if len(data) >= 2 && data[0] == '"' && data[len(data)-1] == '"' {
		in := data[1 : len(data)-1]
		for _, c := range in {
			if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
				return "", false
			}
		}
		return internString(in), true
	}
	d := data
	if len(d) > 0 && d[0] == '-' {
		d = d[1:]
	}
	if len(d) == 0 || len(d) > 1 && d[0] == '0' {
		return "", false
	}
	for _, c := range d {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	return string(data), true
}

// internString returns the value of frequent strings of /cluster/resources
// without allocating.
func internString(b []byte) string {
	switch string(b) {
	case "":
		return ""
	case "qemu":
		return "qemu"
	case "lxc":
		return "lxc"
	case "running":
		return "running"
	case "stopped":
		return "stopped"
	case "node":
		return "node"
	case "storage":
		return "storage"
	case "online":
		return "online"
	case "available":
		return "available"
	case "started":
		return "started"
	}
	return string(b)
}

// intIn converts n to int, failing if it does not fit (32-bit platforms).
func intIn(n flexInt) int {
	if int64(int(n)) != int64(n) {
		return 0
	}
	return int(n)
}
