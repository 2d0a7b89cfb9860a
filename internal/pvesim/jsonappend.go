package pvesim

import (
	"strconv"
	"unicode/utf8"
)

// jsonAppender is a value that writes its own JSON. /cluster/resources with
// tens of thousands of entries is written this way: reflection-based
// encoding was most of its cost.
type jsonAppender interface {
	appendJSON(b []byte) []byte
}

// jsonList is an array of self-writing values.
type jsonList []jsonAppender

func (l jsonList) appendJSON(b []byte) []byte {
	b = append(b, '[')
	for i, x := range l {
		if i > 0 {
			b = append(b, ',')
		}
		b = x.appendJSON(b)
	}
	return append(b, ']')
}

// jsonObject writes one object's fields in order.
type jsonObject struct {
	b     []byte
	first bool
}

func openObject(b []byte) *jsonObject { return &jsonObject{b: append(b, '{'), first: true} }

func (o *jsonObject) key(k string) {
	if !o.first {
		o.b = append(o.b, ',')
	}
	o.first = false
	o.b = appendJSONString(o.b, k)
	o.b = append(o.b, ':')
}

func (o *jsonObject) str(k, v string) {
	o.key(k)
	o.b = appendJSONString(o.b, v)
}

// strOpt writes a string field only when it is not empty (omitempty).
func (o *jsonObject) strOpt(k, v string) {
	if v != "" {
		o.str(k, v)
	}
}

func (o *jsonObject) int(k string, v int64) {
	o.key(k)
	o.b = strconv.AppendInt(o.b, v, 10)
}

func (o *jsonObject) intPtr(k string, v *int64) {
	if v != nil {
		o.int(k, *v)
	}
}

func (o *jsonObject) float(k string, v float64) {
	o.key(k)
	o.b = strconv.AppendFloat(o.b, v, 'f', -1, 64)
}

func (o *jsonObject) close() []byte { return append(o.b, '}') }

// appendJSONString quotes s as Perl's JSON does: only quotes, backslashes
// and control characters are escaped.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		case c < utf8.RuneSelf:
			b = append(b, c)
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, "\ufffd"...)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size
			continue
		}
		i++
	}
	return append(b, '"')
}
