package secondfactor

import (
	"strings"
	"testing"
	"time"
)

// TestTOTPVectors checks hotp against RFC 6238 Appendix B's SHA-1 vectors (8
// digits) and the 6-digit codes apps show, which are their last 6 digits.
func TestTOTPVectors(t *testing.T) {
	t.Parallel()
	secret := []byte("12345678901234567890")
	for _, v := range []struct {
		unix int64
		code string
	}{
		{59, "94287082"}, {1111111109, "07081804"}, {1111111111, "14050471"},
		{1234567890, "89005924"}, {2000000000, "69279037"}, {20000000000, "65353130"},
	} {
		step := totpStep(time.Unix(v.unix, 0))
		if got := hotp(secret, step, 8); got != v.code {
			t.Errorf("T=%d: got %s, want %s", v.unix, got, v.code)
		}
		if got := hotp(secret, step, 6); got != v.code[2:] {
			t.Errorf("T=%d (6 digits): got %s, want %s", v.unix, got, v.code[2:])
		}
	}
}

// TestTOTPDrift: a code of the step before or after now matches (and says which
// step it is), two steps away does not; nor does a code of the wrong length.
func TestTOTPDrift(t *testing.T) {
	t.Parallel()
	secret := []byte("12345678901234567890")
	now := time.Unix(1234567890, 0)
	cur := totpStep(now)
	for d, want := range map[int64]bool{-2: false, -1: true, 0: true, 1: true, 2: false} {
		step, ok := totpMatch(secret, hotp(secret, cur+d, 6), now)
		if ok != want || (ok && step != cur+d) {
			t.Errorf("drift %d: got step %d ok %v", d, step-cur, ok)
		}
	}
	for _, bad := range []string{"", "12345", "1234567", "abcdef"} {
		if _, ok := totpMatch(secret, bad, now); ok {
			t.Errorf("%q matched", bad)
		}
	}
}

func TestOTPAuthURL(t *testing.T) {
	t.Parallel()
	u := otpauthURL("vmgate", "alice@example.com", []byte("12345678901234567890"))
	want := "otpauth://totp/vmgate:alice@example.com?algorithm=SHA1&digits=6&issuer=vmgate&period=30&secret=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"
	if u != want {
		t.Fatalf("got %s\nwant %s", u, want)
	}
}

// TestRecoveryCodes: ten distinct codes, each hashing as typed in any case with
// or without dashes, and nothing else hashing at all.
func TestRecoveryCodes(t *testing.T) {
	t.Parallel()
	codes, hashes := newRecoveryCodes()
	if len(codes) != 10 || len(hashes) != 10 {
		t.Fatalf("%d codes, %d hashes", len(codes), len(hashes))
	}
	seen := map[string]bool{}
	for i, c := range codes {
		if seen[c] || len(c) != 19 {
			t.Fatalf("code %q repeated or misshapen", c)
		}
		seen[c] = true
		for _, typed := range []string{c, strings.ToUpper(c), strings.ReplaceAll(c, "-", ""), " " + c + " "} {
			if string(hashRecoveryCode(typed)) != string(hashes[i]) {
				t.Errorf("%q does not hash as %q", typed, c)
			}
		}
	}
	for _, bad := range []string{"", "short", "0000-0000-0000-0000", codes[0] + "a"} {
		if hashRecoveryCode(bad) != nil {
			t.Errorf("%q hashed", bad)
		}
	}
}
