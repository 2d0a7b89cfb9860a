package identity

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// testOP is an OpenID Provider the test controls completely, for the ID tokens no
// real provider would sign (docs/security.md item 40's rejections): discovery, a
// JWKS and a token endpoint whose ID token the test shapes from the login's
// nonce. The happy path's real provider is Dex (internal/oidctest).
type testOP struct {
	srv *httptest.Server
	key *rsa.PrivateKey
	kid string

	mu sync.Mutex
	// idToken makes the token endpoint's ID token from the login's nonce and the
	// code's PKCE verifier; nil answers 400.
	idToken    func(nonce string) string
	verifiers  []string // code_verifier of each exchange
	keyFetches int      // GETs of the JWKS
	nonces     map[string]string
}

func newTestOP(t *testing.T) *testOP {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	op := &testOP{key: key, kid: "k1", nonces: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{
			"issuer": op.srv.URL, "authorization_endpoint": op.srv.URL + "/auth", "token_endpoint": op.srv.URL + "/token",
			"jwks_uri": op.srv.URL + "/keys", "id_token_signing_alg_values_supported": []string{"RS256"},
			"response_types_supported": []string{"code"}, "subject_types_supported": []string{"public"},
		})
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, r *http.Request) {
		op.mu.Lock()
		pub, kid := op.key.PublicKey, op.kid
		op.keyFetches++
		op.mu.Unlock()
		json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{{
			"kty": "RSA", "alg": "RS256", "use": "sig", "kid": kid,
			"n": base64.RawURLEncoding.EncodeToString(pub.N.Bytes()),
			"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes()),
		}}})
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		op.mu.Lock()
		op.verifiers = append(op.verifiers, r.PostForm.Get("code_verifier"))
		nonce, make := op.nonces[r.PostForm.Get("code")], op.idToken
		op.mu.Unlock()
		if make == nil {
			http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"access_token": "at", "token_type": "Bearer", "expires_in": 60,
			"id_token": make(nonce)})
	})
	op.srv = httptest.NewServer(mux)
	t.Cleanup(op.srv.Close)
	return op
}

// authorize plays the provider's authorization endpoint for the URL StartLogin
// gave: it checks PKCE S256 was asked for, and returns a code tied to the login's
// nonce and the state to send back.
func (op *testOP) authorize(t *testing.T, authURL string) (code, state string) {
	t.Helper()
	u, err := url.Parse(authURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("nonce") == "" ||
		q.Get("state") == "" || q.Get("response_type") != "code" {
		t.Fatalf("the authorization request lacks PKCE, nonce or state: %s", authURL)
	}
	code = "code-" + q.Get("state")[:8]
	op.mu.Lock()
	op.nonces[code] = q.Get("nonce")
	op.mu.Unlock()
	return code, q.Get("state")
}

func (op *testOP) setIDToken(f func(nonce string) string) {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.idToken = f
}

// sign signs claims with the provider's key (RS256, its kid).
func (op *testOP) sign(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	op.mu.Lock()
	key, kid := op.key, op.kid
	op.mu.Unlock()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (op *testOP) lastVerifier() string {
	op.mu.Lock()
	defer op.mu.Unlock()
	if len(op.verifiers) == 0 {
		return ""
	}
	return op.verifiers[len(op.verifiers)-1]
}

// rotate replaces the provider's signing key (and its kid), as a provider's key
// rotation does: the old key is no longer published.
func (op *testOP) rotate(t *testing.T, kid string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	op.mu.Lock()
	op.key, op.kid = key, kid
	op.mu.Unlock()
}

func (op *testOP) fetches() int {
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.keyFetches
}
