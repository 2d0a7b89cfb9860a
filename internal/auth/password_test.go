package auth

import (
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/vmgate/vmgate/internal/errs"
)

// docs/security.md item 12: argon2id with the parameters stored in the hash, 16-byte random
// salt, PHC format.
func TestHashPasswordFormat(t *testing.T) {
	t.Parallel()
	h, err := HashPassword(alicePassword, DefaultParams())
	if err != nil {
		t.Fatal(err)
	}
	// 16-byte salt: 22 base64 characters; 32-byte key: 43.
	if !regexp.MustCompile(`^\$argon2id\$v=19\$m=19456,t=2,p=1\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}$`).MatchString(h) {
		t.Fatalf("hash %q", h)
	}
	ok, rehash, err := VerifyPassword(h, alicePassword, DefaultParams())
	if !ok || rehash || err != nil {
		t.Fatalf("verify: ok=%v rehash=%v err=%v", ok, rehash, err)
	}
	ok, _, err = VerifyPassword(h, alicePassword+" ", DefaultParams())
	if ok || err != nil {
		t.Fatalf("wrong password: ok=%v err=%v", ok, err)
	}
}

func TestHashPasswordSaltIsRandom(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 20 {
		h, err := HashPassword(alicePassword, cheapParams)
		if err != nil {
			t.Fatal(err)
		}
		_, salt, _, err := decodeHash(h)
		if err != nil || len(salt) != 16 {
			t.Fatalf("salt %x: %v", salt, err)
		}
		if seen[string(salt)] {
			t.Fatal("salt repeated")
		}
		seen[string(salt)] = true
	}
}

func TestVerifyPasswordNeedsRehash(t *testing.T) {
	t.Parallel()
	h, err := HashPassword(alicePassword, cheapParams)
	if err != nil {
		t.Fatal(err)
	}
	change := map[string]func(*Params){
		"memory":  func(p *Params) { p.Memory *= 2 },
		"time":    func(p *Params) { p.Time++ },
		"threads": func(p *Params) { p.Threads++; p.Memory = 8 * 2 * 8 },
		"key":     func(p *Params) { p.KeyLen = 64 },
		"salt":    func(p *Params) { p.SaltLen = 32 },
	}
	for name, edit := range change {
		p := cheapParams
		edit(&p)
		ok, rehash, err := VerifyPassword(h, alicePassword, p)
		if !ok || !rehash || err != nil {
			t.Errorf("%s changed: ok=%v rehash=%v err=%v", name, ok, rehash, err)
		}
	}
}

// A malformed or hostile stored hash is an error, never a match, and never makes
// argon2 run with absurd parameters.
func TestVerifyPasswordMalformed(t *testing.T) {
	t.Parallel()
	good, err := HashPassword(alicePassword, cheapParams)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Split(good, "$")
	salt, key := f[4], f[5]
	cases := map[string]string{
		"empty":            "",
		"argon2i":          "$argon2i$v=19$m=64,t=1,p=1$" + salt + "$" + key,
		"bcrypt":           "$2a$10$abcdefghijklmnopqrstuuabcdefghijklmnopqrstuvwxyz01234",
		"version 16":       "$argon2id$v=16$m=64,t=1,p=1$" + salt + "$" + key,
		"no version":       "$argon2id$m=64,t=1,p=1$" + salt + "$" + key,
		"params reordered": "$argon2id$v=19$t=1,m=64,p=1$" + salt + "$" + key,
		"plus sign":        "$argon2id$v=19$m=+64,t=1,p=1$" + salt + "$" + key,
		"two params":       "$argon2id$v=19$m=64,t=1$" + salt + "$" + key,
		"threads 0":        "$argon2id$v=19$m=64,t=0,p=0$" + salt + "$" + key,
		"threads 256":      "$argon2id$v=19$m=64,t=1,p=256$" + salt + "$" + key,
		"memory huge":      "$argon2id$v=19$m=4294967295,t=1,p=1$" + salt + "$" + key,
		"time huge":        "$argon2id$v=19$m=64,t=4000000000,p=1$" + salt + "$" + key,
		"memory < 8p":      "$argon2id$v=19$m=7,t=1,p=1$" + salt + "$" + key,
		"padded salt":      "$argon2id$v=19$m=64,t=1,p=1$" + salt + "==$" + key,
		"url alphabet":     "$argon2id$v=19$m=64,t=1,p=1$" + strings.NewReplacer("+", "-", "/", "_").Replace(salt+"-_") + "$" + key,
		"short salt":       "$argon2id$v=19$m=64,t=1,p=1$AAAA$" + key,
		"short key":        "$argon2id$v=19$m=64,t=1,p=1$" + salt + "$AAAA",
		"extra field":      good + "$x",
	}
	for name, h := range cases {
		ok, _, err := VerifyPassword(h, alicePassword, cheapParams)
		if ok || err == nil {
			t.Errorf("%s: ok=%v err=%v", name, ok, err)
		}
	}
}

