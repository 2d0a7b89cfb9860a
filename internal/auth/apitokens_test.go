package auth

import (
	"context"
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// from is a request context from client address addr, as the HTTP layer makes it.
func from(addr string) context.Context {
	return audit.WithRequest(context.Background(), addr, "req-1", "test")
}

func (e *env) createToken(userID int64, in NewAPIToken) CreatedAPIToken {
	e.t.Helper()
	tok, err := e.s.CreateAPIToken(context.Background(), userID, in)
	if err != nil {
		e.t.Fatalf("CreateAPIToken: %v", err)
	}
	return tok
}

// TestAPITokenFormat (docs/security.md item 32): vmg_, 43 base62 characters of 32 random
// bytes and a 6-character CRC32; a changed character fails the checksum; the
// redaction finds tokens in free text.
func TestAPITokenFormat(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		tok := newAPITokenSecret()
		if len(tok) != 53 || !strings.HasPrefix(tok, "vmg_") || !wellFormedAPIToken(tok) || seen[tok] {
			t.Fatalf("token %q: length %d, well-formed %v, repeated %v", tok, len(tok), wellFormedAPIToken(tok), seen[tok])
		}
		seen[tok] = true
		for _, i := range []int{4, 30, 46, 52} {
			b := []byte(tok)
			if b[i] == 'a' {
				b[i] = 'b'
			} else {
				b[i] = 'a'
			}
			if wellFormedAPIToken(string(b)) {
				t.Fatalf("%q with character %d changed passes the checksum", tok, i)
			}
		}
	}
	for _, bad := range []string{"", "vmg_", "vmg_short", strings.Repeat("x", 53), "vmg_" + strings.Repeat("!", 49)} {
		if wellFormedAPIToken(bad) {
			t.Fatalf("%q is well-formed", bad)
		}
	}
	tok := newAPITokenSecret()
	got := RedactAPITokens("GET /api/v1/" + tok + "/x?token=" + tok)
	if strings.Contains(got, tok[4:]) || got != "GET /api/v1/vmg_[redacted]/x?token=vmg_[redacted]" {
		t.Fatalf("redacted: %q", got)
	}
	if id := newAPITokenID(); !ValidAPITokenID(id) || len(id) != 12 {
		t.Fatalf("token id %q", id)
	}
}

// TestAPITokenLifecycle (docs/security.md item 32): a token is shown once, stored only as a
// hash, lasts 90 days by default and at most 365, stands for its owner with its
// id in the principal, and fails at once when deleted, on this replica and on
// another.
func TestAPITokenLifecycle(t *testing.T) {
	e := newEnv(t, nil)
	b := newEnvOn(t, e.st, e.clock, nil) // a second replica on the same store
	alice := e.createUser("alice@example.com", alicePassword, store.RoleUser)

	created := e.createToken(alice.ID, NewAPIToken{Name: " backup "})
	if created.Name != "backup" || !wellFormedAPIToken(created.Secret) || created.Grants != nil {
		t.Fatalf("created: %+v", created.APITokenInfo)
	}
	if want := e.clock.Now().Add(90 * 24 * time.Hour).Truncate(time.Second); !created.ExpiresAt.Equal(want) {
		t.Fatalf("expires %v, want %v (90 days)", created.ExpiresAt, want)
	}
	row := e.st.tokens[created.ID]
	hash := sha256.Sum256([]byte(created.Secret))
	if string(row.SecretHash) != string(hash[:]) || strings.Contains(row.Name+row.ID, created.Secret[4:12]) {
		t.Fatalf("stored row: %+v", row)
	}

	list, err := e.s.APITokens(context.Background(), alice.ID)
	if err != nil || len(list) != 1 || list[0].ID != created.ID {
		t.Fatalf("list: %+v %v", list, err)
	}

	for _, r := range []*env{e, b} {
		p, err := r.s.Authenticate(from("192.0.2.9"), created.Secret)
		if err != nil {
			t.Fatalf("authenticate: %v", err)
		}
		if p.UserID != alice.ID || p.APITokenID != created.ID || p.SessionID != "" || p.Email != "alice@example.com" ||
			p.TokenGrants != nil || !p.ExpiresAt.Equal(created.ExpiresAt) || p.AuditSession() != "token:"+created.ID {
			t.Fatalf("principal: %+v", p)
		}
	}

	for _, days := range []int{-1, 366} {
		_, err := e.s.CreateAPIToken(context.Background(), alice.ID, NewAPIToken{Name: "x", Days: days})
		wantKind(t, err, errs.Invalid)
	}
	long := e.createToken(alice.ID, NewAPIToken{Name: "long", Days: 365})
	if want := e.clock.Now().Add(365 * 24 * time.Hour).Truncate(time.Second); !long.ExpiresAt.Equal(want) {
		t.Fatalf("365 days: %v", long.ExpiresAt)
	}
	_, err = e.s.CreateAPIToken(context.Background(), alice.ID, NewAPIToken{Name: "backup"})
	if got := wantKind(t, err, errs.Conflict); got.Reason != "name_taken" {
		t.Fatalf("same name: %v", got)
	}

	// Replica b has the token cached; a deletion on e reaches it at once.
	if err := e.s.DeleteAPIToken(context.Background(), alice.ID, created.ID); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*env{e, b} {
		_, err := r.s.Authenticate(from("192.0.2.9"), created.Secret)
		wantTokenError(t, err)
	}
	wantKind(t, e.s.DeleteAPIToken(context.Background(), alice.ID, created.ID), errs.NotFound)
	if recs := e.audit.actions("token.delete"); len(recs) != 2 || recs[0].Result != "ok" || recs[1].Result != "not_found" {
		t.Fatalf("token.delete records: %+v", recs)
	}
	if recs := e.audit.actions("token.create"); len(recs) < 2 || recs[0].Target != "token:"+created.ID ||
		strings.Contains(recs[0].Params, created.Secret) {
		t.Fatalf("token.create records: %+v", recs)
	}
}

