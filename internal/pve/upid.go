package pve

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// UPID identifies a PVE task: "UPID:node:PID:PSTART:STARTTIME:type:id:user:".
//
// A UPID returned by ParseUPID remembers the text it was parsed from, so String
// gives back exactly what PVE sent (PVE accepts lower-case hex and a 9-digit
// pstart, and the task's log file is named after the original text). A UPID
// built field by field prints in PVE's canonical form.
type UPID struct {
	Node      string    // the node the task runs on (the only node that can answer for it)
	PID       uint32    // worker process id
	PStart    uint64    // process start, in clock ticks since boot (may exceed 32 bits)
	StartTime time.Time // UTC, whole seconds
	Type      string    // e.g. qmstart, qmigrate, hastart
	ID        string    // e.g. the vmid; may be empty
	User      string    // e.g. root@pam or an API token id user@realm!name

	raw string // the parsed text, kept for an exact round trip
}

// errUPID is wrapped by every ParseUPID failure.
var errUPID = errors.New("invalid UPID")

// ParseUPID parses a UPID exactly as PVE's decoder does (pve-common
// PVE::UPID::decode):
//
//	^UPID:(node):([0-9A-Fa-f]{8}):([0-9A-Fa-f]{8,9}):([0-9A-Fa-f]{8}):([^:\s/]+):([^:\s/]*):([^:\s/]+):$
//
// with node = [a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?. Two deliberate
// tightenings, both for text PVE itself never produces: the type, id and user
// fields must be valid UTF-8 without control characters or any Unicode white
// space, and no trailing newline is accepted (Perl's "$" would allow one).
func ParseUPID(s string) (UPID, error) {
	fail := func(why string) (UPID, error) {
		return UPID{}, fmt.Errorf("%w %q: %s", errUPID, truncate(s, 120), why)
	}
	if len(s) > maxUPIDLen {
		return fail("too long")
	}
	rest, ok := strings.CutPrefix(s, "UPID:")
	if !ok {
		return fail(`does not start with "UPID:"`)
	}
	if !strings.HasSuffix(rest, ":") {
		return fail("no trailing colon")
	}
	if n := strings.Count(rest, ":"); n != 7 {
		return fail(fmt.Sprintf("%d fields, want 7", n))
	}
	f := splitUPID(s)
	node, pid, pstart, start, typ, id, user := f[0], f[1], f[2], f[3], f[4], f[5], f[6]
	if !nodeSyntax(node) {
		return fail("bad node name")
	}
	if !isHex(pid, 8, 8) {
		return fail("pid is not 8 hex digits")
	}
	if !isHex(pstart, 8, 9) {
		return fail("pstart is not 8 or 9 hex digits")
	}
	if !isHex(start, 8, 8) {
		return fail("starttime is not 8 hex digits")
	}
	if typ == "" || !upidText(typ) {
		return fail("bad type")
	}
	if !upidText(id) {
		return fail("bad id")
	}
	if user == "" || !upidText(user) {
		return fail("bad user")
	}
	return upidOf(s, f), nil
}

// splitUPID is the seven fields of "UPID:node:pid:pstart:starttime:type:id:user:",
// which has exactly eight colons after "UPID:" (ParseUPID checks first). An
// array, not a slice: a UPID is read on every task request.
func splitUPID(s string) (f [7]string) {
	fields := s[len("UPID:") : len(s)-1]
	for i := range 6 {
		f[i], fields, _ = strings.Cut(fields, ":")
	}
	f[6] = fields
	return f
}

// upidOf is the UPID of text s with fields f that ParseUPID accepted.
func upidOf(s string, f [7]string) UPID {
	p, _ := strconv.ParseUint(f[1], 16, 32)
	ps, _ := strconv.ParseUint(f[2], 16, 64)
	st, _ := strconv.ParseUint(f[3], 16, 32)
	return UPID{
		Node: f[0], PID: uint32(p), PStart: ps, StartTime: time.Unix(int64(st), 0).UTC(),
		Type: f[4], ID: f[5], User: f[6], raw: s,
	}
}

// maxUPIDLen bounds what ParseUPID looks at. Real UPIDs are well under 200
// bytes (node ≤ 63, user ≤ 64 + token name); the bound keeps hostile input cheap.
const maxUPIDLen = 512

// FormatUPID renders u in PVE's canonical form (PVE::UPID::encode:
// "UPID:%s:%08X:%08X:%08X:%s:%s:%s:"), ignoring any parsed original text.
func FormatUPID(u UPID) string {
	return fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%s:%s:",
		u.Node, u.PID, u.PStart, u.StartTime.Unix(), u.Type, u.ID, u.User)
}

// String returns the text u was parsed from when its fields are unchanged, and
// the canonical form otherwise.
func (u UPID) String() string {
	// Only ParseUPID sets raw, and only to text it accepted: its fields are read
	// again without checking them again (String is called several times on every
	// task request).
	if u.raw != "" && upidOf(u.raw, splitUPID(u.raw)).sameFields(u) {
		return u.raw
	}
	return FormatUPID(u)
}

// IsZero reports whether u is the zero UPID.
func (u UPID) IsZero() bool { return u.sameFields(UPID{}) }

// Equal reports whether u and v name the same task (same fields, whatever the
// hex case of the text they were parsed from).
func (u UPID) Equal(v UPID) bool { return u.sameFields(v) }

func (u UPID) sameFields(v UPID) bool {
	return u.Node == v.Node && u.PID == v.PID && u.PStart == v.PStart &&
		u.StartTime.Equal(v.StartTime) && u.Type == v.Type && u.ID == v.ID && u.User == v.User
}

// MarshalText implements encoding.TextMarshaler (the UPID's text).
func (u UPID) MarshalText() ([]byte, error) {
	if u.IsZero() {
		return []byte{}, nil
	}
	s := u.String()
	if _, err := ParseUPID(s); err != nil {
		return nil, err
	}
	return []byte(s), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseUPID; empty text
// gives the zero UPID.
func (u *UPID) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*u = UPID{}
		return nil
	}
	p, err := ParseUPID(string(b))
	if err != nil {
		return err
	}
	*u = p
	return nil
}

func isHex(s string, minLen, maxLen int) bool {
	if len(s) < minLen || len(s) > maxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// upidText reports whether s may be a UPID type, id or user field: PVE's
// [^:\s/]*, read strictly (see ParseUPID).
func upidText(s string) bool {
	// ASCII, every real UPID's case, byte by byte: the same rule without
	// decoding runes (a UPID is read on every task request).
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			return upidTextUnicode(s)
		}
		if c <= ' ' || c == 0x7f || c == ':' || c == '/' { // controls, white space, the separators
			return false
		}
	}
	return true
}

// upidTextUnicode is upidText for text that is not all ASCII.
func upidTextUnicode(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r == ':' || r == '/' || r == '\v' || unicode.IsSpace(r) || unicode.IsControl(r) ||
			r == '\u200b' || r == '\u2028' || r == '\u2029' || r == '\ufeff' {
			return false
		}
	}
	return true
}

// truncate shortens s to at most n bytes (not splitting a UTF-8 sequence)
// and marks the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