func TestParamsValidate(t *testing.T) {
	t.Parallel()
	if err := DefaultParams().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []Params{
		{},
		{Memory: 64, Time: 1, Threads: 1, KeyLen: 32, SaltLen: 8}, // salt under 16 bytes
		{Memory: 64, Time: 0, Threads: 1, KeyLen: 32, SaltLen: 16},
		{Memory: 4, Time: 1, Threads: 1, KeyLen: 32, SaltLen: 16},
		{Memory: 64, Time: 1, Threads: 1, KeyLen: 8, SaltLen: 16},
	}
	for _, p := range bad {
		if p.Validate() == nil {
			t.Errorf("%+v accepted", p)
		}
		if _, err := HashPassword("x", p); err == nil {
			t.Errorf("HashPassword accepted %+v", p)
		}
	}
}

// docs/security.md item 13.
func TestCheckPasswordPolicy(t *testing.T) {
	t.Parallel()
	cases := []struct {
		email, password string
		ok              bool
	}{
		{"alice@example.com", "correct horse battery", true},
		{"alice@example.com", "Tr0ub4dor&3xyz", true},
		{"alice@example.com", "zwölf Zeichen", true},            // 13 runes
		{"alice@example.com", "日本語のパスワードは十二文字", true},           // 14 runes, no ASCII at all
		{"alice@example.com", "aaaaaaaaaaab", true},             // not a pure repetition
		{"alice@example.com", "839204718263", true},             // random digits: no listed run of 6
		{"alice@example.com", "purple elephant umbrella", true}, // words, unlisted together
		{"alice@example.com", "short", false},                   // under 12
		{"alice@example.com", "elevenchars", false},             // 11
		{"alice@example.com", "日本語のパスワード", false},               // 9 runes, 27 bytes
		{"alice@example.com", strings.Repeat("x", 1025), false}, // over 1024 bytes
		{"alice@example.com", strings.Repeat("xy z", 256), false},
		{"alice@example.com", "\xff\xfe invalid utf8", false},
		{"alice@example.com", "password1234", false},      // common
		{"alice@example.com", "PASSWORD1234", false},      // common, any case
		{"alice@example.com", "P@ssw0rd1234!", false},     // common core after substitutions
		{"alice@example.com", "@dmin!2345678", false},     // a substituted symbol at the start
		{"alice@example.com", "Summer2024!!!", false},     // common word padded
		{"alice@example.com", "2024-Summer-!!", false},    // padded at both ends
		{"alice@example.com", "1qaz2wsx3edc", false},      // keyboard walk
		{"alice@example.com", "qwertyuiop12", false},      // keyboard walk padded
		{"alice@example.com", "123456789012", false},      // digits
		{"alice@example.com", "99-123456-!!", false},      // a listed run of digits, padded
		{"alice@example.com", "iloveyou4ever", true},      // listed word with more than padding
		{"alice@example.com", "zzzzzzzzzzzz", false},      // one character
		{"alice@example.com", "abcabcabcabc", false},      // a short pattern repeated
		{"alice@example.com", "abcdefghijklmn", false},    // a run
		{"alice@example.com", "zyxwvutsrqpo", false},      // a run down
		{"alice@example.com", "my vmgate login", false},   // the service name
		{"alice@example.com", "my VMG4TE login", false},   // the service name, substituted
		{"alice@example.com", "alice@example.com", false}, // the e-mail
		{"alice@example.com", "ALICE is my name!", false}, // contains the local part
		{"alice@example.com", "@l1ce-1234567", false},     // the local part with substitutions and padding
		{"john.smith@example.com", "john.smith2026", false},
		{"john.smith@example.com", "John Smith 2026!", false}, // the local part normalised
		{"john+vmgate@example.com", "johnjohnjohnny x", false},
		{"bo@example.com", "bo1234567890", false},       // short local part plus digits
		{"bo@example.com", "a boat on the river", true}, // a short local part may occur by chance
		{"", "correct horse battery", true},

		// Issue 9: a well-known passphrase, however it is spaced, cased or padded.
		{"alice@example.com", "correct horse battery staple", false},
		{"alice@example.com", "correcthorsebatterystaple", false},
		{"alice@example.com", "Correct-Horse-Battery-Staple-42", false},
		{"alice@example.com", "CorrectHorseBatteryStaple!", false},
		{"alice@example.com", "the quick brown fox jumps over the lazy dog", false},
	}
	for _, c := range cases {
		err := CheckPasswordPolicy(c.email, c.password)
		if c.ok && err != nil {
			t.Errorf("%q for %q refused: %v", c.password, c.email, err)
		}
		if !c.ok {
			if err == nil {
				t.Errorf("%q for %q accepted", c.password, c.email)
			} else if errs.KindOf(err) != errs.Invalid {
				t.Errorf("%q: kind %v", c.password, errs.KindOf(err))
			} else if !strings.HasSuffix(err.Error(), PasswordRules) {
				t.Errorf("%q: the message does not state the rules: %v", c.password, err)
			}
		}
	}
}

