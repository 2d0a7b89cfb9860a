package auth

import (
	"context"
	"crypto/hmac"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// tokenFixture is a logged-in user, its real token decoded, and the signing key,
// so a test can forge variants that differ from a valid token in one respect.
type tokenFixture struct {
	*env
	raw    string
	header map[string]any
	claims map[string]any
	key    []byte
}

func newTokenFixture(t *testing.T) *tokenFixture {
	t.Helper()
	e := newEnv(t, nil)
	e.createUser("alice@example.com", alicePassword, "user")
	tok := e.login("alice@example.com", alicePassword)
	h, c := jwtParts(t, tok.Raw)
	return &tokenFixture{env: e, raw: tok.Raw, header: h, claims: c, key: e.s.ring.Load().keys[e.s.ring.Load().signKID].secret}
}

// docs/security.md item 1: one algorithm per key, strict base64, typ checked, known kid only;
// every variant fails with one identical error.
func TestAuthenticateRejectsForgedTokens(t *testing.T) {
	t.Parallel()
	f := newTokenFixture(t)
	// Control: a token crafted here from the real header and claims is accepted, so
	// each case below fails for its one difference alone. The real token is
	// accepted first too, so each forgery differs by its one difference from a
	// token in the verified-token cache.
	f.authOK(craft(t, f.header, f.claims, f.key))
	f.authOK(f.raw)

	head, body, sig := splitRaw(t, f.raw)
	otherKey := []byte(strings.Repeat("k", 32))
	hs512 := func(header map[string]any) string {
		signing := strings.TrimSuffix(craft(t, header, f.claims, nil), ".")
		m := hmac.New(sha512.New, f.key)
		m.Write([]byte(signing))
		return signing + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	}
	cases := map[string]string{
		"alg none":                   craft(t, clone(f.header, map[string]any{"alg": "none"}), f.claims, nil),
		"alg None":                   craft(t, clone(f.header, map[string]any{"alg": "None"}), f.claims, nil),
		"alg NONE":                   craft(t, clone(f.header, map[string]any{"alg": "NONE"}), f.claims, nil),
		"alg none, real signature":   b64json(t, clone(f.header, map[string]any{"alg": "none"})) + "." + body + "." + sig,
		"alg missing":                craft(t, clone(f.header, map[string]any{"alg": nil}), f.claims, f.key),
		"alg HS512 with the key":     hs512(clone(f.header, map[string]any{"alg": "HS512"})),
		"alg RS256, HMAC signature":  craft(t, clone(f.header, map[string]any{"alg": "RS256"}), f.claims, f.key),
		"HS256 with another key":     craft(t, f.header, f.claims, otherKey),
		"signature stripped":         head + "." + body + ".",
		"signature tampered":         head + "." + body + "." + flipMiddle(sig),
		"claims tampered":            head + "." + b64json(t, clone(f.claims, map[string]any{"sub": "2"})) + "." + sig,
		"signature alias, same bits": head + "." + body + "." + aliasLastChar(t, sig),
		"padded signature":           head + "." + body + "." + sig + "=",
		"2 segments":                 head + "." + body,
		"4 segments":                 f.raw + "." + sig,
		"4 segments, empty last":     f.raw + ".",
		"empty":                      "",
		"garbage":                    "not a token",
		"typ missing":                craft(t, clone(f.header, map[string]any{"typ": nil}), f.claims, f.key),
		"typ JWT":                    craft(t, clone(f.header, map[string]any{"typ": "JWT"}), f.claims, f.key),
		"typ AT+JWT":                 craft(t, clone(f.header, map[string]any{"typ": "AT+JWT"}), f.claims, f.key),
		"typ not a string":           craft(t, clone(f.header, map[string]any{"typ": 1}), f.claims, f.key),
		"kid unknown":                craft(t, clone(f.header, map[string]any{"kid": "nope"}), f.claims, f.key),
		"kid path":                   craft(t, clone(f.header, map[string]any{"kid": "../../x"}), f.claims, f.key),
		"kid missing":                craft(t, clone(f.header, map[string]any{"kid": nil}), f.claims, f.key),
		"kid not a string":           craft(t, clone(f.header, map[string]any{"kid": 7}), f.claims, f.key),
		"crit header":                craft(t, clone(f.header, map[string]any{"crit": []string{"exp"}}), f.claims, f.key),
		"header not JSON":            b64url("{") + "." + body + "." + sig,
		"claims not JSON":            head + "." + b64url("[") + "." + sig,
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := f.s.Authenticate(context.Background(), raw)
			wantTokenError(t, err)
			_, err = f.refresh(raw)
			wantTokenError(t, err)
		})
	}
	// None of that harmed the real token.
	f.authOK(f.raw)
}

