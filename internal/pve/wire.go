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

// intIn converts n to int, failing if it does not fit (32-bit platforms).
func intIn(n flexInt) int {
	if int64(int(n)) != int64(n) {
		return 0
	}
	return int(n)
}
