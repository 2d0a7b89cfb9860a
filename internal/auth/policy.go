package auth

import (
	_ "embed"
	"fmt"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/vmgate/vmgate/internal/errs"
)

// Password length limits (docs/security.md item 13, NIST SP 800-63B §3.1.1.2). The minimum
// counts characters (runes) so that non-Latin passwords are not penalised; the
// maximum counts bytes because that is what the hash has to read.
const (
	MinPasswordRunes = 12
	MaxPasswordBytes = 1024
)

// serviceName is a context-specific word (NIST SP 800-63B) no password may contain.
const serviceName = "vmgate"

// PasswordRules is the whole policy in one sentence; every refusal ends with it,
// so a person learns all the limits at the first try.
const PasswordRules = "a password needs at least 12 characters and at most 1024 bytes, " +
	"and must not be a common password nor contain the e-mail address's name or \"vmgate\""

// The blocklist (see blocklist/README.md for the sources and licenses).
var (
	//go:embed blocklist/seclists-10-million-password-list-top-10000.txt
	seclistsTop10000 string
	//go:embed blocklist/vmgate-additions.txt
	vmgateAdditions string
)

// CheckPasswordPolicy returns an *errs.Error of kind Invalid, with a message a person
// can act on, when password may not be used by the account with this e-mail. There
// are no composition rules (NIST SP 800-63B); a password is refused when it is
//
//   - not valid UTF-8, shorter than 12 characters or longer than 1024 bytes;
//   - common: its normalised form is on the blocklist (SecLists' 10 000 most common
//     passwords and vmgate's additions, well-known passphrases among them).
//     Normalised means case folded, with spaces and punctuation removed and digits
//     at both ends dropped, also with the usual substitutions undone (@→a, 0→o,
//     ...): so "correct horse battery staple", "CorrectHorseBatteryStaple",
//     "Summer2024!!" and "P@ssw0rd1234" are refused like the listed
//     "correcthorsebatterystaple", "summer" and "password". A password without
//     letters is refused when it holds a listed entry without letters of 6 or more
//     characters, as listed ("!@#$%^&*") or as digits ("123456");
//   - one character or a short pattern (under 12 characters) repeated, or a run of
//     consecutive characters ("abcdefghijkl");
//   - containing, in normalised form, the service's name "vmgate" or the e-mail's
//     local part (the part before "@", and for "name+tag" the name too). A local
//     part shorter than 4 characters would be found in many good passwords by
//     chance, so for those only a password that normalises to it is refused.
//
// Every message ends with PasswordRules.
func CheckPasswordPolicy(email, password string) error {
	refuse := func(format string, args ...any) error {
		return errs.E(errs.Invalid, "%s; %s", fmt.Sprintf(format, args...), PasswordRules)
	}
	switch n := utf8.RuneCountInString(password); {
	case !utf8.ValidString(password):
		return refuse("password is not valid UTF-8")
	case n < MinPasswordRunes:
		return refuse("password is too short (%d characters)", n)
	case len(password) > MaxPasswordBytes:
		return refuse("password is too long (%d bytes)", len(password))
	}
	r := readPassword(password)
	if blocklist().refuses(r) {
		return refuse("password is too common: attackers try it first (a few unrelated words make a good one)")
	}
	lower := strings.ToLower(password)
	if repeated(lower) || sequential(lower) {
		return refuse("password is a repeated pattern or a run of consecutive characters")
	}
	if r.contains(serviceName) {
		return refuse("password contains the service's name")
	}
	for _, name := range localNames(emailLocalPart(email)) {
		name = normalise(name)
		if utf8.RuneCountInString(name) >= 4 && r.contains(name) || name != "" && r.is(name) {
			return refuse("password contains the e-mail address's name")
		}
	}
	return nil
}

// normalise case folds s and keeps only its letters and digits: spaces and
// punctuation go.
func normalise(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			return unicode.ToLower(r)
		}
		return -1
	}, s)
}