// docs/security.md item 2: iss, aud and exp are required; nbf and iat may be at most Leeway in
// the future; exp has no leeway. One negative case per claim, each with a valid
// signature.
func TestAuthenticateChecksClaims(t *testing.T) {
	t.Parallel()
	f := newTokenFixture(t)
	now := f.clock.Now().Unix()
	cases := []struct {
		name string
		edit map[string]any
		ok   bool
	}{
		{"control", nil, true},
		{"iss wrong", map[string]any{"iss": "someone-else"}, false},
		{"iss missing", map[string]any{"iss": nil}, false},
		{"aud wrong", map[string]any{"aud": []string{"other"}}, false},
		{"aud missing", map[string]any{"aud": nil}, false},
		{"exp missing", map[string]any{"exp": nil}, false},
		{"exp past", map[string]any{"exp": now - 3600}, false},
		{"exp now", map[string]any{"exp": now}, false},
		{"exp within leeway past", map[string]any{"exp": now - 10}, false},
		{"exp not a number", map[string]any{"exp": "soon"}, false},
		{"nbf future beyond leeway", map[string]any{"nbf": now + 31}, false},
		{"nbf future within leeway", map[string]any{"nbf": now + 29}, true},
		{"nbf missing", map[string]any{"nbf": nil}, false},
		{"iat future beyond leeway", map[string]any{"iat": now + 31}, false},
		{"iat future within leeway", map[string]any{"iat": now + 29}, true},
		{"iat missing", map[string]any{"iat": nil}, false},
		{"sub missing", map[string]any{"sub": nil}, false},
		{"sub not decimal", map[string]any{"sub": "alice"}, false},
		{"sub zero-padded", map[string]any{"sub": "01"}, false},
		{"sub other user", map[string]any{"sub": "2"}, false},
		{"sid missing", map[string]any{"sid": nil}, false},
		{"sid unknown", map[string]any{"sid": "AAAA"}, false},
		{"jti missing", map[string]any{"jti": nil}, false},
		{"gen missing", map[string]any{"gen": nil}, false},
		{"gen negative", map[string]any{"gen": -1}, false},
		{"gen ahead", map[string]any{"gen": 1}, false},
		{"gen a string", map[string]any{"gen": "0"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			raw := craft(t, f.header, clone(f.claims, c.edit), f.key)
			_, err := f.s.Authenticate(context.Background(), raw)
			if c.ok {
				if err != nil {
					t.Fatalf("want ok, got %v", err)
				}
				return
			}
			wantTokenError(t, err)
		})
	}
}

// docs/security.md item 3: jku, x5u, jwk and x5c are never followed; the token is refused and
// the listener they point at sees no connection.
func TestKeyURLHeadersAreNeverFollowed(t *testing.T) {
	t.Parallel()
	f := newTokenFixture(t)
	var conns, requests atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	attacker := []byte(strings.Repeat("a", 32))
	jwk := map[string]any{"kty": "oct", "k": base64.RawURLEncoding.EncodeToString(attacker)}
	cases := map[string]string{
		"jku, real key":      craft(t, clone(f.header, map[string]any{"jku": srv.URL + "/jwks"}), f.claims, f.key),
		"jku, attacker key":  craft(t, clone(f.header, map[string]any{"jku": srv.URL + "/jwks", "kid": "evil"}), f.claims, attacker),
		"x5u":                craft(t, clone(f.header, map[string]any{"x5u": srv.URL + "/cert.pem"}), f.claims, f.key),
		"jwk, attacker key":  craft(t, clone(f.header, map[string]any{"jwk": jwk, "kid": nil}), f.claims, attacker),
		"x5c":                craft(t, clone(f.header, map[string]any{"x5c": []string{"MIIB"}}), f.claims, f.key),
		"jku without kid":    craft(t, clone(f.header, map[string]any{"jku": srv.URL, "kid": nil}), f.claims, attacker),
		"jku in the claims?": craft(t, f.header, clone(f.claims, map[string]any{"jku": srv.URL}), attacker),
	}
	for name, raw := range cases {
		_, err := f.s.Authenticate(context.Background(), raw)
		wantTokenError(t, err)
		_, err = f.refresh(raw)
		wantTokenError(t, err)
		if n := conns.Load() + requests.Load(); n != 0 {
			t.Fatalf("%s: the key URL's listener saw %d connections/requests", name, n)
		}
	}
}

