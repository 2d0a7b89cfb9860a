package main

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/testkit"
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

// TestDatabaseCopyMintsNoToken (docs/security.md item 25) against the real binary: every
// value of signing_keys, used as an HMAC key, signs a live session's claims into
// a token vmgate refuses (401); the same value opened with the key file signs one
// it accepts — the forgery is right, only the key file was missing.
func TestDatabaseCopyMintsNoToken(t *testing.T) {
	t.Parallel()
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
		_, err := checkedClient(t, base, token).Me(ctx)
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

// kidOf returns the kid in a token's header.
func kidOf(t *testing.T, raw string) string {
	t.Helper()
	h, _, _ := strings.Cut(raw, ".")
	b, err := base64.RawURLEncoding.DecodeString(h)
	if err != nil {
		t.Fatal(err)
	}
	var head struct {
		KID string `json:"kid"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		t.Fatal(err)
	}
	return head.KID
}

// admin runs `vmgate admin --data-dir dir args...` and returns its output.
func admin(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"admin", "--data-dir", dir}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("vmgate admin %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestKeyRotationOnRealBinary (docs/security.md item 26) with the real binary, a registered
// cluster and a SQLite database: `admin keys rotate-signing` while the server runs
// makes it sign with the new key within seconds, tokens of the old key still
// valid; `admin keys rotate-seal` with the server stopped re-seals everything, and
// the restarted server opens the cluster's secret and the signing keys with the
// new key file (a token from before the restart works, PVE answers); the old key
// file alone no longer starts vmgate; both rotations are in the audit trail.
func TestKeyRotationOnRealBinary(t *testing.T) {
	t.Parallel()
	const pw = "rotate every key please"
	dir, srv, c, clusterID := startLab(t, pw, "--auth-delay", "0s")
	base, t0 := c.BaseURL(), c.Token()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	out := admin(t, dir, "keys", "rotate-signing")
	m := regexp.MustCompile(`new signing key (\S+) signs`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("rotate-signing said:\n%s", out)
	}
	// A second session, refreshed until its token is signed with the new key.
	other := checkedClient(t, base, "")
	if _, err := other.Login(ctx, "ops@example.com", pw); err != nil {
		t.Fatal(err)
	}
	var t1 client.Token
	testkit.Eventually(t, "a token signed with the new key "+m[1], func() error {
		var err error
		if t1, err = other.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if kid := kidOf(t, t1.Token); kid != m[1] {
			return fmt.Errorf("the server still signs with %s", kid)
		}
		return nil
	})
	if _, err := checkedClient(t, base, t0).Me(ctx); err != nil {
		t.Fatalf("a token of the old key after the rotation: %v", err)
	}

	srv.cmd.Process.Signal(syscall.SIGTERM)
	if err := waitOrKill(srv.cmd, 30*time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	oldKey, err := seal.ReadKey(filepath.Join(dir, "vmgate.key"))
	if err != nil {
		t.Fatal(err)
	}
	out = admin(t, dir, "keys", "rotate-seal", "--new-key-file", filepath.Join(dir, "new.key"))
	oldFile := filepath.Join(dir, "vmgate.key."+seal.KeyID(oldKey)+".old")
	// Two signing keys, the cluster's token secret and the audit chain's key.
	if !strings.Contains(out, "sealed 4 secret(s) again") || !strings.Contains(out, oldFile) {
		t.Fatalf("rotate-seal said:\n%s", out)
	}

	srv2 := start(t, nil, "server", "--data-dir", dir, "--listen", "127.0.0.1:0")
	c2 := checkedClient(t, srv2.line(t, listening)[1], t1.Token)
	if _, err := c2.Me(ctx); err != nil {
		t.Fatalf("a token from before the rotation of the key file: %v\n%s", err, srv2.log())
	}
	if _, err := c2.VMs(ctx, clusterID, client.GuestFilter{}); err != nil {
		t.Fatalf("the cluster's resealed token secret: %v\n%s", err, srv2.log())
	}
	recs, err := c2.Audit(ctx, client.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, r := range recs.Items {
		seen[r.Action] = r.Result
	}
	if seen["keys.rotate_signing"] != "ok" || seen["keys.rotate_seal"] != "ok" {
		t.Fatalf("audit trail: %+v", recs.Items)
	}

	refused := exec.Command(binary, "server", "--data-dir", dir, "--listen", "127.0.0.1:0", "--secret-key-file", oldFile)
	out2, err := refused.CombinedOutput()
	if err == nil || !strings.Contains(string(out2), seal.KeyID(oldKey)) {
		t.Fatalf("a server with the old key file: %v\n%s", err, out2)
	}
}
