package auth

import (
	_ "embed"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/vmgate/vmgate/internal/errs"
)

// Password length limits (SECURITY.md 13, NIST SP 800-63B §3.1.1.2). The minimum
// counts characters (runes) so that non-Latin passwords are not penalised; the
// maximum counts bytes because that is what the hash has to read.
const (
	MinPasswordRunes = 12
	MaxPasswordBytes = 1024
)

// serviceName is a context-specific word (NIST SP 800-63B) no password may contain.
const serviceName = "vmgate"

//go:embed common_passwords.txt
var commonPasswordsText string

// CheckPasswordPolicy returns an *errs.Error of kind Invalid, with a message a person
// can act on, when password may not be used by the account with this e-mail. There
// are no composition rules (NIST SP 800-63B); a password is refused when it is
//
//   - not valid UTF-8, shorter than 12 characters or longer than 1024 bytes;
//   - a password from the embedded list of common ones, compared lower-cased, also
//     padded with digits or symbols at either end and with common letter
//     substitutions undone (so "Summer2024!!" and "P@ssw0rd1234" are refused like
//     "summer" and "password");
//   - one character or a short pattern (under 12 characters) repeated, or a run of
//     consecutive characters ("abcdefghijkl");
//   - containing the service's name "vmgate" or the e-mail's local part (the part
//     before "@", and for "name+tag" the name too), case-insensitively and with
//     substitutions undone. A local part shorter than 4 characters would be found
//     in many good passwords by chance, so for those only the local part padded
//     with digits or symbols is refused.
func CheckPasswordPolicy(email, password string) error {
	switch {
	case !utf8.ValidString(password):
		return errs.E(errs.Invalid, "password must be valid UTF-8")
	case utf8.RuneCountInString(password) < MinPasswordRunes:
		return errs.E(errs.Invalid, "password must have at least %d characters", MinPasswordRunes)
	case len(password) > MaxPasswordBytes:
		return errs.E(errs.Invalid, "password must be at most %d bytes", MaxPasswordBytes)
	}
	lower := strings.ToLower(password)
	list := commonPasswords()
	if paddedWord(lower, list.longest, func(w string) bool { return list.has(w) || list.has(unleet(w)) }) {
		return errs.E(errs.Invalid, "password is too common; a few unrelated words make a good one")
	}
	if repeated(lower) || sequential(lower) {
		return errs.E(errs.Invalid, "password is a repeated pattern or a run of consecutive characters")
	}
	if containsWord(lower, serviceName) {
		return errs.E(errs.Invalid, "password must not contain the service name")
	}
	for _, name := range localNames(emailLocalPart(email)) {
		if utf8.RuneCountInString(name) >= 4 && containsWord(lower, name) ||
			paddedWord(lower, len(name), func(w string) bool { return w == name || unleet(w) == name }) {
			return errs.E(errs.Invalid, "password must not contain the e-mail address's name")
		}
	}
	return nil
}

// wordList is the embedded list of common passwords.
type wordList struct {
	words   map[string]struct{}
	longest int // bytes
}

func (l wordList) has(w string) bool {
	_, ok := l.words[w]
	return ok
}

var commonPasswords = sync.OnceValue(func() wordList {
	l := wordList{words: make(map[string]struct{}, 512)}
	for line := range strings.SplitSeq(commonPasswordsText, "\n") {
		line = strings.ToLower(strings.TrimSpace(line))
		if line != "" && !strings.HasPrefix(line, "#") {
			l.words[line] = struct{}{}
			l.longest = max(l.longest, len(line))
		}
	}
	return l
})

// paddedWord reports whether match accepts s, or s without a padding of
// non-letters (digits, symbols, spaces) at its start or end, among the readings no
// longer than maxLen bytes.
func paddedWord(s string, maxLen int, match func(string) bool) bool {
	starts := []int{0}
	for i, r := range s {
		if unicode.IsLetter(r) {
			break
		}
		starts = append(starts, i+utf8.RuneLen(r))
	}
	ends := []int{len(s)}
	for j := len(s); j > 0; {
		r, size := utf8.DecodeLastRuneInString(s[:j])
		if unicode.IsLetter(r) {
			break
		}
		j -= size
		ends = append(ends, j)
	}
	for _, i := range starts {
		for _, j := range ends {
			if j > i && j-i <= maxLen && match(s[i:j]) {
				return true
			}
		}
	}
	return false
}

// containsWord reports whether s holds word, as typed or with substitutions undone.
func containsWord(s, word string) bool {
	return strings.Contains(s, word) || strings.Contains(unleet(s), word)
}

// emailLocalPart returns the lower-cased part before the last "@", or "".
func emailLocalPart(email string) string {
	i := strings.LastIndexByte(email, '@')
	if i <= 0 {
		return ""
	}
	return strings.ToLower(strings.TrimSpace(email[:i]))
}

// localNames returns the local part and, for "name+tag", the name alone.
func localNames(local string) []string {
	if local == "" {
		return nil
	}
	if base, _, found := strings.Cut(local, "+"); found && base != "" {
		return []string{local, base}
	}
	return []string{local}
}

// unleet undoes the substitutions people make to pass composition rules.
var unleet = strings.NewReplacer("@", "a", "4", "a", "0", "o", "1", "i", "!", "i", "3", "e", "$", "s", "5", "s", "7", "t").Replace

// repeated reports whether s is a unit shorter than MinPasswordRunes repeated.
func repeated(s string) bool {
	r := []rune(s)
	for unit := 1; unit < MinPasswordRunes && unit <= len(r)/2; unit++ {
		if len(r)%unit != 0 {
			continue
		}
		same := true
		for i := unit; i < len(r) && same; i++ {
			same = r[i] == r[i-unit]
		}
		if same {
			return true
		}
	}
	return false
}

// sequential reports whether every character is one more, or every one less, than
// the one before it.
func sequential(s string) bool {
	r := []rune(s)
	up, down := true, true
	for i := 1; i < len(r); i++ {
		up = up && r[i] == r[i-1]+1
		down = down && r[i] == r[i-1]-1
	}
	return len(r) > 1 && (up || down)
}