// TestAPITokenFollowsItsOwner (docs/security.md item 32): a disabled or deleted owner's
// token fails at once, on every replica; an expired token fails; a token of
// another user cannot be deleted by id alone.
func TestAPITokenFollowsItsOwner(t *testing.T) {
	e := newEnv(t, nil)
	b := newEnvOn(t, e.st, e.clock, nil)
	alice := e.createUser("alice@example.com", alicePassword, store.RoleUser)
	bob := e.createUser("bob@example.com", bobPassword, store.RoleUser)
	tok := e.createToken(alice.ID, NewAPIToken{Name: "ci", Days: 1})
	auth := func(r *env) error { _, err := r.s.Authenticate(from("192.0.2.9"), tok.Secret); return err }
	for _, r := range []*env{e, b} {
		if err := auth(r); err != nil {
			t.Fatal(err)
		}
	}

	wantKind(t, e.s.DeleteAPIToken(context.Background(), bob.ID, tok.ID), errs.NotFound)

	u := e.st.user(alice.ID)
	u.Disabled = true
	if _, err := e.st.UpdateUser(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*env{e, b} {
		wantTokenError(t, auth(r))
	}
	u.Disabled = false
	if _, err := e.st.UpdateUser(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	if err := auth(b); err != nil {
		t.Fatalf("re-enabled owner: %v", err)
	}

	e.clock.Advance(24 * time.Hour)
	wantTokenError(t, auth(e))
	recs := e.audit.actions("auth.api_token_failed")
	if len(recs) == 0 || recs[len(recs)-1].Target != "token:"+tok.ID || !strings.Contains(recs[len(recs)-1].Params, `"why":"expired"`) {
		t.Fatalf("failure records: %+v", recs)
	}

	other := e.createToken(bob.ID, NewAPIToken{Name: "x"})
	if _, err := b.s.Authenticate(from("192.0.2.9"), other.Secret); err != nil {
		t.Fatal(err)
	}
	e.st.deleteUser(bob.ID)
	_, err := b.s.Authenticate(from("192.0.2.9"), other.Secret)
	wantTokenError(t, err)
}

// TestAPITokenGrantsAndScope (docs/security.md item 32): grants are validated and carried
// in the principal; a token limited to grants is no admin; a token may not manage
// credentials or sessions, nor be refreshed or logged out.
func TestAPITokenGrantsAndScope(t *testing.T) {
	e := newEnv(t, nil)
	admin := e.createUser("root@example.com", alicePassword, store.RoleAdmin)
	for _, bad := range [][]TokenGrant{
		{},
		{{ClusterID: 0, Role: "viewer"}},
		{{ClusterID: 1, Role: "admin"}},
		{{ClusterID: 1, Role: "viewer"}, {ClusterID: 1, Role: "operator"}},
	} {
		_, err := e.s.CreateAPIToken(context.Background(), admin.ID, NewAPIToken{Name: "x", Grants: bad})
		wantKind(t, err, errs.Invalid)
	}
	_, err := e.s.CreateAPIToken(context.Background(), admin.ID, NewAPIToken{Name: " \t"})
	wantKind(t, err, errs.Invalid)

	limited := e.createToken(admin.ID, NewAPIToken{Name: "limited",
		Grants: []TokenGrant{{ClusterID: 3, Role: "viewer"}, {ClusterID: 1, Role: "operator"}}})
	if len(limited.Grants) != 2 || limited.Grants[0].ClusterID != 1 {
		t.Fatalf("grants, by cluster: %+v", limited.Grants)
	}
	p, err := e.s.Authenticate(from("192.0.2.9"), limited.Secret)
	if err != nil {
		t.Fatal(err)
	}
	if p.Role != store.RoleAdmin || p.IsAdmin() || p.TokenGrants[1] != "operator" || p.TokenGrants[3] != "viewer" ||
		len(p.TokenGrants) != 2 {
		t.Fatalf("limited principal: %+v", p)
	}
	full := e.createToken(admin.ID, NewAPIToken{Name: "full"})
	pf, err := e.s.Authenticate(from("192.0.2.9"), full.Secret)
	if err != nil || !pf.IsAdmin() {
		t.Fatalf("an admin's token without grants: %+v %v", pf, err)
	}

	wantReason(t, RequireLoginSession(pf), errs.ReasonSessionRequired)
	if err := RequireLoginSession(e.authOK(e.login("root@example.com", alicePassword).Raw)); err != nil {
		t.Fatalf("a login session: %v", err)
	}
	// At /user/refresh an API token is a token that failed, like any other: the
	// one 401 body (docs/security.md item 1), which says nothing of what kind it was.
	_, err = e.refresh(full.Secret)
	wantTokenError(t, err)
	wantReason(t, e.s.Logout(context.Background(), pf), errs.ReasonSessionRequired)
}

// TestAPITokenFailuresAreThrottled (docs/security.md items 32, 15): failed token uses empty
// the client network's bucket; then that network is refused 429 before any token
// is looked at, the right one too, while other networks go on.
func TestAPITokenFailuresAreThrottled(t *testing.T) {
	e := newEnv(t, nil)
	alice := e.createUser("alice@example.com", alicePassword, store.RoleUser)
	tok := e.createToken(alice.ID, NewAPIToken{Name: "ci"})
	bad := newAPITokenSecret() // well-formed, unknown
	for i := range 10 {
		raw := bad
		if i == 3 {
			raw = "vmg_garbage"
		}
		_, err := e.s.Authenticate(from("198.51.100.7"), raw)
		wantTokenError(t, err)
	}
	_, err := e.s.Authenticate(from("198.51.100.7"), tok.Secret)
	if got := wantKind(t, err, errs.RateLimited); got.RetryAfter < 1 {
		t.Fatalf("429 without Retry-After: %+v", got)
	}
	if _, err := e.s.Authenticate(from("198.51.100.8"), tok.Secret); err != nil {
		t.Fatalf("another network: %v", err)
	}
	e.clock.Advance(6 * time.Second) // one failure's worth refills
	if _, err := e.s.Authenticate(from("198.51.100.7"), tok.Secret); err != nil {
		t.Fatalf("after the bucket refilled: %v", err)
	}
	if n := len(e.audit.actions("auth.api_token_failed")); n != 10 {
		t.Fatalf("%d failures audited, want 10", n)
	}
}

// TestAPITokenLastUse: a token's last use and its address are written at most
// once a SeenInterval, and a cached token costs no store read.
func TestAPITokenLastUse(t *testing.T) {
	e := newEnv(t, nil)
	alice := e.createUser("alice@example.com", alicePassword, store.RoleUser)
	tok := e.createToken(alice.ID, NewAPIToken{Name: "ci"})
	use := func(addr string) {
		t.Helper()
		if _, err := e.s.Authenticate(from(addr), tok.Secret); err != nil {
			t.Fatal(err)
		}
		e.s.WaitSeen()
	}
	use("192.0.2.1")
	first := e.clock.Now()
	reads := e.st.userReads.Load()
	e.clock.Advance(30 * time.Second)
	use("192.0.2.2")
	if n := e.st.userReads.Load(); n != reads {
		t.Fatalf("a cached token read the store %d times", n-reads)
	}
	got := e.st.tokens[tok.ID]
	if !got.LastUsedAt.Equal(first.UTC()) || got.LastUsedFrom != "192.0.2.1" {
		t.Fatalf("within the interval: %v from %s", got.LastUsedAt, got.LastUsedFrom)
	}
	e.clock.Advance(31 * time.Second)
	use("192.0.2.3")
	list, err := e.s.APITokens(context.Background(), alice.ID)
	if err != nil || !list[0].LastUsedAt.Equal(e.clock.Now().UTC()) || list[0].LastUsedFrom != "192.0.2.3" {
		t.Fatalf("after the interval: %+v %v", list, err)
	}
}