// trimDigits drops the digits at both ends of s.
func trimDigits(s string) string { return strings.TrimFunc(s, unicode.IsDigit) }

func hasLetter(s string) bool { return strings.IndexFunc(s, unicode.IsLetter) >= 0 }

// readings are the normalised forms of one password that the checks compare.
type readings struct {
	forms  []string // with letters: the whole, the core without end digits, the core with substitutions undone
	digits string   // without letters: its digits
	raw    string   // without letters: as typed, without spaces
}

// readPassword normalises a password as typed and with symbol substitutions
// undone, since normalising drops symbols: all of them (@, !, $), or only @ and $
// (a "!" is padding more often than an "i").
func readPassword(pw string) readings {
	var r readings
	lower := strings.ToLower(pw)
	if !hasLetter(lower) {
		r.digits = normalise(lower)
		r.raw = strings.Join(strings.Fields(lower), "")
		return r
	}
	for _, v := range []string{lower, unleetSymbols(lower), unleetAtDollar(lower)} {
		whole := normalise(v)
		core := trimDigits(whole)
		r.forms = append(r.forms, whole, core, unleet(core))
	}
	return r
}

// is reports whether a reading is exactly word.
func (r readings) is(word string) bool {
	for _, f := range r.forms {
		if f == word {
			return true
		}
	}
	return r.digits == word
}

// contains reports whether a reading holds word.
func (r readings) contains(word string) bool {
	for _, f := range r.forms {
		if strings.Contains(f, word) {
			return true
		}
	}
	return strings.Contains(r.digits, word)
}

// minRun is the shortest listed entry without letters that refuses a password
// without letters wherever it occurs in it: shorter runs (years, PINs) turn up in
// random digits by chance.
const minRun = 6

// wordList is the blocklist in normalised form.
type wordList struct {
	words  map[string]struct{} // each entry's whole form and its core
	digits map[string]struct{} // the entries without letters, normalised: minRun digits or more
	raw    map[string]struct{} // the entries without letters, as listed: minRun bytes or more
	maxRun int                 // the longest of those
}

func (l wordList) refuses(r readings) bool {
	for _, f := range r.forms {
		if _, ok := l.words[f]; ok {
			return true
		}
	}
	return l.holdsRun(l.digits, r.digits) || l.holdsRun(l.raw, r.raw)
}

// holdsRun reports whether s holds an entry of runs.
func (l wordList) holdsRun(runs map[string]struct{}, s string) bool {
	for i := range len(s) {
		for j := i + minRun; j <= min(len(s), i+l.maxRun); j++ {
			if _, ok := runs[s[i:j]]; ok {
				return true
			}
		}
	}
	return false
}

var blocklist = sync.OnceValue(func() wordList {
	l := wordList{words: make(map[string]struct{}, 16_000), digits: make(map[string]struct{}, 2_000),
		raw: make(map[string]struct{}, 2_000)}
	run := func(m map[string]struct{}, s string) {
		if len(s) >= minRun {
			m[s] = struct{}{}
			l.maxRun = max(l.maxRun, len(s))
		}
	}
	for _, text := range []string{seclistsTop10000, vmgateAdditions} {
		for line := range strings.SplitSeq(text, "\n") {
			line = strings.ToLower(strings.TrimSpace(line))
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			whole := normalise(line)
			if hasLetter(whole) {
				l.words[whole] = struct{}{}
				l.words[trimDigits(whole)] = struct{}{}
				continue
			}
			run(l.digits, whole)
			run(l.raw, strings.Join(strings.Fields(line), ""))
		}
	}
	return l
})

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

// unleet undoes the digit substitutions people make to pass composition rules,
// unleetSymbols the symbol ones (which normalising would drop).
var (
	unleet         = strings.NewReplacer("4", "a", "0", "o", "1", "i", "3", "e", "5", "s", "7", "t").Replace
	unleetSymbols  = strings.NewReplacer("@", "a", "!", "i", "$", "s").Replace
	unleetAtDollar = strings.NewReplacer("@", "a", "$", "s").Replace
)

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
