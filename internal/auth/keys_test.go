package auth

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
)

// reclaim re-signs a token's claims, with fresh times, under key and kid: what
// someone holding key could mint for a live session.
func reclaim(t *testing.T, e *env, raw, kid string, key []byte) string {
	t.Helper()
	h, c := jwtParts(t, raw)
	now := e.clock.Now().Unix()
	return craft(t, clone(h, map[string]any{"kid": kid}),
		clone(c, map[string]any{"iat": now, "nbf": now, "exp": now + 600, "jti": randomID(16)}), key)
}

// docs/security.md item 25: the store holds the signing key sealed. Every stored value, used
// as an HMAC key, signs a live session's claims into a token that is refused; the
// key opened with the key file signs one that is accepted (the forging works, only
// the key is missing). A database without its key file does not even start.
func TestSigningKeysSealedAtRest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.createUser("alice@example.com", alicePassword, "user")
	tok := e.login("alice@example.com", alicePassword)
	keys, err := e.st.SigningKeys(context.Background())
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %+v %v", keys, err)
	}
	for _, k := range keys {
		if !k.Sealed || seal.KeyIDOf(k.Secret) != testSealer.CurrentID() {
			t.Fatalf("key %s is not sealed with the key file: %+v", k.ID, k)
		}
		e.authFails(reclaim(t, e, tok.Raw, k.ID, k.Secret))
		opened, err := testSealer.Open(k.Secret, seal.SigningKeyAAD(k.ID))
		if err != nil {
			t.Fatal(err)
		}
		e.authOK(reclaim(t, e, tok.Raw, k.ID, opened))
	}
	other, _ := seal.New(bytes.Repeat([]byte{0x77}, seal.KeySize))
	_, err = New(context.Background(), e.st, Config{Sealer: other, Argon2: cheapParams})
	if err == nil || !strings.Contains(err.Error(), "--secret-key-file") {
		t.Fatalf("New with another key file: %v", err)
	}
}

// An older vmgate stored the key raw: the first start seals it in place, tokens it
// signed stay valid, and further starts leave the stored value alone.
func TestRawSigningKeySealedInPlace(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	raw := make([]byte, keyBytes)
	rand.Read(raw)
	st.keys = []store.SigningKey{{ID: "old-kid", Secret: raw, CreatedAt: newTestClock().Now().Add(-time.Hour)}}
	e := newEnvOn(t, st, newTestClock(), nil)
	e.createUser("alice@example.com", alicePassword, "user")
	tok := e.login("alice@example.com", alicePassword)

	sealed := st.keys[0]
	if !sealed.Sealed || bytes.Equal(sealed.Secret, raw) || bytes.Contains(sealed.Secret, raw) {
		t.Fatalf("the raw key was not sealed: %+v", sealed)
	}
	if opened, err := testSealer.Open(sealed.Secret, seal.SigningKeyAAD("old-kid")); err != nil || !bytes.Equal(opened, raw) {
		t.Fatalf("the sealed key opens to %x, %v", opened, err)
	}
	// A token the old vmgate signed with the raw key still works.
	e.authOK(reclaim(t, e, tok.Raw, "old-kid", raw))

	newEnvOn(t, st, e.clock, nil) // another start, another replica
	if !bytes.Equal(st.keys[0].Secret, sealed.Secret) {
		t.Fatal("a second start sealed the key again")
	}
}

// docs/security.md item 26: after a rotation the new key signs (on this replica once the
// feed says so; on another as soon as a token with the new kid arrives), tokens of
// the old key keep working, and the old key verifies until TokenTTL and
// KeyRetireGrace have passed since the new one was made; then it is refused and
// deleted from the store.
func TestSigningKeyRotation(t *testing.T) {
	t.Parallel()
	a := newEnv(t, nil)
	b := newEnvOn(t, a.st, a.clock, nil)
	a.createUser("alice@example.com", alicePassword, "user")
	t0 := a.login("alice@example.com", alicePassword)
	oldKID := a.s.ring.Load().signKID
	oldKey := a.s.ring.Load().keys[oldKID].secret

	rotated := a.clock.Now()
	k, err := NewSigningKey(testSealer, rotated)
	if err != nil {
		t.Fatal(err)
	}
	a.st.AddSigningKey(context.Background(), k)
	if err := a.s.catchUp(context.Background()); err != nil { // Run's reload, asked for by the feed
		t.Fatal(err)
	}
	t1 := a.login("alice@example.com", alicePassword)
	if h, _ := jwtParts(t, t1.Raw); h["kid"] != k.ID {
		t.Fatalf("after the rotation tokens are signed by %v, want %s", h["kid"], k.ID)
	}
	a.authOK(t0.Raw)
	reads := a.st.keyReads.Load()
	b.authOK(t1.Raw) // b has not read the feed: the unknown kid makes it learn the key
	if n := a.st.keyReads.Load() - reads; n != 1 {
		t.Fatalf("b read the keys %d times to learn the new kid, want 1", n)
	}
	if b.s.ring.Load().signKID != k.ID {
		t.Fatal("b learnt the key but does not sign with it")
	}

	a.clock.Advance(a.s.cfg.TokenTTL + KeyRetireGrace)
	a.authOK(reclaim(t, a, t1.Raw, oldKID, oldKey)) // still verifies
	a.clock.Advance(time.Second)
	a.authFails(reclaim(t, a, t1.Raw, oldKID, oldKey))
	a.authOK(reclaim(t, a, t1.Raw, k.ID, a.s.ring.Load().keys[k.ID].secret))
	if err := a.s.catchUp(context.Background()); err != nil { // the minute's sweep
		t.Fatal(err)
	}
	if keys, _ := a.st.SigningKeys(context.Background()); len(keys) != 1 || keys[0].ID != k.ID {
		t.Fatalf("stored keys after retirement: %+v", keys)
	}
	if _, ok := a.s.ring.Load().keys[oldKID]; ok {
		t.Fatal("the retired key is still in the ring")
	}
}

// An unknown kid makes a replica read the keys at most once a second, however
// many tokens carry one; a kid that is not shaped like ours costs no read at all.
func TestUnknownKIDReloadIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.createUser("alice@example.com", alicePassword, "user")
	tok := e.login("alice@example.com", alicePassword)
	forged := func(kid string) string {
		return reclaim(t, e, tok.Raw, kid, []byte("whatever-key-of-32-bytes-length!"))
	}

	reads := e.st.keyReads.Load()
	for _, kid := range []string{"../../x", "", strings.Repeat("a", 65), "kid with spaces"} {
		e.authFails(forged(kid))
	}
	if n := e.st.keyReads.Load() - reads; n != 0 {
		t.Fatalf("malformed kids caused %d key reads", n)
	}
	for range 100 {
		b := make([]byte, 12)
		rand.Read(b)
		e.authFails(forged(base64.RawURLEncoding.EncodeToString(b)))
	}
	if n := e.st.keyReads.Load() - reads; n != 1 {
		t.Fatalf("100 unknown kids within a second caused %d key reads, want 1", n)
	}
	e.clock.Advance(keyReloadEvery)
	e.authFails(forged("AAAAAAAAAAAAAAAA"))
	if n := e.st.keyReads.Load() - reads; n != 2 {
		t.Fatalf("a second later: %d key reads, want 2", n)
	}
}
