package pve

// A /cluster/resources answer of a large cluster is megabytes of flat objects
// (10 000 VMs: 2.6 MB), and encoding/json took about 40 ms and 3 allocations per
// VM for it (reflection, a string per field, a method call per value). This file
// reads the usual shape of that answer in one pass over the bytes, and every
// plain string value is a slice of the answer itself (the answer's bytes are the
// call's own and never written again, so they are taken as one string).
//
// It accepts a strict subset of JSON — an object holding "data" (an array of
// flat objects) and perhaps "total"; keys and string values of printable ASCII
// without escapes; numbers of JSON's grammar; true, false, null — checks every
// byte it passes over, and hands each value to the same wire types'
// UnmarshalJSON that encoding/json would call (flexInt, flexFloat, Bool), so
// what it accepts it decodes exactly as the general path does. Anything else —
// an escape, a nested value, a key it would have to skip, a value a wire type
// refuses — and the whole answer goes to the general path (decodeAnswer), which
// defines what is accepted and every error.

import "unsafe"

// answerDecoder is an out value of a call that decodes the answer's bytes
// itself (attempt hands them over instead of calling decodeAnswer).
type answerDecoder interface {
	decodeAnswer(b []byte) (total int64, envErr, dataErr error)
}

// resourcesAnswer decodes a /cluster/resources answer into res.
type resourcesAnswer struct {
	res []Resource
}

func (a *resourcesAnswer) decodeAnswer(b []byte) (int64, error, error) {
	if res, total, ok := decodeResourcesFast(b); ok {
		a.res = res
		return total, nil, nil
	}
	var w []resourceWire
	total, envErr, dataErr := decodeAnswer(b, &w)
	a.res = resourcesFromWire(w)
	return total, envErr, dataErr
}

// resourceScanner walks an answer; src is the answer as one string, so that a
// plain string value is src[i:j] and costs no allocation.
type resourceScanner struct {
	b   []byte
	src string
	i   int
}

func (s *resourceScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next skips whitespace and reports whether c is the next byte (consuming it).
func (s *resourceScanner) next(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// plainString reads a string of printable ASCII without escapes and returns its
// content's bounds.
func (s *resourceScanner) plainString() (start, end int, ok bool) {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return 0, 0, false
	}
	start = s.i + 1
	for j := start; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			s.i = j + 1
			return start, j, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return 0, 0, false
		}
	}
	return 0, 0, false
}

// value reads one scalar value and returns its bytes: a plain string (quotes
// included), a number of JSON's grammar, true, false or null.
func (s *resourceScanner) value() (start, end int, ok bool) {
	s.ws()
	if s.i >= len(s.b) {
		return 0, 0, false
	}
	start = s.i
	switch c := s.b[s.i]; {
	case c == '"':
		if _, _, ok := s.plainString(); !ok {
			return 0, 0, false
		}
		return start, s.i, true
	case c == 't' || c == 'f' || c == 'n':
		for _, lit := range [...]string{"true", "false", "null"} {
			if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
				s.i += len(lit)
				return start, s.i, true
			}
		}
		return 0, 0, false
	case c == '-' || '0' <= c && c <= '9':
		if !s.number() {
			return 0, 0, false
		}
		return start, s.i, true
	}
	return 0, 0, false
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *resourceScanner) number() bool {
	b, i := s.b, s.i
	digits := func() bool {
		j := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		return i > j
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return false
		}
	}
	s.i = i
	return true
}

// str decodes a string field's value: a plain string is a slice of src; any
// other value goes through flexString as encoding/json would send it there.
func (s *resourceScanner) str(start, end int) (string, bool) {
	if s.b[start] == '"' {
		return internOr(s.src[start+1 : end-1]), true
	}
	var v flexString
	if v.UnmarshalJSON(s.b[start:end]) != nil {
		return "", false
	}
	return string(v), true
}

// internOr returns the constant for the frequent values, so that the snapshot
// does not keep the whole answer alive for them alone; other values stay
// slices of the answer.
func internOr(v string) string {
	switch v {
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
	case "started":
		return "started"
	case "":
		return ""
	}
	return v
}

// decodeResourcesFast decodes the usual shape of a /cluster/resources answer,
// or reports false (see the top of this file).
func decodeResourcesFast(b []byte) (res []Resource, total int64, ok bool) {
	s := &resourceScanner{b: b}
	if !s.next('{') {
		return nil, 0, false
	}
	seenData, seenTotal := false, false
	for first := true; ; first = false {
		if first && s.next('}') {
			return nil, 0, false // no data
		}
		ks, ke, ok := s.plainString()
		if !ok || !s.next(':') {
			return nil, 0, false
		}
		switch key := b[ks:ke]; {
		case asciiEqualFold(key, "data") && !seenData:
			seenData = true
			if s.src == "" && len(b) > 0 {
				// The answer as a string without a copy: readBody's buffer is this
				// call's alone and nothing writes to it after the read.
				s.src = unsafe.String(&b[0], len(b))
			}
			if res, ok = s.resources(); !ok {
				return nil, 0, false
			}
		case asciiEqualFold(key, "total") && !seenTotal:
			seenTotal = true
			vs, ve, ok := s.value()
			var t flexInt
			if !ok || t.UnmarshalJSON(b[vs:ve]) != nil {
				return nil, 0, false
			}
			total = int64(t)
		default:
			return nil, 0, false
		}
		if s.next(',') {
			continue
		}
		if !s.next('}') {
			return nil, 0, false
		}
		break
	}
	s.ws()
	if s.i != len(b) || !seenData {
		return nil, 0, false
	}
	return res, total, true
}