// The rules are stated in every refusal, and say what the README says.
func TestPasswordRulesStated(t *testing.T) {
	t.Parallel()
	for _, want := range []string{"12 characters", "1024 bytes", "common password", "e-mail address's name"} {
		if !strings.Contains(PasswordRules, want) {
			t.Errorf("PasswordRules %q lacks %q", PasswordRules, want)
		}
	}
	err := CheckPasswordPolicy("alice@example.com", "short")
	if err == nil || !strings.Contains(err.Error(), "too short (5 characters); a password needs at least 12 characters") {
		t.Fatalf("refusal %v", err)
	}
}

// docs/security.md item 13, issue 9 (docs/history.md): the blocklist holds SecLists' 10 000 most common
// passwords, and every entry of both lists is refused padded with digits to the
// minimum length, and (but for runs without letters shorter than minRun) padded
// with digits and symbols at both ends.
func TestCommonPasswordsListed(t *testing.T) {
	t.Parallel()
	entries := func(text string) []string {
		var out []string
		for line := range strings.SplitSeq(text, "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				out = append(out, line)
			}
		}
		return out
	}
	top, additions := entries(seclistsTop10000), entries(vmgateAdditions)
	if len(top) != 10_000 {
		t.Fatalf("%d SecLists entries, want 10 000", len(top))
	}
	// Cases and spellings collapse ("Password", "password"), and entries without
	// letters are kept apart: about 8 000 forms with letters remain.
	if n := len(blocklist().words); n < 8_000 {
		t.Fatalf("only %d normalised forms with letters", n)
	}
	for _, w := range append(top, additions...) {
		padded := w
		for utf8.RuneCountInString(padded) < MinPasswordRunes {
			padded += "1"
		}
		both := "19" + w + "!!"
		for utf8.RuneCountInString(both) < MinPasswordRunes {
			both = "7" + both + "!"
		}
		tries := []string{padded, both}
		if !strings.ContainsFunc(w, unicode.IsLetter) && utf8.RuneCountInString(w) < minRun {
			tries = tries[:1] // short runs without letters count only where they stand alone (see minRun)
		}
		for _, pw := range tries {
			if CheckPasswordPolicy("someone@example.com", pw) == nil {
				t.Errorf("%q (listed %q) accepted", pw, w)
			}
		}
	}
}
