package httpapi

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/apitest"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/testkit"
)

// docs/security.md items 6, 7, 10, 11 and 29 over HTTP, on every route of the route table (a
// loop over it, not a sample): a token whose session was rotated, replayed,
// logged out, ended by its user or an admin, or whose user was disabled, demoted,
// deleted or changed their password elsewhere, gets on every authenticated route
// (and at /user/refresh) the one 401 a request without a token gets, byte for byte.

// tokenRoutes are the routes that read a token: every authenticated one and, last,
// /user/refresh, which takes the token itself. Refresh goes last because a refused
// refresh reads the session from the store and marks it ended in the cache: every
// other route must prove that the revocation itself reached the cache.
func tokenRoutes(rs []route) []route {
	var out []route
	var refresh *route
	for _, rt := range rs {
		switch {
		case rt.pattern == "/api/v1/user/refresh":
			refresh = &rt
		case rt.access != public:
			out = append(out, rt)
		}
	}
	return append(out, *refresh)
}

// routeRequest is a request to rt with token: a sample JSON body where the route
// takes one, so that nothing but the token can fail it.
func routeRequest(rt route, vals routeVals, token string) *http.Request {
	key := rt.method + " " + rt.pattern
	var r *http.Request
	if body, ok := sampleBodies[key]; ok {
		r = httptest.NewRequest(rt.method, concrete(rt.pattern, vals), strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
	} else {
		r = httptest.NewRequest(rt.method, concrete(rt.pattern, vals), nil)
	}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return r
}

// deadToken is a way to kill a token, and the docs/security.md item it proves.
type deadToken struct {
	name string
	item string
	kill func(t *testing.T, e *vmEnv, user accounts.User, token string) (dead string)
}

func (e *vmEnv) callOK(user, method, path, body string) {
	e.t.Helper()
	if a := e.call(user, method, path, body); a.status != 200 {
		e.t.Fatalf("%s %s as %s: %d %s", method, path, user, a.status, a.raw)
	}
}

var deadTokens = []deadToken{
	{"rotated by a refresh", "6", func(t *testing.T, e *vmEnv, u accounts.User, tok string) string {
		if _, code := e.refreshHTTP(tok); code != 200 {
			t.Fatalf("refresh: %d", code)
		}
		return tok
	}},
	{"newest token of a session whose old token was replayed", "7", func(t *testing.T, e *vmEnv, u accounts.User, tok string) string {
		t1, _ := e.refreshHTTP(tok)
		t2, _ := e.refreshHTTP(t1)
		if _, code := e.refreshHTTP(tok); code != 401 {
			t.Fatalf("replay: %d", code)
		}
		return t2
	}},
	{"logged out", "10", func(t *testing.T, e *vmEnv, u accounts.User, tok string) string {
		if w := e.send(bearerReq("POST", "/api/v1/user/logout", tok, "")); w.Code != 200 {
			t.Fatalf("logout: %d", w.Code)
		}
		return tok
	}},
	{"session ended by its user from another session", "29", func(t *testing.T, e *vmEnv, u accounts.User, tok string) string {
		sid := e.current(tok)
		other := e.loginAs(u.Email, "other")
		if w := e.send(bearerReq("DELETE", "/api/v1/user/sessions/"+sid, other, "")); w.Code != 200 {
			t.Fatalf("end: %d %s", w.Code, w.Body)
		}
		return tok
	}},
	{"session ended by an admin", "11, 29", func(t *testing.T, e *vmEnv, u accounts.User, tok string) string {
		sid := e.current(tok)
		path := "/api/v1/users/" + strconv.FormatInt(u.ID, 10) + "/sessions/" + sid
		if w := e.send(bearerReq("DELETE", path, e.tokens["root"], "")); w.Code != 200 {
			t.Fatalf("end: %d %s", w.Code, w.Body)
		}
		return tok
	}},
	{"user disabled", "11", func(t *testing.T, e *vmEnv, u accounts.User, tok string) string {
		e.callOK("root", "PATCH", "/api/v1/users/"+strconv.FormatInt(u.ID, 10), `{"disabled":true}`)
		return tok
	}},
	{"user's role changed", "11", func(t *testing.T, e *vmEnv, u accounts.User, tok string) string {
		e.callOK("root", "PATCH", "/api/v1/users/"+strconv.FormatInt(u.ID, 10), `{"role":"admin"}`)
		return tok
	}},
	{"user deleted", "11", func(t *testing.T, e *vmEnv, u accounts.User, tok string) string {
		e.callOK("root", "DELETE", "/api/v1/users/"+strconv.FormatInt(u.ID, 10), "")
		return tok
	}},
	{"password changed in another session", "11", func(t *testing.T, e *vmEnv, u accounts.User, tok string) string {
		other := e.loginAs(u.Email, "other")
		w := e.send(bearerReq("POST", "/api/v1/user/password", other,
			`{"currentPassword":"`+envPassword+`","newPassword":"another long passphrase 77"}`))
		if w.Code != 200 {
			t.Fatalf("password: %d %s", w.Code, w.Body)
		}
		return tok
	}},
}

// TestDeadTokensFailOnEveryRoute (docs/security.md items 6, 7, 10, 11, 29): every way a token dies makes it fail on every
// route with the exact answer of a request without a token, while a live token of
// the same kind of user gets past authentication on each of them.
func TestDeadTokensFailOnEveryRoute(t *testing.T) {
	e := newVMEnv(t, 1000)
	h := apitest.Wrap(t, e.api)
	vals := e.vals()
	routes := tokenRoutes(e.allRoutes())
	if len(routes) < 30 {
		t.Fatalf("only %d routes read a token", len(routes))
	}
	serve := func(r *http.Request) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	// Without a token: the one 401 of each route.
	want := map[string]string{}
	for _, rt := range routes {
		w := serve(routeRequest(rt, vals, ""))
		if w.Code != 401 {
			t.Fatalf("%s %s without a token: %d", rt.method, rt.pattern, w.Code)
		}
		want[rt.method+" "+rt.pattern] = comparable(w)
	}

	// A live token gets past authentication on every route (without acting: a
	// body it may not send, a role it lacks or a session that does not exist).
	e.addUser("live", accounts.RoleUser)
	for _, rt := range routes {
		r := routeRequest(rt, vals, e.tokens["live"])
		switch {
		case takesBody(rt.method): // 415 (or 403): nothing acts, not even a logout
			r = httptest.NewRequest(rt.method, concrete(rt.pattern, vals), strings.NewReader("{}"))
			r.Header.Set("Content-Type", "text/plain")
		case rt.method == "DELETE" && rt.pattern == "/api/v1/user/sessions/{id}":
			r = httptest.NewRequest("DELETE", "/api/v1/user/sessions/no-such-session", nil)
		}
		r.Header.Set("Authorization", "Bearer "+e.tokens["live"])
		if w := serve(r); w.Code == 401 {
			t.Errorf("%s %s with a live token: 401", rt.method, rt.pattern)
		}
	}

	for i, d := range deadTokens {
		t.Run(d.name, func(t *testing.T) {
			name := "dead" + strconv.Itoa(i)
			u := e.addUser(name, accounts.RoleUser)
			tok := d.kill(t, e, u, e.tokens[name])
			for _, rt := range routes {
				w := serve(routeRequest(rt, vals, tok))
				if got := comparable(w); got != want[rt.method+" "+rt.pattern] {
					t.Errorf("docs/security.md %s: %s %s: %s\nwant the answer without a token: %s", d.item, rt.method, rt.pattern,
						got, want[rt.method+" "+rt.pattern])
				}
			}
		})
	}
}

// TestEndedSessionReachesOtherReplicas (docs/security.md item 29): a session ended on one
// replica fails at once there and, through the store's change feed, on another
// replica that had it cached.
func TestEndedSessionReachesOtherReplicas(t *testing.T) {
	e := newTestEnv(t)
	e.addUser("ann", accounts.RoleUser)
	tok := e.tokens["ann"]
	// Replica B: its own auth service and server on the same store.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sealer, err := seal.New(bytes.Repeat([]byte{5}, seal.KeySize)) // the env's: replicas share the key file
	if err != nil {
		t.Fatal(err)
	}
	authB, err := auth.New(ctx, e.store, auth.Config{Argon2: auth.Params{Memory: 8, Time: 1, Threads: 1, KeyLen: 32, SaltLen: 16},
		Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	defer authB.Close()
	go authB.Run(ctx)
	cfgB := e.apiConfig()
	cfgB.Sessions = authB
	cfgB.Accounts = accounts.New(accounts.Config{Store: e.store, Auth: authB})
	b, err := New(cfgB)
	if err != nil {
		t.Fatal(err)
	}
	onB := func() int {
		w := httptest.NewRecorder()
		apitest.Wrap(t, b).ServeHTTP(w, bearerReq("GET", "/api/v1/user/me", tok, ""))
		return w.Code
	}
	if c := onB(); c != 200 { // now cached on B
		t.Fatalf("on B before: %d", c)
	}
	sid := e.current(tok)
	if w := e.send(bearerReq("DELETE", "/api/v1/user/sessions/"+sid, tok, "")); w.Code != 200 {
		t.Fatalf("end on A: %d", w.Code)
	}
	if c := e.meStatus(tok); c != 401 {
		t.Errorf("on A right after: %d", c)
	}
	testkit.Until(t, "replica B refusing the ended session", func() bool { return onB() == 401 })
}