// docs/security.md item 4: size is checked before parsing. A validly signed token padded to
// the limit passes; one byte more fails.
func TestAuthenticateTokenSizeLimit(t *testing.T) {
	t.Parallel()
	f := newTokenFixture(t)
	padded := func(total int) string {
		pad := 1
		for {
			raw := craft(t, f.header, clone(f.claims, map[string]any{"pad": strings.Repeat("x", pad)}), f.key)
			if len(raw) >= total {
				return raw
			}
			pad += max(1, (total-len(raw))*3/4)
		}
	}
	atLimit := padded(MaxTokenBytes)
	for len(atLimit) > MaxTokenBytes { // base64 grows in steps; trim the pad to land on the limit
		h, c := jwtParts(t, atLimit)
		c["pad"] = c["pad"].(string)[1:]
		atLimit = craft(t, h, c, f.key)
	}
	if len(atLimit) < MaxTokenBytes-3 {
		t.Fatalf("could not build a token near the limit: %d bytes", len(atLimit))
	}
	f.authOK(atLimit)
	over := padded(MaxTokenBytes + 1)
	if len(over) <= MaxTokenBytes {
		t.Fatalf("token of %d bytes is not over the limit", len(over))
	}
	f.authFails(over)
	_, err := f.refresh(over)
	wantTokenError(t, err)
}

