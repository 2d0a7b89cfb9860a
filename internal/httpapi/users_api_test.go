package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/vmgate/vmgate/api"
	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/apitest"
	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/testkit"
)

// send serves r through the checked handler.
func (e *testEnv) send(r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w
}

func bearerReq(method, path, token, body string) *http.Request {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return r
}

// loginHTTP logs in through the API and returns the token.
func (e *testEnv) loginHTTP(email, password string) (string, *httptest.ResponseRecorder) {
	e.t.Helper()
	w := e.send(bearerReq("POST", "/api/v1/user/login", "", fmt.Sprintf(`{"email":%q,"password":%q}`, email, password)))
	if w.Code != http.StatusOK {
		return "", w
	}
	var d struct {
		Token string `json:"token"`
	}
	json.Unmarshal(envelopeOf(e.t, w).Data, &d)
	return d.Token, w
}

func (e *testEnv) refreshHTTP(token string) (string, int) {
	w := e.send(bearerReq("POST", "/api/v1/user/refresh", token, ""))
	if w.Code != http.StatusOK {
		return "", w.Code
	}
	var d struct {
		Token string `json:"token"`
	}
	json.Unmarshal(envelopeOf(e.t, w).Data, &d)
	return d.Token, w.Code
}

func (e *testEnv) meStatus(token string) int {
	return e.send(bearerReq("GET", "/api/v1/user/me", token, "")).Code
}

// TestTokenChainOverHTTP covers docs/security.md items 6, 7, 10 and 17 at the HTTP layer.
func TestTokenChainOverHTTP(t *testing.T) {
	e := newTestEnv(t)
	e.addUser("ann", accounts.RoleUser)
	t0, w := e.loginHTTP("ann@example.org", envPassword)
	if t0 == "" {
		t.Fatalf("login: %d %s", w.Code, w.Body)
	}
	if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
		t.Errorf("login Cache-Control = %q, want no-store", cc)
	}
	t1, code := e.refreshHTTP(t0)
	if code != 200 {
		t.Fatalf("refresh T0: %d", code)
	}
	// The old token fails at once on every route, /user/refresh included.
	if c := e.meStatus(t0); c != 401 {
		t.Errorf("T0 after rotation on /user/me: %d", c)
	}
	t2, code := e.refreshHTTP(t1)
	if code != 200 {
		t.Fatalf("refresh T1: %d", code)
	}
	if c := e.meStatus(t2); c != 200 {
		t.Fatalf("T2 on /user/me: %d", c)
	}
	// Replaying T0 (two generations old) is theft: the whole session dies.
	if _, code := e.refreshHTTP(t0); code != 401 {
		t.Fatalf("replayed T0: %d, want 401", code)
	}
	if c := e.meStatus(t2); c != 401 {
		t.Errorf("T2 after the replay of T0: %d, want 401 (session revoked)", c)
	}
	recs, _ := e.trail.List(context.Background(), 20, 0)
	if !slices.ContainsFunc(recs, func(a audit.Entry) bool { return a.Action == "auth.token_reuse" }) {
		t.Error("no auth.token_reuse audit record")
	}

	// Logout is immediate; a second logout with the same token is 401.
	t3, _ := e.loginHTTP("ann@example.org", envPassword)
	if w := e.send(bearerReq("POST", "/api/v1/user/logout", t3, "")); w.Code != 200 {
		t.Fatalf("logout: %d %s", w.Code, w.Body)
	}
	if c := e.meStatus(t3); c != 401 {
		t.Errorf("token after logout: %d", c)
	}
	if w := e.send(bearerReq("POST", "/api/v1/user/logout", t3, "")); w.Code != 401 {
		t.Errorf("second logout: %d, want 401", w.Code)
	}
}

// comparable strips the headers that differ between any two answers.
func comparable(w *httptest.ResponseRecorder) string {
	h := w.Header().Clone()
	h.Del("X-Request-Id")
	h.Del("Date")
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k+"="+strings.Join(h[k], ","))
	}
	slices.Sort(keys)
	return fmt.Sprintf("%d|%s|%s", w.Code, strings.Join(keys, ";"), w.Body.String())
}

