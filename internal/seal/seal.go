// Package seal keeps vmgate's secrets at rest: the key file (one AES-256 key,
// created 0600 on first start) and the Sealer that encrypts with it (AES-256-GCM).
// Everything vmgate must be able to read back but must not store in clear goes
// through it — the PVE clusters' token secrets (internal/fleet), the JWT signing
// keys (internal/auth) and the audit chain's key (internal/store) — so that a copy
// of the database without the key file is worth no cluster and no login, and a
// writer of the database alone cannot rewrite the audit trail (docs/security.md items 23, 25,
// 30).
//
// # Format
//
// A sealed value is
//
//	0x02 ‖ key id (4 bytes) ‖ nonce (12 bytes) ‖ ciphertext ‖ tag (16 bytes)
//
// The key id (KeyID: the first 4 bytes of a SHA-256 over a label and the key) names
// the key that sealed the value, so that during a rotation of the key file
// (`vmgate admin keys rotate-seal`) vmgate knows which key opens what, and a value
// sealed with a key it lacks is reported as such rather than as damage. The
// additional data binds the value to what it is (a purpose label) and to the row
// it belongs to (a token id, a kid): a sealed value copied into another row does
// not open there. The first five bytes are authenticated too.
//
// Values of format 0x01 (the cluster secrets of vmgate before key ids: no key id)
// still open, with whichever key of the Sealer opens them, and are rewritten in the
// current format by the next rotation.
//
// # Keys
//
// A Sealer holds one current key, which seals, and any number of previous keys,
// which only open: a server started with --previous-secret-key-file during a
// rolling rotation opens what either key sealed (docs/deploy.md).
//
// Each seal draws a fresh random 96-bit nonce. With one key per installation and a
// handful of seals per administrative change, the birthday bound of random nonces
// (2^32 seals per key) is nowhere near.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// Format bytes: the first byte of a sealed value.
const (
	formatV1 byte = 1 // nonce ‖ sealed; no key id (cluster secrets before rotation existed)
	formatV2 byte = 2 // key id ‖ nonce ‖ sealed
)

const (
	idSize    = 4
	nonceSize = 12
	tagSize   = 16
	headerV2  = 1 + idSize
)

// ErrBroken is what Open reports for a value it cannot open: the wrong key file, a
// value of another row or purpose, or damage. They look alike by design; KeyIDOf
// tells a value sealed with an unknown key apart when that matters.
var ErrBroken = errors.New("the sealed value does not open with this secret key (wrong --secret-key-file?)")

type key struct {
	id   uint32
	aead cipher.AEAD
}

// Sealer seals with its current key and opens with any of its keys. It is safe for
// concurrent use.
type Sealer struct {
	current *key
	keys    []*key // current first
}

// New returns a Sealer that seals with current and opens with current and
// previous. Every key must be KeySize bytes; two keys with one id are refused.
func New(current []byte, previous ...[]byte) (*Sealer, error) {
	s := &Sealer{}
	for i, raw := range append([][]byte{current}, previous...) {
		if len(raw) != KeySize {
			return nil, fmt.Errorf("the secret key must be %d bytes, not %d", KeySize, len(raw))
		}
		block, err := aes.NewCipher(raw)
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		k := &key{id: keyID(raw), aead: aead}
		for _, o := range s.keys {
			if o.id == k.id {
				return nil, fmt.Errorf("secret key %s is given twice", formatID(k.id))
			}
		}
		if i == 0 {
			s.current = k
		}
		s.keys = append(s.keys, k)
	}
	return s, nil
}

// KeyID returns the id of a key as it appears in the values it seals: 8
// hexadecimal digits. It reveals nothing of the key (a hash, cut short).
func KeyID(raw []byte) string { return formatID(keyID(raw)) }

