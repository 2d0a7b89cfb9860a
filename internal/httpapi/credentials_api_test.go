package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/apitest"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/operations"
	"github.com/vmgate/vmgate/internal/vmops"
)

// managesCredentials says, from its method and path alone, whether a route
// creates, changes or deletes users, grants, API tokens, passwords or sessions,
// or reads tokens and sessions (docs/security.md item 32). It is written from the paths,
// not from the route table's access column, so that a new route under these
// paths is caught by TestCredentialRoutesRefuseAPITokens even when its access
// was forgotten.
func managesCredentials(method, pattern string) bool {
	switch {
	case pattern == "/api/v1/user/login" || pattern == "/api/v1/user/refresh":
		// Public: they take a password or a refresh token, never a bearer caller
		// (an API token at /user/refresh is one more token that failed).
		return false
	case strings.HasPrefix(pattern, "/api/v1/user/tokens"), strings.HasPrefix(pattern, "/api/v1/user/sessions"),
		strings.HasPrefix(pattern, "/api/v1/users/{id}/tokens"), strings.HasPrefix(pattern, "/api/v1/users/{id}/sessions"):
		return true // reading them too: a token's list is where a script would look for the next to take
	case strings.HasPrefix(pattern, "/api/v1/identity/group-mappings"):
		return true // reading them too: they say which group of the provider becomes an admin
	case strings.HasPrefix(pattern, "/api/v1/user/"), strings.HasPrefix(pattern, "/api/v1/users"),
		strings.HasPrefix(pattern, "/api/v1/clusters/") && strings.Contains(pattern, "/grants"):
		return method != http.MethodGet
	}
	return false
}

// fullRouteTable is every route, with every group of routes on.
func fullRouteTable() []route {
	s := &Server{fleet: (*fleet.Service)(nil), vms: (*vmops.Service)(nil), ops: (*operations.Service)(nil)}
	return s.routes()
}

// TestCredentialRoutesNeedALoginSession (docs/security.md item 32): the routes that manage
// credentials, as managesCredentials finds them by path, are exactly the routes
// of access session or adminSession: none is left to any token, and no other
// route refuses one.
func TestCredentialRoutesNeedALoginSession(t *testing.T) {
	t.Parallel()
	n := 0
	for _, rt := range fullRouteTable() {
		key := rt.method + " " + rt.pattern
		sessionOnly := rt.access == session || rt.access == adminSession
		creds := managesCredentials(rt.method, rt.pattern)
		if creds {
			n++
		}
		switch {
		case creds && !sessionOnly:
			t.Errorf("%s manages credentials but an API token may call it: give it access session or adminSession, "+
				"and have its use case refuse a token itself", key)
		case !creds && sessionOnly:
			t.Errorf("%s refuses API tokens but manages no credential: is managesCredentials missing its path?", key)
		}
	}
	if n < 16 {
		t.Fatalf("only %d credential routes found: managesCredentials looks at the wrong paths", n)
	}
}

// credentialRequest is a request that a credential route would carry out for an
// admin's login session: with a valid path and body, so that a refusal is the
// caller's and nothing else's.
type credentialRequest struct {
	path   string
	bodies []string // one request each; none: one without a body
}