// TestOneAnswerForEveryAuthFailure: bad credentials of any kind look the same
// (docs/security.md items 1, 4, 14).
func TestOneAnswerForEveryAuthFailure(t *testing.T) {
	e := newTestEnv(t)
	e.addUser("bob", accounts.RoleUser)
	tok, _ := e.loginHTTP("bob@example.org", envPassword)
	parts := strings.Split(tok, ".")

	var answers []string
	for name, r := range map[string]*http.Request{
		"no header":    bearerReq("GET", "/api/v1/user/me", "", ""),
		"garbage":      bearerReq("GET", "/api/v1/user/me", "garbage", ""),
		"two segments": bearerReq("GET", "/api/v1/user/me", parts[0]+"."+parts[1], ""),
		"stripped sig": bearerReq("GET", "/api/v1/user/me", parts[0]+"."+parts[1]+".", ""),
		"huge":         bearerReq("GET", "/api/v1/user/me", strings.Repeat("a", 5000), ""),
		"basic scheme": func() *http.Request {
			r := bearerReq("GET", "/api/v1/user/me", "", "")
			r.SetBasicAuth("bob", "x")
			return r
		}(),
		"token in query":   bearerReq("GET", "/api/v1/user/me?access_token="+tok+"&token="+tok, "", ""),
		"refresh garbage":  bearerReq("POST", "/api/v1/user/refresh", "garbage", ""),
		"logout no header": bearerReq("POST", "/api/v1/user/logout", "", ""),
	} {
		w := e.send(r)
		if w.Code != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", name, w.Code)
		}
		answers = append(answers, comparable(w))
	}
	slices.Sort(answers)
	if answers = slices.Compact(answers); len(answers) != 1 {
		t.Errorf("token failures differ:\n%s", strings.Join(answers, "\n"))
	}

	// Unknown e-mail and wrong password: one status, body and header set.
	_, unknown := e.loginHTTP("nobody@example.org", envPassword)
	_, wrong := e.loginHTTP("bob@example.org", envPassword+"x")
	if unknown.Code != 401 || comparable(unknown) != comparable(wrong) {
		t.Errorf("login failures differ:\n%s\n%s", comparable(unknown), comparable(wrong))
	}
}

// TestAccountChangesEndSessions covers docs/security.md item 11 over HTTP.
func TestAccountChangesEndSessions(t *testing.T) {
	e := newTestEnv(t)
	e.addUser("root", accounts.RoleAdmin)
	carl := e.addUser("carl", accounts.RoleUser)
	other, _ := e.loginHTTP("carl@example.org", envPassword)

	// A password change ends the user's other sessions, not the current one.
	w := e.send(bearerReq("POST", "/api/v1/user/password", e.tokens["carl"],
		`{"currentPassword":"`+envPassword+`","newPassword":"a much longer new passphrase"}`))
	if w.Code != 200 {
		t.Fatalf("password change: %d %s", w.Code, w.Body)
	}
	if c := e.meStatus(other); c != 401 {
		t.Errorf("other session after password change: %d", c)
	}
	if c := e.meStatus(e.tokens["carl"]); c != 200 {
		t.Errorf("current session after password change: %d", c)
	}
	// A wrong current password is refused.
	w = e.send(bearerReq("POST", "/api/v1/user/password", e.tokens["carl"],
		`{"currentPassword":"nope nope nope nope","newPassword":"another long passphrase"}`))
	if w.Code == 200 {
		t.Error("password change with a wrong current password succeeded")
	}

	// Disabling by an admin revokes at once.
	w = e.send(bearerReq("PATCH", fmt.Sprintf("/api/v1/users/%d", carl.ID), e.tokens["root"], `{"disabled":true}`))
	if w.Code != 200 {
		t.Fatalf("disable: %d %s", w.Code, w.Body)
	}
	if c := e.meStatus(e.tokens["carl"]); c != 401 {
		t.Errorf("token of a disabled user: %d", c)
	}
	if tok, w := e.loginHTTP("carl@example.org", "a much longer new passphrase"); tok != "" || w.Code != 401 {
		t.Errorf("a disabled user logged in: %d", w.Code)
	}

	// Deleting revokes too; the last admin cannot be removed.
	dan := e.addUser("dan", accounts.RoleUser)
	if w := e.send(bearerReq("DELETE", fmt.Sprintf("/api/v1/users/%d", dan.ID), e.tokens["root"], "")); w.Code != 200 {
		t.Fatalf("delete: %d %s", w.Code, w.Body)
	}
	if c := e.meStatus(e.tokens["dan"]); c != 401 {
		t.Errorf("token of a deleted user: %d", c)
	}
	root := e.users["root"]
	w = e.send(bearerReq("DELETE", fmt.Sprintf("/api/v1/users/%d", root.ID), e.tokens["root"], ""))
	if env := envelopeOf(t, w); w.Code != 409 || env.Reason != "last_admin" {
		t.Errorf("deleting the last admin: %d %s", w.Code, w.Body)
	}
	// Non-admins cannot manage users (BFLA).
	e.addUser("eve", accounts.RoleUser)
	for _, r := range []*http.Request{
		bearerReq("GET", "/api/v1/users", e.tokens["eve"], ""),
		bearerReq("POST", "/api/v1/users", e.tokens["eve"], `{"email":"x@example.org","password":"long enough password"}`),
		bearerReq("GET", "/api/v1/audit", e.tokens["eve"], ""),
	} {
		if w := e.send(r); w.Code != 403 {
			t.Errorf("%s %s as a user: %d, want 403", r.Method, r.URL.Path, w.Code)
		}
	}
}

