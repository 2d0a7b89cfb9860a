package cli

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Text from PVE (VM names, tags, task logs, error messages) and from other users
// (nicknames, token names, audit reasons) reaches a person's terminal through
// this package. A terminal obeys what it is sent: ESC ] 0 ; … BEL retitles the
// window, ESC [ 2 J clears the screen, OSC 8 makes a link that reads as one thing
// and goes elsewhere, and the Unicode direction overrides reorder what is read.
// So the CLI never writes a control character it did not make itself
// (docs/security.md item 35): Escape is the one rule; TableOf.Write and the progress views
// apply it to every value, and the commands print every other line through it
// (cmd/vmgate: say and show). JSON (-o json) is written as the API gave it: the encoder
// escapes control characters itself, and the values stay exact for programs.

// Escape returns s with every character a terminal could act on written as an
// escape a person can read: C0 controls, DEL and C1 controls (U+0080–U+009F, which
// some terminals obey as CSI and OSC) as \t, \n, \r or \xNN and \u0085; the
// Unicode bidirectional marks, embeddings, overrides and isolates and the line
// and paragraph separators as \u202e and the like; and a byte that is not UTF-8
// as \xNN. Everything else, backslashes included, is kept: the result is for
// reading, not for parsing back.
func Escape(s string) string {
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if needsEscape(r, size) {
			break
		}
		i += size
	}
	if i == len(s) {
		return s // the usual case: nothing to escape, nothing allocated
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	writeEscaped(&b, s[i:])
	return b.String()
}

// needsEscape reports whether the rune r, size bytes long, is one Escape
// rewrites.
func needsEscape(r rune, size int) bool {
	switch {
	case r == utf8.RuneError && size <= 1: // not UTF-8
		return true
	case r < 0x20, r >= 0x7f && r <= 0x9f: // C0, DEL, C1
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069: // bidi
		return true
	case r == 0x2028, r == 0x2029: // line and paragraph separators
		return true
	}
	return false
}

// writeEscaped writes s to b with Escape's rule.
func writeEscaped(b *strings.Builder, s string) {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case !needsEscape(r, size):
			b.WriteString(s[i : i+size])
		case r == utf8.RuneError:
			fmt.Fprintf(b, `\x%02x`, s[i])
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80:
			fmt.Fprintf(b, `\x%02x`, r)
		default:
			fmt.Fprintf(b, `\u%04x`, r)
		}
		i += size
	}
}
