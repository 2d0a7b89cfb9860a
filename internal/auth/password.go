package auth

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/crypto/argon2"
)

// Params are the argon2id parameters of new password hashes. Each stored hash carries
// its own parameters (PHC string format), so changing Params never locks anyone out:
// a hash made with other parameters is rehashed at the user's next login.
type Params struct {
	Memory  uint32 // KiB
	Time    uint32 // passes over the memory
	Threads uint8  // lanes
	KeyLen  uint32 // bytes of derived key
	SaltLen uint32 // bytes of random salt
}

// DefaultParams returns OWASP's argon2id recommendation (19 MiB, 2 passes, 1 lane),
// a 32-byte key and a 16-byte salt (docs/design.md §3.1, docs/security.md item 12).
func DefaultParams() Params {
	return Params{Memory: 19 * 1024, Time: 2, Threads: 1, KeyLen: 32, SaltLen: 16}
}

// Bounds on parameters, both for Params a caller configures and for those read back
// from a stored hash: a corrupted row must not make a login allocate gigabytes.
const (
	minSaltLen = 16
	minKeyLen  = 16
	maxKeyLen  = 1024
	maxMemory  = 4 << 20 // KiB: 4 GiB
	maxTime    = 1000
)

// Validate reports whether p can be used for new hashes.
func (p Params) Validate() error {
	switch {
	case p.Threads < 1:
		return errors.New("argon2 threads must be at least 1")
	case p.Time < 1 || p.Time > maxTime:
		return fmt.Errorf("argon2 time must be in 1..%d", maxTime)
	case p.Memory < 8*uint32(p.Threads) || p.Memory > maxMemory:
		return fmt.Errorf("argon2 memory must be in %d..%d KiB", 8*uint32(p.Threads), maxMemory)
	case p.KeyLen < minKeyLen || p.KeyLen > maxKeyLen:
		return fmt.Errorf("argon2 key length must be in %d..%d bytes", minKeyLen, maxKeyLen)
	case p.SaltLen < minSaltLen || p.SaltLen > maxKeyLen:
		return fmt.Errorf("argon2 salt length must be in %d..%d bytes", minSaltLen, maxKeyLen)
	}
	return nil
}

// kdf derives a key; the Service holds one (Config.Hasher) so tests can count
// concurrent hashes.
type kdf func(password, salt []byte, p Params) []byte

// Argon2ID derives p.KeyLen bytes from password and salt with argon2id and p: the
// one key derivation of vmgate's password hashes.
func Argon2ID(password, salt []byte, p Params) []byte {
	return argon2.IDKey(password, salt, p.Time, p.Memory, p.Threads, p.KeyLen)
}

// b64 is the PHC string format's base64: standard alphabet, no padding.
var b64 = base64.RawStdEncoding.Strict()

// HashPassword hashes password with argon2id, a fresh random salt and p, and returns
// it in PHC string format: $argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>.
func HashPassword(password string, p Params) (string, error) {
	return hashWith(Argon2ID, password, p)
}

func hashWith(derive kdf, password string, p Params) (string, error) {
	if err := p.Validate(); err != nil {
		return "", err
	}
	salt := make([]byte, p.SaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("read salt: %w", err)
	}
	key := derive([]byte(password), salt, p)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, p.Memory, p.Time, p.Threads, b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

// VerifyPassword reports whether password matches the PHC-encoded argon2id hash, in
// constant time with respect to the derived key. needsRehash is true when the hash
// was made with parameters other than current (its memory, time, threads, key or salt
// length), so the caller should store a new hash while it holds the clear password.
// A malformed hash is an error, never a match.
func VerifyPassword(encoded, password string, current Params) (ok, needsRehash bool, err error) {
	return verifyWith(Argon2ID, encoded, password, current)
}

func verifyWith(derive kdf, encoded, password string, current Params) (ok, needsRehash bool, err error) {
	p, salt, want, err := decodeHash(encoded)
	if err != nil {
		return false, false, err
	}
	got := derive([]byte(password), salt, p)
	ok = subtle.ConstantTimeCompare(got, want) == 1
	needsRehash = p.Memory != current.Memory || p.Time != current.Time || p.Threads != current.Threads ||
		p.KeyLen != current.KeyLen || uint32(len(salt)) != current.SaltLen
	return ok, needsRehash, nil
}

// decodeHash parses $argon2id$v=19$m=M,t=T,p=P$salt$key strictly: fields in that
// order, decimal numbers without signs, unpadded standard base64.
func decodeHash(encoded string) (p Params, salt, key []byte, err error) {
	f := strings.Split(encoded, "$")
	if len(f) != 6 || f[0] != "" || f[1] != "argon2id" {
		return p, nil, nil, errors.New("password hash: not an argon2id PHC string")
	}
	if f[2] != "v="+strconv.Itoa(argon2.Version) {
		return p, nil, nil, fmt.Errorf("password hash: unsupported version %q", f[2])
	}
	nums := strings.Split(f[3], ",")
	if len(nums) != 3 {
		return p, nil, nil, errors.New("password hash: want m,t,p parameters")
	}
	var v [3]uint64
	for i, name := range []string{"m=", "t=", "p="} {
		s, found := strings.CutPrefix(nums[i], name)
		if !found || s == "" || s[0] == '+' {
			return p, nil, nil, fmt.Errorf("password hash: bad parameter %q", nums[i])
		}
		if v[i], err = strconv.ParseUint(s, 10, 32); err != nil {
			return p, nil, nil, fmt.Errorf("password hash: bad parameter %q", nums[i])
		}
	}
	if v[2] > 255 {
		return p, nil, nil, errors.New("password hash: too many threads")
	}
	if salt, err = b64.DecodeString(f[4]); err != nil {
		return p, nil, nil, fmt.Errorf("password hash: salt: %w", err)
	}
	if key, err = b64.DecodeString(f[5]); err != nil {
		return p, nil, nil, fmt.Errorf("password hash: key: %w", err)
	}
	p = Params{Memory: uint32(v[0]), Time: uint32(v[1]), Threads: uint8(v[2]), KeyLen: uint32(len(key)), SaltLen: uint32(len(salt))}
	// Stored hashes may predate today's minimums, but never below what argon2 needs
	// nor above what a login may spend.
	if p.Threads < 1 || p.Time < 1 || p.Time > maxTime || p.Memory < 8*uint32(p.Threads) || p.Memory > maxMemory ||
		len(salt) < 8 || len(salt) > maxKeyLen || len(key) < minKeyLen || len(key) > maxKeyLen {
		return p, nil, nil, errors.New("password hash: parameters out of range")
	}
	return p, salt, key, nil
}