// TestUserAdminRoutes walks the admin's /users routes.
func TestUserAdminRoutes(t *testing.T) {
	e := newTestEnv(t)
	e.addUser("root", accounts.RoleAdmin)
	tok := e.tokens["root"]
	w := e.send(bearerReq("POST", "/api/v1/users", tok, `{"email":"New@Example.org","nickname":"N","password":"a good long passphrase","role":"user"}`))
	if w.Code != 200 {
		t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	var u userJSON
	json.Unmarshal(envelopeOf(t, w).Data, &u)
	if u.Email != "new@example.org" || u.Role != "user" {
		t.Errorf("created %+v", u)
	}
	if strings.Contains(w.Body.String(), "argon2") {
		t.Error("the password hash reached the client")
	}
	if w := e.send(bearerReq("POST", "/api/v1/users", tok, `{"email":"new@example.org","password":"a good long passphrase"}`)); w.Code != 409 {
		t.Errorf("duplicate e-mail: %d", w.Code)
	}
	if w := e.send(bearerReq("POST", "/api/v1/users", tok, `{"email":"weak@example.org","password":"password"}`)); w.Code != 400 {
		t.Errorf("weak password: %d %s", w.Code, w.Body)
	}
	if w := e.send(bearerReq("GET", fmt.Sprintf("/api/v1/users/%d", u.ID), tok, "")); w.Code != 200 {
		t.Errorf("get: %d", w.Code)
	}
	w = e.send(bearerReq("GET", "/api/v1/users", tok, ""))
	var all []userJSON
	if err := json.Unmarshal(envelopeOf(t, w).Data, &all); err != nil || w.Code != 200 || len(all) != 2 ||
		all[0].Email != "root@example.org" || all[1].Email != "new@example.org" {
		t.Errorf("list: %d %s", w.Code, w.Body)
	}
	if w := e.send(bearerReq("GET", "/api/v1/users?role=admin", tok, "")); w.Code != 400 {
		t.Errorf("list with an unknown query parameter: %d, want 400", w.Code)
	}
	for _, bad := range []string{"0", "abc", "-1", "99999999999999999999"} {
		if w := e.send(bearerReq("GET", "/api/v1/users/"+bad, tok, "")); w.Code != 400 {
			t.Errorf("GET /users/%s: %d, want 400", bad, w.Code)
		}
	}
	if w := e.send(bearerReq("GET", "/api/v1/users/4242", tok, "")); w.Code != 404 {
		t.Errorf("missing user: %d", w.Code)
	}
	if w := e.send(bearerReq("PATCH", fmt.Sprintf("/api/v1/users/%d", u.ID), tok, `{"role":"superuser"}`)); w.Code != 400 {
		t.Errorf("bad role: %d", w.Code)
	}
	if w := e.send(bearerReq("GET", "/api/v1/audit?limit=5", tok, "")); w.Code != 200 {
		t.Errorf("audit: %d", w.Code)
	}
}

// TestStrictInput: bodies, sizes, methods and unknown routes (docs/design.md §3, docs/security.md items 21, 22).
func TestStrictInput(t *testing.T) {
	e := newTestEnv(t)
	big := `{"email":"a@b.c","password":"` + strings.Repeat("x", 70<<10) + `"}`
	for _, c := range []struct {
		name, method, path, body, ctype string
		want                            int
		reason                          string
	}{
		{"unknown field", "POST", "/api/v1/user/login", `{"email":"a@b.c","password":"x","admin":true}`, "application/json", 400, "invalid_request"},
		{"wrong type", "POST", "/api/v1/user/login", `{"email":1,"password":"x"}`, "application/json", 400, "invalid_request"},
		{"not json", "POST", "/api/v1/user/login", `email=a`, "application/json", 400, "invalid_request"},
		{"two objects", "POST", "/api/v1/user/login", `{"email":"a@b.c","password":"x"}{}`, "application/json", 400, "invalid_request"},
		{"empty", "POST", "/api/v1/user/login", ``, "application/json", 400, "invalid_request"},
		{"array", "POST", "/api/v1/user/login", `[]`, "application/json", 400, "invalid_request"},
		{"form content type", "POST", "/api/v1/user/login", `{"email":"a@b.c","password":"x"}`, "application/x-www-form-urlencoded", 415, "unsupported_media_type"},
		{"too large", "POST", "/api/v1/user/login", big, "application/json", 413, "payload_too_large"},
		{"unknown route", "GET", "/api/v1/nope", "", "", 404, "not_found"},
		{"wrong method", "DELETE", "/api/v1/user/login", "", "", 405, "method_not_allowed"},
	} {
		r := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
		if c.ctype != "" {
			r.Header.Set("Content-Type", c.ctype)
		}
		w := e.send(r)
		env := envelopeOf(t, w)
		if w.Code != c.want || env.Reason != c.reason {
			t.Errorf("%s: %d %s, want %d %s", c.name, w.Code, w.Body, c.want, c.reason)
		}
		if c.want == 405 && w.Header().Get("Allow") != "POST" {
			t.Errorf("%s: Allow = %q", c.name, w.Header().Get("Allow"))
		}
	}
}

// TestRequestIDAndPanic: request ids are honoured or made; a panic is a bare 500.
func TestRequestIDAndPanic(t *testing.T) {
	e := newTestEnv(t)
	r := httptest.NewRequest("GET", "/healthz", nil)
	r.Header.Set("X-Request-Id", "abc-123")
	if w := e.send(r); w.Header().Get("X-Request-Id") != "abc-123" {
		t.Errorf("request id not honoured: %q", w.Header().Get("X-Request-Id"))
	}
	r = httptest.NewRequest("GET", "/healthz", nil)
	r.Header.Set("X-Request-Id", "bad id\twith junk")
	if w := e.send(r); w.Header().Get("X-Request-Id") == "" || strings.Contains(w.Header().Get("X-Request-Id"), " ") {
		t.Errorf("bad request id kept: %q", w.Header().Get("X-Request-Id"))
	}
	boom := e.api.outer(newMux([]route{{"GET", "/boom", public, func(http.ResponseWriter, *http.Request) error {
		panic("secret detail")
	}}}, e.api.wrap, nil))
	w := httptest.NewRecorder()
	boom.ServeHTTP(w, httptest.NewRequest("GET", "/boom", nil))
	if w.Code != 500 || strings.Contains(w.Body.String(), "secret") {
		t.Errorf("panic answer: %d %s", w.Code, w.Body)
	}
}

// TestOperationsEndpoints: health, readiness, metrics and the served OpenAPI document.
func TestOperationsEndpoints(t *testing.T) {
	e := newTestEnv(t)
	// Without a document the route says so; with one it serves it as it was given.
	if w := e.send(httptest.NewRequest("GET", "/api/v1/openapi.json", nil)); w.Code != 404 {
		t.Errorf("openapi.json without a document: %d %s", w.Code, w.Body)
	}
	spec, err := api.OpenAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.apiConfig()
	cfg.OpenAPIJSON = spec
	withDoc, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	apitest.Wrap(t, withDoc).ServeHTTP(w, httptest.NewRequest("GET", "/api/v1/openapi.json", nil))
	if w.Code != 200 || !bytes.Equal(w.Body.Bytes(), spec) || w.Header().Get("Content-Type") != "application/json" {
		t.Errorf("openapi.json: %d %s %.80s", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	e.addUser("ops", accounts.RoleUser)
	e.loginHTTP("ops@example.org", "wrong password here")
	for _, p := range []string{"/healthz", "/readyz"} {
		if w := e.send(httptest.NewRequest("GET", p, nil)); w.Code != 200 {
			t.Errorf("%s: %d", p, w.Code)
		}
	}
	w = e.send(fromLoopback(httptest.NewRequest("GET", "/metrics", nil)))
	for _, want := range []string{
		`vmgate_http_requests_total{method="GET",route="GET /healthz",status="200"}`,
		`vmgate_http_request_duration_seconds_bucket`,
		`vmgate_active_sessions 1`,
	} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestServerLimits: the http.Server's timeouts and header limit (docs/security.md items 4, 22).
func TestServerLimits(t *testing.T) {
	e := newTestEnv(t)
	hs := NewHTTPServer("127.0.0.1:0", e.h, e.api.log)
	if hs.ReadHeaderTimeout <= 0 || hs.ReadHeaderTimeout > 5*time.Second || hs.ReadTimeout <= 0 ||
		hs.WriteTimeout <= 0 || hs.IdleTimeout <= 0 || hs.MaxHeaderBytes > 16<<10 {
		t.Fatalf("server limits: %+v", hs)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 40<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("40 KiB of headers: %d, want 431", resp.StatusCode)
	}
}

// TestLoginFloodIsBoundedAndQueued: docs/security.md item 16, proven by counting, not timing
// (the speed is BenchmarkLoginFlood's). A wrong-password flood from 50 addresses
// meets a hasher that holds every hash until released: exactly MaxConcurrentHashes
// hashes run (so the hash memory in use is that many times Argon2.Memory, however
// large the flood), HashQueue more logins wait their turn, every other attempt is
// answered 429 with Retry-After at once, an authenticated GET is answered meanwhile,
// and when the hashes are released every queued login gets its answer.
func TestLoginFloodIsBoundedAndQueued(t *testing.T) {
	const slots, queue, addresses = 2, 3, 50
	h := &heldHasher{gate: make(chan struct{})}
	params := auth.Params{Memory: 64, Time: 1, Threads: 1, KeyLen: 32, SaltLen: 16}
	e := newTestEnvWith(t, auth.Config{Argon2: params, PerAddressRate: rate.Inf, PerAddressBurst: 1,
		MaxConcurrentHashes: slots, HashQueue: queue, Hasher: h.derive, RefusalPause: -1})
	e.addUser("reader", accounts.RoleUser)
	h.hold.Store(true)

	attempt := func(i int) *httptest.ResponseRecorder {
		r := bearerReq("POST", "/api/v1/user/login", "", fmt.Sprintf(`{"email":"flood-%d@example.org","password":"not the password!"}`, i))
		r.RemoteAddr = fmt.Sprintf("198.51.100.%d:4000", i%addresses+1)
		return e.send(r)
	}
	queued := make(chan int, slots+queue)
	for i := range slots + queue {
		go func() { queued <- attempt(i).Code }()
	}
	// Full means the slots taken and the queue full (HashLoad) and every slot's
	// hash inside the hasher: a login holds its slot a moment before it gets
	// there, and the peak below counts only hashes that did.
	testkit.Eventually(t, "the flood filling the slots and the queue", func() error {
		if running, waiting := e.auth.HashLoad(); running != slots || waiting != queue || h.running.Load() != slots {
			return fmt.Errorf("%d running (%d hashing), %d waiting", running, h.running.Load(), waiting)
		}
		return nil
	})
	for i := slots + queue; i < 2*addresses; i++ {
		w := attempt(i)
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
			t.Fatalf("attempt %d with the queue full: %d, Retry-After %q", i, w.Code, w.Header().Get("Retry-After"))
		}
	}
	if code := e.meStatus(e.tokens["reader"]); code != http.StatusOK {
		t.Fatalf("authenticated GET during the flood: %d", code)
	}
	close(h.gate)
	for range slots + queue {
		if code := <-queued; code != http.StatusUnauthorized {
			t.Fatalf("a queued login answered %d, want 401", code)
		}
	}
	if peak := h.peak.Load(); peak != slots {
		t.Fatalf("%d hashes (%d KiB of argon2 memory) ran at once, want %d", peak, peak*int64(params.Memory), slots)
	}
}

// heldHasher is an auth.Config.Hasher that counts the hashes in flight and, while
// hold is set, keeps each one until gate is closed.
type heldHasher struct {
	hold          atomic.Bool
	gate          chan struct{}
	running, peak atomic.Int64
}

func (h *heldHasher) derive(pw, salt []byte, p auth.Params) []byte {
	n := h.running.Add(1)
	defer h.running.Add(-1)
	for old := h.peak.Load(); n > old && !h.peak.CompareAndSwap(old, n); old = h.peak.Load() {
	}
	if h.hold.Load() {
		<-h.gate
	}
	return auth.Argon2ID(pw, salt, p)
}