// docs/security.md item 5: revocation is keyed on the session, never on the token's text. A
// different token of the revoked session (other jti, other bytes) fails too, while
// another session of the same user lives on.
func TestRevocationIsKeyedOnSession(t *testing.T) {
	t.Parallel()
	f := newTokenFixture(t)
	other := f.login("alice@example.com", alicePassword)
	sibling := craft(t, f.header, clone(f.claims, map[string]any{"jti": "another-token-id"}), f.key)
	p := f.authOK(f.raw)
	f.authOK(sibling)
	if err := f.s.Logout(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	f.authFails(f.raw)
	f.authFails(sibling)
	f.authOK(other.Raw)
}

// An issued token carries exactly the documented header and claims.
func TestIssuedTokenShape(t *testing.T) {
	t.Parallel()
	f := newTokenFixture(t)
	if len(f.header) != 3 || f.header["alg"] != "HS256" || f.header["typ"] != "at+jwt" || f.header["kid"] != f.s.ring.Load().signKID {
		t.Fatalf("header %v", f.header)
	}
	now := float64(f.clock.Now().Unix())
	for _, k := range []string{"iss", "aud", "sub", "sid", "jti", "gen", "iat", "nbf", "exp"} {
		if _, ok := f.claims[k]; !ok {
			t.Errorf("claim %s missing from %v", k, f.claims)
		}
	}
	if f.claims["sub"] != "1" || f.claims["gen"] != 0.0 || f.claims["iat"] != now || f.claims["nbf"] != now ||
		f.claims["exp"] != now+3600 {
		t.Errorf("claims %v", f.claims)
	}
	if sid, _ := f.claims["sid"].(string); len(sid) != 43 { // 32 bytes, base64url
		t.Errorf("sid %q", sid)
	}
}

// The signing key is created once and shared: a second replica on the same store
// uses the first one's key, and their tokens are valid on each other.
func TestSigningKeySharedByReplicas(t *testing.T) {
	t.Parallel()
	a := newEnv(t, nil)
	b := newEnvOn(t, a.st, a.clock, nil)
	ra, rb := a.s.ring.Load(), b.s.ring.Load()
	if ra.signKID != rb.signKID || len(a.st.keys) != 1 || len(ra.keys[ra.signKID].secret) != 32 {
		t.Fatalf("replicas did not settle on one 32-byte key: %q %q %d", ra.signKID, rb.signKID, len(a.st.keys))
	}
	a.createUser("alice@example.com", alicePassword, "user")
	b.authOK(a.login("alice@example.com", alicePassword).Raw)
}

func splitRaw(t *testing.T, raw string) (head, body, sig string) {
	t.Helper()
	p := strings.Split(raw, ".")
	if len(p) != 3 {
		t.Fatalf("%d segments", len(p))
	}
	return p[0], p[1], p[2]
}

func b64url(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func b64json(t *testing.T, m map[string]any) string {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func flipMiddle(sig string) string {
	b := []byte(sig)
	i := len(b) / 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

// aliasLastChar changes the last character of an HS256 signature (43 characters,
// 258 bits for 256) in its 2 unused bits: a lenient decoder reads the same bytes.
func aliasLastChar(t *testing.T, sig string) string {
	t.Helper()
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, sig[len(sig)-1])
	alias := sig[:len(sig)-1] + string(alphabet[last^1])
	a, errA := base64.RawURLEncoding.DecodeString(sig)
	b, errB := base64.RawURLEncoding.DecodeString(alias)
	if errA != nil || errB != nil || string(a) != string(b) {
		t.Fatalf("alias does not decode to the same bytes leniently")
	}
	if _, err := base64.RawURLEncoding.Strict().DecodeString(alias); err == nil {
		t.Fatalf("alias decodes strictly too")
	}
	return alias
}

// A token that verified is remembered by its text, so its next use skips the JWT
// work; but the cache answers only for that exact text while its exp has not
// passed and its key still verifies, and the session is checked on every use
// (docs/security.md items 1, 2, 5, 26).
func TestVerifiedTokenCache(t *testing.T) {
	t.Parallel()
	f := newTokenFixture(t)
	f.authOK(f.raw)
	if n := f.s.tokens.len(); n != 1 {
		t.Fatalf("%d tokens cached after one use, want 1", n)
	}
	head, body, sig := splitRaw(t, f.raw)
	for name, raw := range map[string]string{
		"signature alias, same bits": head + "." + body + "." + aliasLastChar(t, sig),
		"claims tampered":            head + "." + b64json(t, clone(f.claims, map[string]any{"sub": "2"})) + "." + sig,
		"signature tampered":         head + "." + body + "." + flipMiddle(sig),
	} {
		_, err := f.s.Authenticate(context.Background(), raw)
		if wantTokenError(t, err); f.s.tokens.len() != 1 {
			t.Fatalf("%s: a refused token was cached", name)
		}
	}

	// Its key retired: the cached token no longer passes.
	ring := f.s.ring.Load()
	retired := ring.keys[ring.signKID]
	retired.retireAt = f.clock.Now().Add(-time.Second)
	f.s.ring.Store(&keyring{keys: map[string]ringKey{ring.signKID: retired}, signKID: ring.signKID})
	f.authFails(f.raw)
	f.s.ring.Store(ring)
	f.authOK(f.raw)

	// Its session ends: refused, whatever the token cache says.
	other := f.login("alice@example.com", alicePassword)
	f.authOK(other.Raw)
	if err := f.s.Logout(context.Background(), f.authOK(other.Raw)); err != nil {
		t.Fatal(err)
	}
	f.authFails(other.Raw)

	// Its exp passes: refused, and forgotten at the next sweep.
	f.clock.Advance(f.s.cfg.TokenTTL)
	f.authFails(f.raw)
	f.s.sweep(context.Background(), f.clock.Now())
	if n := f.s.tokens.len(); n != 0 {
		t.Fatalf("%d expired tokens still cached after the sweep", n)
	}
}