func keyID(raw []byte) uint32 {
	h := sha256.New()
	h.Write([]byte("vmgate/seal-key-id/v1\x00"))
	h.Write(raw)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

func formatID(id uint32) string {
	var b [idSize]byte
	binary.BigEndian.PutUint32(b[:], id)
	return hex.EncodeToString(b[:])
}

// CurrentID is the id of the key that seals.
func (s *Sealer) CurrentID() string { return formatID(s.current.id) }

// KeyIDOf returns the id of the key that sealed v, or "" when v carries none (the
// first format) or is not a sealed value at all.
func KeyIDOf(v []byte) string {
	if len(v) < headerV2 || v[0] != formatV2 {
		return ""
	}
	return formatID(binary.BigEndian.Uint32(v[1:headerV2]))
}

// Holds reports whether the Sealer has the key whose id is id (KeyIDOf): a value
// sealed with it that does not open was changed, not sealed elsewhere.
func (s *Sealer) Holds(id string) bool {
	for _, k := range s.keys {
		if formatID(k.id) == id {
			return true
		}
	}
	return false
}

// SealedWithCurrent reports whether v is in the current format and sealed with
// the current key: a rotation leaves such values alone.
func (s *Sealer) SealedWithCurrent(v []byte) bool {
	return KeyIDOf(v) == s.CurrentID()
}

// Seal encrypts plaintext for the row and purpose aad names (see the *AAD
// functions) with the current key.
func (s *Sealer) Seal(plaintext, aad []byte) ([]byte, error) {
	out := make([]byte, headerV2+nonceSize, headerV2+nonceSize+len(plaintext)+tagSize)
	out[0] = formatV2
	binary.BigEndian.PutUint32(out[1:headerV2], s.current.id)
	if _, err := rand.Read(out[headerV2:]); err != nil {
		return nil, fmt.Errorf("draw a nonce: %w", err)
	}
	return s.current.aead.Seal(out, out[headerV2:], plaintext, v2AAD(out[:headerV2], aad)), nil
}

// v2AAD authenticates the header with the caller's additional data.
func v2AAD(header, aad []byte) []byte {
	return append(append(make([]byte, 0, len(header)+len(aad)), header...), aad...)
}

// Open reverses Seal with whichever of the Sealer's keys sealed v. It returns
// ErrBroken, wrapped with the key id when v names a key the Sealer lacks.
func (s *Sealer) Open(v, aad []byte) ([]byte, error) {
	switch {
	case len(v) >= headerV2+nonceSize+tagSize && v[0] == formatV2:
		id := binary.BigEndian.Uint32(v[1:headerV2])
		for _, k := range s.keys {
			if k.id != id {
				continue
			}
			plain, err := k.aead.Open(nil, v[headerV2:headerV2+nonceSize], v[headerV2+nonceSize:], v2AAD(v[:headerV2], aad))
			if err != nil {
				return nil, ErrBroken
			}
			return plain, nil
		}
		return nil, fmt.Errorf("%w: it was sealed with key %s, and the key file holds %s", ErrBroken, formatID(id), s.ids())
	case len(v) >= 1+nonceSize+tagSize && v[0] == formatV1:
		for _, k := range s.keys {
			if plain, err := k.aead.Open(nil, v[1:1+nonceSize], v[1+nonceSize:], aad); err == nil {
				return plain, nil
			}
		}
	}
	return nil, ErrBroken
}

func (s *Sealer) ids() string {
	out := ""
	for i, k := range s.keys {
		if i > 0 {
			out += ", "
		}
		out += formatID(k.id)
	}
	return out
}

// The additional data of each kind of sealed value: a purpose label and the row's
// own name. They are here, in one place, because a rotation of the key file
// reopens every kind.

// TokenSecretAAD binds a PVE token secret to its token id (USER@REALM!NAME).
func TokenSecretAAD(tokenID string) []byte {
	return append([]byte("vmgate/pve-token-secret/v1\x00"), tokenID...)
}

// SigningKeyAAD binds a JWT signing key to its kid.
func SigningKeyAAD(kid string) []byte {
	return append([]byte("vmgate/jwt-signing-key/v1\x00"), kid...)
}

// AuditKeyAAD binds the audit chain's key to the first row it chains (keyedFrom,
// in decimal): moving that row in the database, so that rows after it would be
// taken for unkeyed ones, makes the key not open (internal/store, docs/security.md item 30).
func AuditKeyAAD(keyedFrom string) []byte {
	return append([]byte("vmgate/audit-chain-key/v1\x00"), keyedFrom...)
}
