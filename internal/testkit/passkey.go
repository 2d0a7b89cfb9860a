package testkit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
)

// Passkey is a software WebAuthn authenticator for tests of the API, where no
// browser runs (the browser tests use Chromium's virtual authenticator): one
// P-256 credential, "none" attestation, a signature counter that moves by one
// per assertion. Origin is what its client data claims, so a test can play a
// phishing site; Counter can be set back to play a clone.
type Passkey struct {
	Origin  string
	Counter uint32

	key *ecdsa.PrivateKey
	id  []byte
}

// NewPasskey makes an authenticator whose client data names origin.
func NewPasskey(origin string) *Passkey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	return &Passkey{Origin: origin, key: key, id: id}
}

var b64u = base64.RawURLEncoding

// ceremony is the part of a server's options the authenticator reads.
type ceremony struct {
	PublicKey struct {
		Challenge string `json:"challenge"`
		RPID      string `json:"rpId"`
		RP        struct {
			ID string `json:"id"`
		} `json:"rp"`
	} `json:"publicKey"`
}

func (p *Passkey) clientData(typ, challenge string) []byte {
	b, _ := json.Marshal(map[string]any{"type": typ, "challenge": challenge, "origin": p.Origin, "crossOrigin": false})
	return b
}

// Create answers navigator.credentials.create's options (JSON, as the server
// gives them) with the PublicKeyCredential's JSON.
func (p *Passkey) Create(options []byte) ([]byte, error) {
	var c ceremony
	if err := json.Unmarshal(options, &c); err != nil {
		return nil, fmt.Errorf("creation options: %w", err)
	}
	x, y := make([]byte, 32), make([]byte, 32)
	p.key.PublicKey.X.FillBytes(x)
	p.key.PublicKey.Y.FillBytes(y)
	// COSE_Key {1: 2 (EC2), 3: -7 (ES256), -1: 1 (P-256), -2: x, -3: y}
	cose := []byte{0xa5, 0x01, 0x02, 0x03, 0x26, 0x20, 0x01, 0x21, 0x58, 0x20}
	cose = append(cose, x...)
	cose = append(cose, 0x22, 0x58, 0x20)
	cose = append(cose, y...)
	auth := p.authData(c.PublicKey.RP.ID, 0x45) // UP, UV, AT
	auth = append(auth, make([]byte, 16)...)    // AAGUID
	auth = binary.BigEndian.AppendUint16(auth, uint16(len(p.id)))
	auth = append(auth, p.id...)
	auth = append(auth, cose...)
	// {"fmt": "none", "attStmt": {}, "authData": auth}
	att := []byte{0xa3, 0x63, 'f', 'm', 't', 0x64, 'n', 'o', 'n', 'e', 0x67, 'a', 't', 't', 'S', 't', 'm', 't', 0xa0,
		0x68, 'a', 'u', 't', 'h', 'D', 'a', 't', 'a', 0x59}
	att = binary.BigEndian.AppendUint16(att, uint16(len(auth)))
	att = append(att, auth...)
	return json.Marshal(map[string]any{"id": b64u.EncodeToString(p.id), "rawId": b64u.EncodeToString(p.id),
		"type": "public-key", "response": map[string]string{
			"clientDataJSON":    b64u.EncodeToString(p.clientData("webauthn.create", c.PublicKey.Challenge)),
			"attestationObject": b64u.EncodeToString(att)}})
}

// Get answers navigator.credentials.get's options with a signed assertion, its
// counter one more than the last.
func (p *Passkey) Get(options []byte) ([]byte, error) {
	var c ceremony
	if err := json.Unmarshal(options, &c); err != nil {
		return nil, fmt.Errorf("request options: %w", err)
	}
	p.Counter++
	auth := p.authData(c.PublicKey.RPID, 0x05) // UP, UV
	cd := p.clientData("webauthn.get", c.PublicKey.Challenge)
	cdHash := sha256.Sum256(cd)
	signed := sha256.Sum256(append(append([]byte{}, auth...), cdHash[:]...))
	sig, err := ecdsa.SignASN1(rand.Reader, p.key, signed[:])
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{"id": b64u.EncodeToString(p.id), "rawId": b64u.EncodeToString(p.id),
		"type": "public-key", "response": map[string]string{
			"clientDataJSON":    b64u.EncodeToString(cd),
			"authenticatorData": b64u.EncodeToString(auth),
			"signature":         b64u.EncodeToString(sig)}})
}

// authData is the authenticator data's fixed part: the RP ID's hash, the flags
// and the counter.
func (p *Passkey) authData(rpID string, flags byte) []byte {
	h := sha256.Sum256([]byte(rpID))
	out := append(h[:], flags)
	return binary.BigEndian.AppendUint32(out, p.Counter)
}
