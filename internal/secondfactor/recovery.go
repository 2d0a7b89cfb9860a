package secondfactor

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"strings"
)

// recoveryCodeCount is how many recovery codes a user gets: each works once.
const recoveryCodeCount = 10

// recoveryEncoding writes a code's 80 random bits as 16 letters and digits.
var recoveryEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// newRecoveryCodes returns recoveryCodeCount fresh codes, as shown to the user
// (xxxx-xxxx-xxxx-xxxx), and their hashes, as stored. 80 random bits each make a
// plain SHA-256 enough: no list of guesses reaches them, so there is nothing for a
// slow hash to slow down (docs/decisions/0112).
func newRecoveryCodes() (codes []string, hashes [][]byte) {
	for range recoveryCodeCount {
		b := make([]byte, 10)
		_, _ = rand.Read(b)
		s := strings.ToLower(recoveryEncoding.EncodeToString(b))
		code := s[0:4] + "-" + s[4:8] + "-" + s[8:12] + "-" + s[12:16]
		codes = append(codes, code)
		hashes = append(hashes, hashRecoveryCode(code))
	}
	return codes, hashes
}

// hashRecoveryCode is the stored form of a code as typed: case, spaces and dashes
// do not matter. Anything that is not 16 base32 characters hashes to what no
// code hashes to.
func hashRecoveryCode(code string) []byte {
	c := strings.ToUpper(cleanCode(code))
	if len(c) != 16 {
		return nil
	}
	if _, err := recoveryEncoding.DecodeString(c); err != nil {
		return nil
	}
	sum := sha256.Sum256([]byte("vmgate recovery code\x00" + c))
	return sum[:]
}