// resources reads data's array of flat objects.
func (s *resourceScanner) resources() ([]Resource, bool) {
	if !s.next('[') {
		return nil, false // null or not an array: the general path says what it is
	}
	out := make([]Resource, 0, len(s.b)/256+1)
	if s.next(']') {
		return out, true
	}
	for {
		if !s.next('{') {
			return nil, false
		}
		var r Resource
		if !s.next('}') {
			for {
				if !s.field(&r) {
					return nil, false
				}
				if s.next(',') {
					continue
				}
				if !s.next('}') {
					return nil, false
				}
				break
			}
		}
		out = append(out, r)
		if s.next(',') {
			continue
		}
		if !s.next(']') {
			return nil, false
		}
		return out, true
	}
}

// field reads one key and value of a resource into r. A key encoding/json would
// match to no field is skipped (its value read and checked); one it would match
// case-insensitively is matched so too.
func (s *resourceScanner) field(r *Resource) bool {
	ks, ke, ok := s.plainString()
	if !ok || !s.next(':') {
		return false
	}
	vs, ve, ok := s.value()
	if !ok {
		return false
	}
	key, v := s.b[ks:ke], s.b[vs:ve]
	var err error
	switch field := resourceField(key); field {
	case fID:
		r.ID, ok = s.str(vs, ve)
	case fType:
		r.Type, ok = s.str(vs, ve)
	case fNode:
		r.Node, ok = s.str(vs, ve)
	case fName:
		r.Name, ok = s.str(vs, ve)
	case fStatus:
		r.Status, ok = s.str(vs, ve)
	case fLock:
		r.Lock, ok = s.str(vs, ve)
	case fTags:
		r.Tags, ok = s.str(vs, ve)
	case fHAState:
		r.HAState, ok = s.str(vs, ve)
	case fPool:
		r.Pool, ok = s.str(vs, ve)
	case fStorage:
		r.Storage, ok = s.str(vs, ve)
	case fVMID, fMaxMem, fMem, fMaxDisk, fDisk, fUptime:
		var n flexInt
		err = n.UnmarshalJSON(v)
		switch field {
		case fVMID:
			r.VMID = intIn(n)
		case fMaxMem:
			r.MaxMem = int64(n)
		case fMem:
			r.Mem = int64(n)
		case fMaxDisk:
			r.MaxDisk = int64(n)
		case fDisk:
			r.Disk = int64(n)
		case fUptime:
			r.Uptime = int64(n)
		}
	case fMaxCPU, fCPU:
		var f flexFloat
		err = f.UnmarshalJSON(v)
		if field == fMaxCPU {
			r.MaxCPU = float64(f)
		} else {
			r.CPU = float64(f)
		}
	case fTemplate:
		var t Bool
		err = t.UnmarshalJSON(v)
		r.Template = bool(t)
	}
	return ok && err == nil
}

// The fields of Resource, as resourceField names them.
const (
	fNone = iota
	fID
	fType
	fNode
	fName
	fStatus
	fLock
	fTags
	fHAState
	fPool
	fStorage
	fVMID
	fMaxMem
	fMem
	fMaxDisk
	fDisk
	fUptime
	fMaxCPU
	fCPU
	fTemplate
)

// resourceField says which field of Resource a key names, as encoding/json
// would match it (ignoring case), telling the candidates apart by length first:
// every key of every VM passes here.
func resourceField(key []byte) int {
	eq := asciiEqualFold
	switch len(key) {
	case 2:
		if eq(key, "id") {
			return fID
		}
	case 3:
		switch {
		case eq(key, "mem"):
			return fMem
		case eq(key, "cpu"):
			return fCPU
		}
	case 4:
		switch {
		case eq(key, "type"):
			return fType
		case eq(key, "node"):
			return fNode
		case eq(key, "vmid"):
			return fVMID
		case eq(key, "name"):
			return fName
		case eq(key, "lock"):
			return fLock
		case eq(key, "tags"):
			return fTags
		case eq(key, "pool"):
			return fPool
		case eq(key, "disk"):
			return fDisk
		}
	case 6:
		switch {
		case eq(key, "status"):
			return fStatus
		case eq(key, "maxmem"):
			return fMaxMem
		case eq(key, "maxcpu"):
			return fMaxCPU
		case eq(key, "uptime"):
			return fUptime
		}
	case 7:
		switch {
		case eq(key, "hastate"):
			return fHAState
		case eq(key, "storage"):
			return fStorage
		case eq(key, "maxdisk"):
			return fMaxDisk
		}
	case 8:
		if eq(key, "template") {
			return fTemplate
		}
	}
	return fNone
}
