package secondfactor

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/subtle"
	"encoding/base32"
	"encoding/binary"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// TOTP is RFC 6238 as authenticator apps implement it: HMAC-SHA1, 30-second
// steps from the Unix epoch, 6 digits. A short implementation of our own, tested
// against the RFC's vectors (totp_test.go), rather than a dependency.
const (
	totpPeriod = 30
	totpDigits = 6
	// totpDrift is how many steps either side of now a code may be from: one,
	// for a phone's clock a little off and a code typed as it changed.
	totpDrift = 1
	// totpSecretBytes is the shared secret's size: 160 bits, RFC 4226's
	// recommendation for HMAC-SHA1.
	totpSecretBytes = 20
)

// totpEncoding is the base32 of secrets as authenticator apps read them.
var totpEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// newTOTPSecret returns a random shared secret.
func newTOTPSecret() []byte {
	b := make([]byte, totpSecretBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand, Go 1.24+)
	return b
}

// totpStep is the time step t falls in.
func totpStep(t time.Time) int64 { return t.Unix() / totpPeriod }

// hotp is RFC 4226's HOTP value of secret at counter, digits long.
func hotp(secret []byte, counter int64, digits int) string {
	var msg [8]byte
	binary.BigEndian.PutUint64(msg[:], uint64(counter))
	mac := hmac.New(sha1.New, secret)
	mac.Write(msg[:])
	sum := mac.Sum(nil)
	off := sum[len(sum)-1] & 0x0f
	bin := binary.BigEndian.Uint32(sum[off:off+4]) & 0x7fffffff
	mod := uint32(1)
	for range digits {
		mod *= 10
	}
	return fmt.Sprintf("%0*d", digits, bin%mod)
}

// totpMatch returns the step within totpDrift of now whose code is code, and
// whether there is one. Every candidate is compared, in constant time, so the
// time taken tells nothing of which step matched.
func totpMatch(secret []byte, code string, now time.Time) (int64, bool) {
	if len(code) != totpDigits {
		return 0, false
	}
	cur := totpStep(now)
	var found int64
	ok := 0
	for d := int64(-totpDrift); d <= totpDrift; d++ {
		step := cur + d
		if subtle.ConstantTimeCompare([]byte(hotp(secret, step, totpDigits)), []byte(code)) == 1 {
			found, ok = step, 1
		}
	}
	return found, ok == 1
}

// cleanCode is a code as typed with spaces and dashes dropped.
func cleanCode(code string) string {
	return strings.Map(func(r rune) rune {
		if r == ' ' || r == '-' {
			return -1
		}
		return r
	}, code)
}

// otpauthURL is the Key Uri Format authenticator apps import (a QR code of it,
// or the URL pasted): issuer and account name the entry.
func otpauthURL(issuer, account string, secret []byte) string {
	label := url.PathEscape(issuer) + ":" + url.PathEscape(account)
	q := url.Values{}
	q.Set("secret", totpEncoding.EncodeToString(secret))
	q.Set("issuer", issuer)
	q.Set("algorithm", "SHA1")
	q.Set("digits", "6")
	q.Set("period", "30")
	return "otpauth://totp/" + label + "?" + q.Encode()
}

// TOTPCode is the code an authenticator app shows at at for a base32 secret as
// BeginTOTP gives it: for tests and scripts that stand in for the app.
func TOTPCode(secret string, at time.Time) (string, error) {
	b, err := totpEncoding.DecodeString(strings.ToUpper(strings.TrimRight(secret, "=")))
	if err != nil {
		return "", fmt.Errorf("TOTP secret: %w", err)
	}
	return hotp(b, totpStep(at), totpDigits), nil
}
