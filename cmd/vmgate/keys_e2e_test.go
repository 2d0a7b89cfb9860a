package main

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/vmgate/vmgate/internal/seal"
)

// forge signs the claims of the live token raw, with a fresh jti, under key and
// kid: what someone holding key could mint for that session.
func forge(t *testing.T, raw, kid string, key []byte) string {
	t.Helper()
	parts := strings.Split(raw, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	claims := jwt.MapClaims{}
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	claims["jti"] = "forged-" + kid
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	tok.Header["typ"] = "at+jwt"
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// storedSigningKeys reads signing_keys straight from the SQLite file, as whoever
// holds a copy of the database would.
func storedSigningKeys(t *testing.T, dbPath string) map[string][]byte {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+dbPath+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT id, secret FROM signing_keys`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]byte{}
	for rows.Next() {
		var (
			id     string
			secret []byte
		)
		if err := rows.Scan(&id, &secret); err != nil {
			t.Fatal(err)
		}
		out[id] = secret
	}
	if err := rows.Err(); err != nil || len(out) == 0 {
		t.Fatalf("signing keys: %v (%d)", err, len(out))
	}
	return out
}

// TestDatabaseCopyMintsNoToken (SECURITY.md 25) against the real binary: every
// value of signing_keys, used as an HMAC key, signs a live session's claims into
// a token vmgate refuses (401); the same value opened with the key file signs one
// it accepts — the forgery is right, only the key file was missing.
func TestDatabaseCopyMintsNoToken(t *testing.T) {
	const pw = "sealed keys staple horse"
	dir := t.TempDir()
	p := start(t, []string{"VMGATE_DEV_PASSWORD=" + pw}, "server", "--dev", "--data-dir", dir, "--listen", "127.0.0.1:0")
	base := p.line(t, listening)[1]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := checkedClient(t, base, "")
	tok, err := c.Login(ctx, "admin@vmgate.local", pw)
	if err != nil {
		t.Fatal(err)
	}
	me := func(token string) int {
		_, err := checkedClient(t, base, token).Do(ctx, http.MethodGet, "/api/v1/user/me", nil, nil, nil)
		if err == nil {
			return http.StatusOK
		}
		if status(err) == 0 {
			t.Fatal(err)
		}
		return status(err)
	}
	if got := me(tok.Token); got != http.StatusOK {
		t.Fatalf("the real token: %d", got)
	}
	key, err := seal.ReadKey(filepath.Join(dir, "vmgate.key"))
	if err != nil {
		t.Fatal(err)
	}
	sealer, err := seal.New(key)
	if err != nil {
		t.Fatal(err)
	}
	for kid, stored := range storedSigningKeys(t, filepath.Join(dir, "vmgate.db")) {
		if got := me(forge(t, tok.Token, kid, stored)); got != http.StatusUnauthorized {
			t.Errorf("a token signed with the stored value of %s: %d, want 401", kid, got)
		}
		opened, err := sealer.Open(stored, seal.SigningKeyAAD(kid))
		if err != nil {
			t.Fatalf("the key file does not open %s: %v", kid, err)
		}
		if got := me(forge(t, tok.Token, kid, opened)); got != http.StatusOK {
			t.Errorf("a token signed with the opened key %s: %d, want 200 (the forgery itself is wrong)", kid, got)
		}
	}
}
