package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/apitest"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/store/storetest"
	"github.com/vmgate/vmgate/internal/testkit"
)

// createdToken is the data of POST /api/v1/user/tokens.
type createdToken struct {
	ID           string      `json:"id"`
	Name         string      `json:"name"`
	Token        string      `json:"token"`
	ExpiresAt    string      `json:"expiresAt"`
	LastUsedAt   *string     `json:"lastUsedAt"`
	LastUsedFrom *string     `json:"lastUsedFrom"`
	Grants       []grantJSON `json:"grants"`
}

// newToken makes an API token for user over HTTP (with the user's login token) and
// keeps its secret in e.tokens under as.
func (e *vmEnv) newToken(user, as, body string) createdToken {
	e.t.Helper()
	a := e.call(user, "POST", "/api/v1/user/tokens", body)
	if a.status != http.StatusOK || a.header.Get("Cache-Control") != "no-store" {
		e.t.Fatalf("create token: %d %s", a.status, a.raw)
	}
	var c createdToken
	if err := json.Unmarshal(a.env.Data, &c); err != nil {
		e.t.Fatal(err)
	}
	e.tokens[as] = c.Token
	return c
}

// TestAPITokensOverHTTP (docs/security.md item 32): a token made from a login session acts
// for its owner on the VM routes, attributed to the owner and the token in the
// audit trail; it manages no tokens, passwords or sessions (403
// session_required) and is not refreshed (the one 401); its grants cap the owner's; revoking it, removing the owner's grant or
// disabling the owner takes effect on the next call; lists never show a secret.
func TestAPITokensOverHTTP(t *testing.T) {
	e := newVMEnv(t, 1000)
	op := e.users["op"]
	full := e.newToken("op", "op-full", `{"name":"full"}`)
	if !strings.HasPrefix(full.Token, "vmg_") || full.LastUsedAt != nil || full.Grants != nil {
		t.Fatalf("created: %+v", full)
	}
	view := e.newToken("op", "op-view", `{"name":"view","expiresInDays":7,"grants":[{"clusterId":`+itoa(e.cid)+`,"role":"viewer"}]}`)

	// The token starts a VM; the audit names op and the token.
	e.call("op-full", "POST", e.vmPath("pve1", 101)+"/start", "").expect(t, 200, "")
	rec := e.lastAudit()
	if rec.Action != "vm.start" || rec.UserID != op.ID || rec.SessionID != "token:"+full.ID {
		t.Fatalf("audit of a token's start: %+v", rec)
	}
	e.call("op-full", "GET", "/api/v1/pve/clusters", "").expect(t, 200, "")

	// The viewer token reads but does not act.
	e.call("op-view", "GET", e.vmPath("pve1", 101), "").expect(t, 200, "")
	e.call("op-view", "POST", e.vmPath("pve1", 101)+"/stop?force=true", "").expect(t, 403, "forbidden")
	me := e.call("op-view", "GET", "/api/v1/user/me", "").expect(t, 200, "")
	if !strings.Contains(string(me.env.Data), `"grants":[{"clusterId":`+itoa(e.cid)+`,"role":"viewer"}]`) {
		t.Fatalf("me through the viewer token: %s", me.env.Data)
	}

	// Nothing about credentials or sessions through a token (every such route:
	// TestCredentialRoutesRefuseAPITokens); at refresh, the one 401.
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/api/v1/user/tokens", ""},
		{"POST", "/api/v1/user/tokens", `{"name":"more"}`},
		{"DELETE", "/api/v1/user/tokens/" + full.ID, ""},
		{"POST", "/api/v1/user/password", `{"currentPassword":"` + envPassword + `","newPassword":"x"}`},
		{"POST", "/api/v1/user/logout", ""},
		{"GET", "/api/v1/user/sessions", ""},
	} {
		e.call("op-full", c.method, c.path, c.body).expect(t, 403, "session_required")
	}
	e.call("op-full", "POST", "/api/v1/user/refresh", "").expect(t, 401, "unauthenticated")

	// Lists: no secret, the last use and its address.
	e.auth.WaitSeen()
	lst := e.call("op", "GET", "/api/v1/user/tokens", "").expect(t, 200, "")
	if strings.Contains(string(lst.raw), full.Token) || strings.Contains(string(lst.raw), full.Token[4:20]) ||
		!strings.Contains(string(lst.raw), `"lastUsedFrom":"127.0.0.1"`) {
		t.Fatalf("list: %s", lst.raw)
	}
	e.call("root", "GET", "/api/v1/users/"+itoa(op.ID)+"/tokens", "").expect(t, 200, "")
	e.call("root", "GET", "/api/v1/users/999999/tokens", "").expect(t, 404, "not_found")
	e.call("op", "DELETE", "/api/v1/user/tokens/bad-id", "").expect(t, 400, "invalid_request")
	e.call("op", "POST", "/api/v1/user/tokens", `{"name":"full"}`).expect(t, 409, "name_taken")
	e.call("op", "POST", "/api/v1/user/tokens", `{"name":"x","expiresInDays":366}`).expect(t, 400, "invalid_request")
	e.call("view", "POST", "/api/v1/user/tokens", `{"name":"x","grants":[{"clusterId":`+itoa(e.cid)+`,"role":"operator"}]}`).
		expect(t, 403, "forbidden")

	// Revoked: 401 on the next call.
	e.call("op", "DELETE", "/api/v1/user/tokens/"+view.ID, "").expect(t, 200, "")
	e.call("op-view", "GET", e.vmPath("pve1", 101), "").expect(t, 401, "unauthenticated")
	e.call("op", "DELETE", "/api/v1/user/tokens/"+view.ID, "").expect(t, 404, "not_found")

	// The owner loses the grant: 404 for the cluster at once; gets it back: 200.
	if err := e.fleet.DeleteGrant(context.Background(), setupActor, op.ID, e.cid); err != nil {
		t.Fatal(err)
	}
	e.call("op-full", "GET", e.vmPath("pve1", 101), "").expect(t, 404, "not_found")
	if _, err := e.fleet.PutGrant(context.Background(), setupActor, op.ID, e.cid, fleet.GrantOperator); err != nil {
		t.Fatal(err)
	}
	e.call("op-full", "GET", e.vmPath("pve1", 101), "").expect(t, 200, "")

	// An admin revokes it.
	adminTok := e.newToken("op", "op-2", `{"name":"two"}`)
	e.call("root", "DELETE", "/api/v1/users/"+itoa(op.ID)+"/tokens/"+adminTok.ID, "").expect(t, 200, "")
	e.call("op-2", "GET", "/api/v1/pve/clusters", "").expect(t, 401, "unauthenticated")

	// The owner is disabled: 401 at once.
	e.call("root", "PATCH", "/api/v1/users/"+itoa(op.ID), `{"disabled":true}`).expect(t, 200, "")
	e.call("op-full", "GET", "/api/v1/pve/clusters", "").expect(t, 401, "unauthenticated")
}

