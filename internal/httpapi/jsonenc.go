package httpapi

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// The answers read most often (a VM's status, a task, the inventory lists) are
// encoded by hand into a pooled buffer: encoding/json costs reflection and an
// allocation per string pointer, time and nested value, which was a large part of
// a proxied read (issue 8 (docs/history.md)), and 10 000 VMs are 10 000 of each. The output is
// byte for byte what encoding/json writes for the same struct
// (TestHandEncodingMatchesEncodingJSON): the same escaping (HTML characters
// included), numbers and times.

// appender is a value that writes itself as JSON.
type appender interface {
	appendJSON(e *jsonEnc)
}

// jsonEnc is an output buffer and the first error met (a number JSON cannot hold).
type jsonEnc struct {
	b   []byte
	err error
}

var errNotFinite = errors.New("json: a number is not finite")

func (e *jsonEnc) raw(s string) { e.b = append(e.b, s...) }

// key writes `"name":`: after '{' when first, else after a comma. name must need
// no escaping.
func (e *jsonEnc) key(name string, first bool) {
	if first {
		e.b = append(e.b, '{')
	} else {
		e.b = append(e.b, ',')
	}
	e.b = append(e.b, '"')
	e.b = append(e.b, name...)
	e.b = append(e.b, '"', ':')
}

func (e *jsonEnc) int(n int64) { e.b = strconv.AppendInt(e.b, n, 10) }

func (e *jsonEnc) bool(v bool) { e.b = strconv.AppendBool(e.b, v) }

// float writes f as encoding/json does (appendFloat).
func (e *jsonEnc) float(f float64) {
	var ok bool
	if e.b, ok = appendFloat(e.b, f); !ok && e.err == nil {
		e.err = errNotFinite
	}
}

// appendFloat appends f as encoding/json writes it: shortest form, exponent only
// for very small or large magnitudes, "e-07" written "e-7". It reports false
// (and writes 0) for a number JSON cannot hold.
func appendFloat(b []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return append(b, '0'), false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}

// time writes t as time.Time.MarshalJSON does (RFC 3339 with nanoseconds).
func (e *jsonEnc) time(t time.Time) {
	if y := t.Year(); y < 0 || y >= 10000 {
		if e.err == nil {
			e.err = errors.New("json: a time's year is outside [0,9999]")
		}
	}
	e.b = append(e.b, '"')
	e.b = t.AppendFormat(e.b, time.RFC3339Nano)
	e.b = append(e.b, '"')
}

// strOrNull writes s, or null when it is empty.
func (e *jsonEnc) strOrNull(s string) {
	if s == "" {
		e.raw("null")
		return
	}
	e.str(s)
}

// strs writes a list of strings; nil is [] (the answers never hold null lists).
func (e *jsonEnc) strs(ss []string) {
	e.b = append(e.b, '[')
	for i, s := range ss {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		e.str(s)
	}
	e.b = append(e.b, ']')
}

const hexDigits = "0123456789abcdef"

// htmlSafe marks the ASCII bytes encoding/json writes as they are (with its
// default HTML escaping): printable, except ", \, <, > and &.
var htmlSafe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// str writes s as a JSON string as encoding/json does (appendString).
func (e *jsonEnc) str(s string) { e.b = appendString(e.b, s) }

// appendString appends s as a JSON string as encoding/json writes it: invalid
// UTF-8 as U+FFFD, HTML characters, U+2028 and U+2029 escaped.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if htmlSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// encPool recycles the buffers of hand-encoded answers; one that grew past
// maxPooledBuffer (a long list) is left to the garbage collector.
var encPool = sync.Pool{New: func() any { return &jsonEnc{b: make([]byte, 0, 2048)} }}

const maxPooledBuffer = 64 << 10

// jsonContentType is Content-Type's one value for JSON, shared by every answer.
var jsonContentType = []string{"application/json"}

// writeEncoded answers status with the envelope around data, encoded by hand
// (extra writes more top-level fields after data; may be nil).
func writeEncoded(w http.ResponseWriter, status int, message string, data appender, extra func(*jsonEnc)) {
	e := encPool.Get().(*jsonEnc)
	e.b, e.err = e.b[:0], nil
	e.raw(`{"code":`)
	e.int(int64(status))
	e.raw(`,"message":`)
	e.str(message)
	if data != nil {
		e.raw(`,"data":`)
		data.appendJSON(e)
	}
	if extra != nil {
		extra(e)
	}
	e.raw("}\n")
	if e.err != nil {
		status = http.StatusInternalServerError
		e.b = append(e.b[:0], `{"code":500,"message":"internal error","reason":"internal"}`+"\n"...)
	}
	h := w.Header()
	h["Content-Type"] = jsonContentType
	setContentLength(h, len(e.b))
	w.WriteHeader(status)
	w.Write(e.b)
	if cap(e.b) <= maxPooledBuffer {
		encPool.Put(e)
	}
}

// netHTTPBuffer is how much of an answer net/http holds back before it sends
// the header (its bufferBeforeChunkingSize; HTTP/2's is larger): an answer the
// handler wrote whole and no longer than this gets its Content-Length from
// net/http, exactly as if the handler had set it.
const netHTTPBuffer = 2048

// setContentLength sets Content-Length for an answer of n bytes that net/http
// would otherwise send chunked, and leaves a shorter one's to net/http. Every
// API answer carries 8 header fields besides (the request id, Cache-Control,
// Content-Type and apiHeaders); a Go map holds 8 in its first group, and a 9th
// made it grow on every answer — 5 allocations and 1.1 KB per request, the
// largest of the hot path's (issue 19 item 10, docs/history.md).
func setContentLength(h http.Header, n int) {
	if n > netHTTPBuffer {
		h["Content-Length"] = []string{strconv.Itoa(n)}
	}
}

// encode returns a's JSON alone (an event's data).
func encode(a appender) ([]byte, error) {
	var e jsonEnc
	a.appendJSON(&e)
	return e.b, e.err
}