// TestCredentialRoutesRefuseAPITokens (docs/security.md item 32, docs/decisions/0038): an
// admin's API token without grants — the strongest token there is — gets 403
// session_required from every credential route (managesCredentials over the
// route table), each with a request that would succeed from the admin's login
// session: through the server, and straight to the route's handler with the
// route table's wall taken away, where the use case refuses it by itself.
// Afterwards nothing has changed: no user made, no password, role, flag or
// nickname changed, no token or session made or ended, no grant changed.
func TestCredentialRoutesRefuseAPITokens(t *testing.T) {
	e := newVMEnv(t, 1000)
	rootTok := e.newToken("root", "root-token", `{"name":"admin script"}`)
	opTok := e.newToken("op", "op-token", `{"name":"op script"}`)
	root, op, view := itoa(e.users["root"].ID), itoa(e.users["op"].ID), itoa(e.users["view"].ID)
	rootSession, opSession := e.current(e.tokens["root"]), e.current(e.tokens["op"])
	cid := itoa(e.cid)
	const newPassword = `"a brand new long passphrase 77"`
	mapping := e.call("root", "POST", "/api/v1/identity/group-mappings", `{"group":"ops","role":"user","grants":[{"clusterId":`+cid+`,"role":"viewer"}]}`).
		expect(t, http.StatusOK, "")
	var gm struct {
		ID int64 `json:"id"`
	}
	json.Unmarshal(mapping.env.Data, &gm)
	mappingPath := "/api/v1/identity/group-mappings/" + itoa(gm.ID)

	requests := map[string]credentialRequest{
		"POST /api/v1/user/logout":          {path: "/api/v1/user/logout"},
		"POST /api/v1/user/password":        {path: "/api/v1/user/password", bodies: []string{`{"currentPassword":"` + envPassword + `","newPassword":` + newPassword + `}`}},
		"GET /api/v1/user/sessions":         {path: "/api/v1/user/sessions"},
		"DELETE /api/v1/user/sessions/{id}": {path: "/api/v1/user/sessions/" + rootSession},
		"GET /api/v1/user/tokens":           {path: "/api/v1/user/tokens"},
		"POST /api/v1/user/tokens":          {path: "/api/v1/user/tokens", bodies: []string{`{"name":"another"}`}},
		"DELETE /api/v1/user/tokens/{id}":   {path: "/api/v1/user/tokens/" + rootTok.ID},
		"POST /api/v1/users": {path: "/api/v1/users",
			bodies: []string{`{"email":"mallory@example.org","password":` + newPassword + `,"role":"admin"}`}},
		"PATCH /api/v1/users/{id}": {path: "/api/v1/users/" + root, bodies: []string{
			`{"password":` + newPassword + `}`, `{"role":"user"}`, `{"disabled":true}`, `{"nickname":"Mallory"}`}},
		"DELETE /api/v1/users/{id}":                           {path: "/api/v1/users/" + op},
		"GET /api/v1/users/{id}/sessions":                     {path: "/api/v1/users/" + op + "/sessions"},
		"DELETE /api/v1/users/{id}/sessions/{sessionId}":      {path: "/api/v1/users/" + op + "/sessions/" + opSession},
		"GET /api/v1/users/{id}/tokens":                       {path: "/api/v1/users/" + op + "/tokens"},
		"DELETE /api/v1/users/{id}/tokens/{tokenId}":          {path: "/api/v1/users/" + op + "/tokens/" + opTok.ID},
		"PUT /api/v1/clusters/{clusterId}/grants/{userId}":    {path: "/api/v1/clusters/" + cid + "/grants/" + view, bodies: []string{`{"role":"operator"}`}},
		"DELETE /api/v1/clusters/{clusterId}/grants/{userId}": {path: "/api/v1/clusters/" + cid + "/grants/" + op},
		"GET /api/v1/identity/group-mappings":                 {path: "/api/v1/identity/group-mappings"},
		"POST /api/v1/identity/group-mappings": {path: "/api/v1/identity/group-mappings",
			bodies: []string{`{"group":"everyone","role":"admin"}`}},
		"PUT /api/v1/identity/group-mappings/{id}":    {path: mappingPath, bodies: []string{`{"group":"ops","role":"admin"}`}},
		"DELETE /api/v1/identity/group-mappings/{id}": {path: mappingPath},
		"PUT /api/v1/users/{id}/identities": {path: "/api/v1/users/" + view + "/identities",
			bodies: []string{`{"issuer":"https://idp.example","subject":"mallory"}`}},
	}

	// The use cases' own wall: every route's handler, called with the token's
	// principal and no access check before it.
	tokP, err := e.auth.Authenticate(context.Background(), rootTok.Token)
	if err != nil || !tokP.IsAdmin() {
		t.Fatalf("the admin's token: %+v %v", tokP, err)
	}
	bare := apitest.Wrap(t, e.api.outer(newMux(e.api.routes(), func(rt route) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ri := infoFrom(r)
			ri.pattern, ri.principal = rt.method+" "+rt.pattern, &tokP
			if err := rt.handle(w, r); err != nil {
				writeError(w, r, err)
			}
		})
	}, nil)))

	refused := 0
	for _, rt := range e.api.routes() {
		key := rt.method + " " + rt.pattern
		if !managesCredentials(rt.method, rt.pattern) {
			continue
		}
		req, ok := requests[key]
		if !ok {
			t.Errorf("%s manages credentials and has no request in this test: add one that an admin's session could make", key)
			continue
		}
		bodies := req.bodies
		if len(bodies) == 0 {
			bodies = []string{""}
		}
		for _, body := range bodies {
			e.call("root-token", rt.method, req.path, body).expect(t, http.StatusForbidden, errs.ReasonSessionRequired)
			w := e.doWith(bare, "", rt.method, req.path, body)
			if env := envelopeOf(t, w); w.Code != http.StatusForbidden || env.Reason != errs.ReasonSessionRequired {
				t.Errorf("%s %s without the route's wall: %d %s, want 403 %s from the use case", key, body, w.Code, w.Body,
					errs.ReasonSessionRequired)
			}
			refused++
		}
	}
	if refused < 19 {
		t.Fatalf("only %d requests refused", refused)
	}

	// Nothing changed.
	e.call("root", "GET", "/api/v1/user/me", "").expect(t, http.StatusOK, "")
	e.call("op", "GET", "/api/v1/user/me", "").expect(t, http.StatusOK, "")
	if _, w := e.loginHTTP("root@example.org", envPassword); w.Code != http.StatusOK {
		t.Fatalf("the admin's password changed: %d %s", w.Code, w.Body)
	}
	var users []userJSON
	if err := json.Unmarshal(e.call("root", "GET", "/api/v1/users", "").expect(t, http.StatusOK, "").env.Data, &users); err != nil {
		t.Fatal(err)
	}
	if len(users) != 4 {
		t.Fatalf("users: %+v", users)
	}
	for _, u := range users {
		if u.Disabled || u.Nickname != strings.TrimSuffix(u.Email, "@example.org") ||
			(u.Role == "admin") != (u.Email == "root@example.org") {
			t.Errorf("user changed: %+v", u)
		}
	}
	for user, want := range map[string]int{"root": 1, "op": 1} {
		var toks []createdToken
		json.Unmarshal(e.call(user, "GET", "/api/v1/user/tokens", "").expect(t, http.StatusOK, "").env.Data, &toks)
		if len(toks) != want {
			t.Errorf("%s's tokens: %+v", user, toks)
		}
	}
	e.call("root-token", "GET", e.vmPath("pve1", 100), "").expect(t, http.StatusOK, "")
	e.call("op-token", "GET", e.vmPath("pve1", 100), "").expect(t, http.StatusOK, "")
	e.call("view", "POST", e.vmPath("pve1", 100)+"/start", "").expect(t, http.StatusForbidden, "forbidden")
}

// TestRefreshAnswersAnAPITokenTheOne401 (docs/security.md items 1, 32): an API token at
// /user/refresh is answered exactly like a token that is not one: the one 401
// body, so the route tells nobody what kind of token it was given.
func TestRefreshAnswersAnAPITokenTheOne401(t *testing.T) {
	e := newVMEnv(t, 1000)
	tok := e.newToken("root", "root-token", `{"name":"script"}`)
	refresh := func(token string) *httptest.ResponseRecorder {
		return e.send(bearerReq("POST", "/api/v1/user/refresh", token, ""))
	}
	want := refresh("not-a-token-at-all")
	for _, token := range []string{tok.Token, "vmg_" + strings.Repeat("a", 49)} {
		got := refresh(token)
		if got.Code != http.StatusUnauthorized || got.Body.String() != want.Body.String() {
			t.Errorf("refresh with %.8s…: %d %s, want %d %s", token, got.Code, got.Body, want.Code, want.Body)
		}
	}
	// The token still works where it may.
	e.call("root-token", "GET", "/api/v1/users", "").expect(t, http.StatusOK, "")
}