// TestAPITokenAdminScope (docs/security.md item 32): an admin's token without grants
// reads what an admin reads; one with grants is no admin; neither reaches the
// routes that manage users, sessions or tokens.
func TestAPITokenAdminScope(t *testing.T) {
	e := newVMEnv(t, 1000)
	e.newToken("root", "root-full", `{"name":"admin"}`)
	e.newToken("root", "root-lim", `{"name":"lim","grants":[{"clusterId":`+itoa(e.cid)+`,"role":"viewer"}]}`)
	e.call("root-full", "GET", "/api/v1/users", "").expect(t, 200, "")
	e.call("root-lim", "GET", "/api/v1/users", "").expect(t, 403, "forbidden")
	e.call("root-lim", "GET", e.vmPath("pve1", 100), "").expect(t, 200, "")
	e.call("root-lim", "POST", e.vmPath("pve1", 100)+"/reboot?wait=0", "").expect(t, 403, "forbidden")
	uid := itoa(e.users["op"].ID)
	e.call("root-full", "GET", "/api/v1/users/"+uid+"/tokens", "").expect(t, 403, "session_required")
	e.call("root-full", "GET", "/api/v1/users/"+uid+"/sessions", "").expect(t, 403, "session_required")
	e.call("root-full", "PATCH", "/api/v1/users/"+uid, `{"disabled":true}`).expect(t, 403, "session_required")
}

// TestAPITokenNeverLogged (docs/security.md item 32): the request log of a token's uses —
// good, revoked, refused, and a token pasted into the path — never holds the
// secret; failed uses from one network are limited (429).
func TestAPITokenNeverLogged(t *testing.T) {
	e := newVMEnv(t, 1000)
	tok := e.newToken("op", "op-tok", `{"name":"ci"}`)
	var logs bytes.Buffer
	cfg := e.apiConfig()
	cfg.VMs = e.svc
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	api, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := apitest.Wrap(t, api)
	send := func(path, token string) int {
		r := httptest.NewRequest("GET", path, nil)
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if c := send("/api/v1/pve/clusters", tok.Token); c != 200 {
		t.Fatalf("good token: %d", c)
	}
	send("/api/v1/"+tok.Token, tok.Token)
	send("/api/v1/pve/clusters?token="+tok.Token, tok.Token)
	e.call("op", "DELETE", "/api/v1/user/tokens/"+tok.ID, "").expect(t, 200, "")
	codes := map[int]int{}
	for range 12 {
		codes[send("/api/v1/pve/clusters", tok.Token)]++
	}
	if codes[401] != 10 || codes[429] != 2 {
		t.Fatalf("revoked token's answers: %v (want 10 × 401, then 429)", codes)
	}
	if !strings.Contains(logs.String(), `"path":"/api/v1/vmg_[redacted]"`) {
		t.Fatalf("no redacted path in the log:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), tok.Token[4:]) {
		t.Fatalf("the token's secret is in the log:\n%s", logs.String())
	}
}

// TestRevokedTokenFailsOnEveryReplica (docs/security.md item 32): two replicas on one
// PostgreSQL database, each with its own store, caches and server. A token used
// on replica B (so cached there) fails on B once it is revoked on A, once its
// owner is disabled on A, and (404) once the owner's grant is removed on A: the
// change feed (LISTEN/NOTIFY) carries each to B.
func TestRevokedTokenFailsOnEveryReplica(t *testing.T) {
	dsn := storetest.FreshSchema(t)
	e := newTestEnvOn(t, dsn, auth.Config{Argon2: auth.Params{Memory: 8, Time: 1, Threads: 1, KeyLen: 32, SaltLen: 16},
		PerAddressRate: rate.Inf, PerAddressBurst: 1})
	sim := e.addSim("A")
	e.addUser("admin", accounts.RoleAdmin)
	op := e.addUser("op", accounts.RoleUser)
	e.grant("op", "A", fleet.GrantOperator)

	// Replica B: its own connection pool and listener, auth, fleet and server.
	ctx := context.Background()
	stB, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stB.Close() })
	sealer, err := seal.New(bytes.Repeat([]byte{5}, seal.KeySize)) // the env's key file
	if err != nil {
		t.Fatal(err)
	}
	authB, err := auth.New(ctx, stB, auth.Config{Argon2: auth.Params{Memory: 8, Time: 1, Threads: 1, KeyLen: 32, SaltLen: 16},
		Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(authB.Close)
	fleetB, err := fleet.New(ctx, fleet.Config{Store: stB, Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fleetB.Close)
	b, err := New(Config{Sessions: authB, Accounts: accounts.New(accounts.Config{Store: stB, Auth: authB}), Store: stB, Fleet: fleetB})
	if err != nil {
		t.Fatal(err)
	}
	hB := apitest.Wrap(t, b)
	vm := "/api/v1/pve/vm/" + itoa(sim.id) + "/pve1/100"
	onB := func(token string) int {
		w := httptest.NewRecorder()
		hB.ServeHTTP(w, bearerReq("GET", vm, token, ""))
		return w.Code
	}
	waitOnB := func(token string, want int, what string) {
		t.Helper()
		took := testkit.Until(t, what+": replica B answering "+strconv.Itoa(want), func() bool { return onB(token) == want })
		t.Logf("%s: %d on replica B after %v", what, want, took.Round(time.Millisecond))
	}
	newToken := func(name string) (string, string) {
		t.Helper()
		w := e.send(bearerReq("POST", "/api/v1/user/tokens", e.tokens["op"], `{"name":"`+name+`"}`))
		var c createdToken
		if w.Code != 200 || json.Unmarshal(envelopeOf(t, w).Data, &c) != nil {
			t.Fatalf("create token: %d %s", w.Code, w.Body)
		}
		if got := onB(c.Token); got != 200 {
			t.Fatalf("the new token on B: %d", got)
		}
		return c.ID, c.Token
	}

	id, tok := newToken("one")
	if w := e.send(bearerReq("DELETE", "/api/v1/user/tokens/"+id, e.tokens["op"], "")); w.Code != 200 {
		t.Fatalf("revoke on A: %d", w.Code)
	}
	waitOnB(tok, 401, "revoked on A")

	_, tok = newToken("two")
	if w := e.do("admin", "DELETE", "/api/v1/clusters/"+itoa(sim.id)+"/grants/"+itoa(op.ID), ""); w.Code != 200 {
		t.Fatalf("remove the grant on A: %d", w.Code)
	}
	waitOnB(tok, 404, "the owner's grant removed on A")
	e.grant("op", "A", fleet.GrantOperator)
	waitOnB(tok, 200, "the grant back")

	if w := e.do("admin", "PATCH", "/api/v1/users/"+itoa(op.ID), `{"disabled":true}`); w.Code != 200 {
		t.Fatalf("disable on A: %d", w.Code)
	}
	waitOnB(tok, 401, "the owner disabled on A")
}
