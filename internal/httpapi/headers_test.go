package httpapi

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/apitest"
)

// The tests of docs/security.md item 31 over HTTP: the headers of every answer, 415 for a
// body that is not JSON and 400 for duplicate and case-variant keys on every route
// of the route table, and /metrics for loopback clients only.

// routeVals are the path values the route loops put into each pattern.
type routeVals map[string]string

// concrete returns pattern with its {name} wildcards replaced by vals.
func concrete(pattern string, vals routeVals) string {
	for k, v := range vals {
		pattern = strings.ReplaceAll(pattern, "{"+k+"}", v)
	}
	if strings.Contains(pattern, "{") {
		panic("no value for a wildcard of " + pattern)
	}
	return pattern
}

// takesBody is true for the methods whose bodies need Content-Type: application/json.
func takesBody(method string) bool { return method == "POST" || method == "PUT" || method == "PATCH" }

// sampleBodies are bodies each route that decodes one accepts the shape of, by
// "METHOD pattern"; a POST, PUT or PATCH route not listed takes no body. The loops
// fail on a route that is in neither list, so a new route cannot slip past them.
var sampleBodies = map[string]string{
	"POST /api/v1/user/login":                                        `{"email":"x@example.org","password":"pw"}`,
	"POST /api/v1/user/password":                                     `{"currentPassword":"a","newPassword":"b"}`,
	"POST /api/v1/users":                                             `{"email":"x@example.org","password":"pw"}`,
	"PATCH /api/v1/users/{id}":                                       `{"nickname":"n"}`,
	"POST /api/v1/clusters":                                          `{"name":"n"}`,
	"POST /api/v1/notifications/targets":                             `{"name":"n"}`,
	"PATCH /api/v1/notifications/targets/{id}":                       `{"name":"n"}`,
	"PATCH /api/v1/clusters/{clusterId}":                             `{"name":"n"}`,
	"PUT /api/v1/clusters/{clusterId}/grants/{userId}":               `{"role":"viewer"}`,
	"POST /api/v1/user/tokens":                                       `{"name":"n"}`,
	"POST /api/v1/pve/vm/{clusterId}/{node}/{vmid}/migrate":          `{"target":"pve2"}`,
	"POST /api/v1/pve/lxc/{clusterId}/{node}/{vmid}/migrate":         `{"target":"pve2","restart":true}`,
	"POST /api/v1/pve/clusters/{clusterId}/nodes/{node}/evacuate":    `{"dryRun":true}`,
	"POST /api/v1/pve/clusters/{clusterId}/bulk/{action}":            `{"vmids":[100],"dryRun":true}`,
	"POST /api/v1/pve/clusters/{clusterId}/nodes/{node}/maintenance": `{"dryRun":true}`,
	"POST /api/v1/pve/clusters/{clusterId}/rolling-maintenance":      `{"dryRun":true}`,
	"POST /api/v1/identity/group-mappings":                           `{"group":"ops","role":"user"}`,
	"PUT /api/v1/identity/group-mappings/{id}":                       `{"group":"ops","role":"user"}`,
	"PUT /api/v1/users/{id}/identities":                              `{"issuer":"https://idp.example","subject":"s"}`,
	"POST /api/v1/pve/vm/{clusterId}/{node}/{vmid}/remote-migrate":   `{"targetCluster":"dev-b"}`,
	"POST /api/v1/pve/lxc/{clusterId}/{node}/{vmid}/remote-migrate":  `{"targetCluster":"dev-b"}`,
}

var noBodyRoutes = map[string]bool{
	"POST /api/v1/user/refresh":                                  true,
	"POST /api/v1/user/logout":                                   true,
	"POST /api/v1/pve/vm/{clusterId}/{node}/{vmid}/start":        true,
	"POST /api/v1/pve/lxc/{clusterId}/{node}/{vmid}/start":       true,
	"POST /api/v1/pve/lxc/{clusterId}/{node}/{vmid}/stop":        true,
	"POST /api/v1/pve/lxc/{clusterId}/{node}/{vmid}/reboot":      true,
	"POST /api/v1/pve/vm/{clusterId}/{node}/{vmid}/stop":         true,
	"POST /api/v1/pve/vm/{clusterId}/{node}/{vmid}/reboot":       true,
	"POST /api/v1/pve/vm/{clusterId}/{node}/{vmid}/suspend":      true,
	"POST /api/v1/pve/vm/{clusterId}/{node}/{vmid}/resume":       true,
	"POST /api/v1/pve/lxc/{clusterId}/{node}/{vmid}/suspend":     true, // not_offered, after the body is checked
	"POST /api/v1/pve/lxc/{clusterId}/{node}/{vmid}/resume":      true,
	"POST /api/v1/pve/operations/{id}/pause":                     true,
	"POST /api/v1/pve/operations/{id}/resume":                    true,
	"POST /api/v1/pve/clusters/{clusterId}/nodes/{node}/updates": true,
	"POST /api/v1/notifications/targets/{id}/test":               true,
	"POST /api/v1/notifications/deliveries/{id}/retry":           true,
}

// allRoutes is the route table of a server with every use case, VMs included.
func (e *vmEnv) allRoutes() []route { return e.api.routes() }

// vals are path values naming things that exist in the env.
func (e *vmEnv) vals() routeVals {
	return routeVals{"id": itoa(e.users["op"].ID), "userId": itoa(e.users["op"].ID), "clusterId": itoa(e.cid),
		"node": "pve1", "vmid": "100", "taskId": "UPID:pve1:0000B2C4:0001A3F1:6740A0B0:qmstart:100:root@pam:",
		"sessionId": "no-such-session", "tokenId": "nosuchtoken", "action": "start"}
}

// checkAPIHeaders fails unless h carries every header docs/security.md item 31 asks for.
func checkAPIHeaders(t *testing.T, what string, h http.Header) {
	t.Helper()
	for _, kv := range [][2]string{
		{"Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'"},
		{"X-Frame-Options", "DENY"},
		{"Referrer-Policy", "no-referrer"},
		{"Cross-Origin-Resource-Policy", "same-origin"},
		{"X-Content-Type-Options", "nosniff"},
		{"Cache-Control", "no-store"},
	} {
		if got := h.Values(kv[0]); len(got) != 1 || got[0] != kv[1] {
			t.Errorf("%s: %s = %q, want %q", what, kv[0], got, kv[1])
		}
	}
}

// TestSecurityHeadersOnEveryRoute (docs/security.md item 31): every route of the table
// answers with the headers, without a token and with an admin's; so do an unknown
// path, a wrong method and a refused body.
func TestSecurityHeadersOnEveryRoute(t *testing.T) {
	e := newVMEnv(t, 1000)
	h := apitest.Wrap(t, e.api)
	vals := e.vals()
	for _, rt := range e.allRoutes() {
		key := rt.method + " " + rt.pattern
		path := concrete(rt.pattern, vals)
		for _, user := range []string{"", "root"} {
			r := httptest.NewRequest(rt.method, path, nil)
			if rt.method == "GET" && rt.pattern == "/metrics" {
				r = fromLoopback(r)
			}
			if takesBody(rt.method) {
				// A refused body: the route's headers without acting.
				r = httptest.NewRequest(rt.method, path, strings.NewReader(`{}`))
				r.Header.Set("Content-Type", "text/plain")
			}
			if user != "" {
				r.Header.Set("Authorization", "Bearer "+e.tokens[user])
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			checkAPIHeaders(t, key+" as "+strconv.Quote(user)+" ("+strconv.Itoa(w.Code)+")", w.Header())
		}
	}
	for _, c := range []struct{ method, path string }{{"GET", "/api/v1/nope"}, {"GET", "/"}, {"PUT", "/healthz"}} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(c.method, c.path, nil))
		checkAPIHeaders(t, c.method+" "+c.path, w.Header())
	}
}

// TestBodiesNeedJSONOnEveryRoute (docs/security.md item 31): every POST, PUT and PATCH of the
// route table refuses a body without Content-Type: application/json with 415,
// before it acts, and accepts the type with a charset.
func TestBodiesNeedJSONOnEveryRoute(t *testing.T) {
	e := newVMEnv(t, 1000)
	h := apitest.Wrap(t, e.api)
	vals := e.vals()
	seen := 0
	for _, rt := range e.allRoutes() {
		if !takesBody(rt.method) {
			continue
		}
		seen++
		key := rt.method + " " + rt.pattern
		body, ok := sampleBodies[key]
		if !ok && !noBodyRoutes[key] {
			t.Errorf("%s is neither in sampleBodies nor in noBodyRoutes", key)
			continue
		}
		if !ok {
			body = `{}`
		}
		for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin1",
			"application/json; boundary=x", "application/jsonx", "multipart/form-data; boundary=x"} {
			r := httptest.NewRequest(rt.method, concrete(rt.pattern, vals), strings.NewReader(body))
			if ct != "" {
				r.Header.Set("Content-Type", ct)
			}
			r.Header.Set("Authorization", "Bearer "+e.tokens["root"])
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if env := envelopeOf(t, w); w.Code != 415 || env.Reason != "unsupported_media_type" {
				t.Errorf("%s with Content-Type %q: %d %s, want 415 unsupported_media_type", key, ct, w.Code, w.Body)
			}
		}
	}
	if seen < 13 {
		t.Errorf("only %d routes take a body", seen)
	}
	// The right type passes, a charset too (and so does no body without a type).
	w := e.send(func() *http.Request {
		r := httptest.NewRequest("POST", "/api/v1/user/login", strings.NewReader(`{"email":"x@example.org","password":"pw"}`))
		r.Header.Set("Content-Type", "Application/JSON; Charset=UTF-8")
		return r
	}())
	if w.Code != 401 {
		t.Errorf("login with a charset: %d %s, want 401", w.Code, w.Body)
	}
	if a := e.call("root", "POST", "/api/v1/user/refresh", ""); a.status != 200 {
		t.Errorf("refresh without a body or a type: %d %s", a.status, a.raw)
	}
}

// TestDuplicateAndCaseVariantKeysOnEveryRoute (docs/security.md item 31): on every route that
// takes a body, a key given twice and a key that matches a field only when case is
// ignored are 400 invalid_request before anything happens; a route that takes no
// body refuses either as a body.
func TestDuplicateAndCaseVariantKeysOnEveryRoute(t *testing.T) {
	e := newVMEnv(t, 1000)
	h := apitest.Wrap(t, e.api)
	vals := e.vals()
	auditBefore := len(e.auditRecords())
	for _, rt := range e.allRoutes() {
		if !takesBody(rt.method) {
			continue
		}
		key := rt.method + " " + rt.pattern
		body, ok := sampleBodies[key]
		if !ok {
			body = `{"x":1}`
		}
		// The first key of the sample, given twice, and in upper case.
		k := body[2 : strings.Index(body[2:], `"`)+2]
		v := strings.TrimSuffix(body[strings.Index(body, ":")+1:], "}")
		if i := strings.Index(v, `,"`); i >= 0 {
			v = v[:i]
		}
		for name, b := range map[string]string{
			"duplicate":    `{"` + k + `":` + v + `,"` + k + `":` + v + `}`,
			"case variant": `{"` + strings.ToUpper(k[:1]) + k[1:] + `":` + v + `}`,
			"all caps":     `{"` + strings.ToUpper(k) + `":` + v + `}`,
		} {
			r := httptest.NewRequest(rt.method, concrete(rt.pattern, vals), strings.NewReader(b))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Authorization", "Bearer "+e.tokens["root"])
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if env := envelopeOf(t, w); w.Code != 400 || env.Reason != "invalid_request" {
				t.Errorf("%s, %s key %s: %d %s, want 400 invalid_request", key, name, b, w.Code, w.Body)
			}
		}
	}
	if n := len(e.auditRecords()); n != auditBefore {
		t.Errorf("refused bodies left %d audit records: something acted", n-auditBefore)
	}
}

// auditRecords are every audit record so far.
func (e *testEnv) auditRecords() []string {
	recs, err := e.store.ListAudit(e.t.Context(), 500, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	out := make([]string, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.Action)
	}
	return out
}

// TestStrictKeysAtEveryDepth (docs/security.md item 31): checkKeys follows the target type into nested
// objects, arrays, maps and embedded structs.
func TestStrictKeysAtEveryDepth(t *testing.T) {
	type Inner struct {
		Name string `json:"name"`
		Tags []struct {
			Key string `json:"key"`
		} `json:"tags"`
	}
	type Embedded struct {
		Extra string `json:"extra"`
	}
	type outer struct {
		Embedded
		ID     int               `json:"id"`
		Inner  Inner             `json:"inner"`
		List   []Inner           `json:"list"`
		Ptr    *Inner            `json:"ptr"`
		Labels map[string]string `json:"labels"`
		Any    any               `json:"any"`
		Skip   string            `json:"-"`
		NoTag  string
	}
	typ := reflect.TypeFor[*outer]()
	for _, c := range []struct {
		body string
		ok   bool
	}{
		{`{"id":1,"inner":{"name":"a","tags":[{"key":"k"}]},"list":[{"name":"b"}],"ptr":{"name":"c"},"labels":{"a":"1","A":"2"},"any":{"x":1,"X":2},"extra":"e","NoTag":"n"}`, true},
		{`{"id":1,"id":2}`, false},
		{`{"ID":1}`, false},
		{`{"inner":{"name":"a","name":"b"}}`, false},
		{`{"inner":{"Name":"a"}}`, false},
		{`{"inner":{"tags":[{"key":"k","KEY":"k"}]}}`, false},
		{`{"inner":{"tags":[{"Key":"k"}]}}`, false},
		{`{"list":[{"name":"a"},{"NAME":"b"}]}`, false},
		{`{"ptr":{"nAme":"c"}}`, false},
		{`{"labels":{"a":"1","a":"2"}}`, false},
		{`{"any":{"deep":{"x":1,"x":2}}}`, false},
		{`{"Extra":"e"}`, false},
		{`{"notag":"n"}`, false},
		{`{"inner":{"name":"\u212a"},"in\u006eer":{}}`, false}, // "inner" escaped is the same key
		{`{"inner":{"tags":[{"\u212aey":"k"}]}}`, false},       // the Kelvin sign folds to k, as encoding/json matches it
		{`{"ınner":{}}`, true},                                 // dotless i folds to nothing of ours: the decoder calls it unknown
	} {
		err := checkKeys([]byte(c.body), typ)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok=%v", c.body, err, c.ok)
		}
	}
}

// TestMetricsOnlyForLoopback (docs/security.md item 31): /metrics answers loopback peers;
// anyone else, a client a trusted local proxy forwards for included, gets the 404
// of a path that does not exist, unless MetricsPublic; MetricsHandler serves it to
// all on a listener of its own.
func TestMetricsOnlyForLoopback(t *testing.T) {
	e := newTestEnv(t)
	unknown := e.send(httptest.NewRequest("GET", "/api/v1/nope", nil))
	for _, c := range []struct {
		name, peer, xff string
		want            int
	}{
		{"loopback v4", "127.0.0.1:5000", "", 200},
		{"loopback v6", "[::1]:5000", "", 200},
		{"remote", "192.0.2.7:5000", "", 404},
		{"remote v6", "[2001:db8::7]:5000", "", 404},
		{"mapped loopback", "[::ffff:127.0.0.1]:5000", "", 200},
	} {
		r := httptest.NewRequest("GET", "/metrics", nil)
		r.RemoteAddr = c.peer
		w := e.send(r)
		if w.Code != c.want {
			t.Errorf("%s: %d, want %d", c.name, w.Code, c.want)
		}
		if c.want == 404 && strings.Replace(w.Body.String(), "/metrics", "/api/v1/nope", 1) != unknown.Body.String() {
			t.Errorf("%s: %s is not the answer to an unknown path (%s)", c.name, w.Body, unknown.Body)
		}
	}

	// A reverse proxy on this host is a loopback peer; the client it forwards for is not.
	cfg := e.apiConfig()
	cfg.TrustedProxies = []string{"127.0.0.1"}
	proxied, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for xff, want := range map[string]int{"198.51.100.9": 404, "127.0.0.1": 200} {
		r := fromLoopback(httptest.NewRequest("GET", "/metrics", nil))
		r.Header.Set("X-Forwarded-For", xff)
		w := httptest.NewRecorder()
		apitest.Wrap(t, proxied).ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("via a local proxy for %s: %d, want %d", xff, w.Code, want)
		}
	}

	cfg = e.apiConfig()
	cfg.MetricsPublic = true
	public, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	apitest.Wrap(t, public).ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != 200 {
		t.Errorf("MetricsPublic from 192.0.2.1: %d", w.Code)
	}

	// Its own listener serves /metrics to every peer and nothing else.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := NewHTTPServer("", e.api.MetricsHandler(), nil)
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	for path, want := range map[string]int{"/metrics": 200, "/api/v1/user/me": 404, "/healthz": 404} {
		resp, err := http.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("metrics listener %s: %d %s, want %d", path, resp.StatusCode, b, want)
		}
		checkAPIHeaders(t, "metrics listener "+path, resp.Header)
	}
}

// TestUIHook (docs/security.md item 31): with a UI handler, paths that are not the API's go to it untouched
// (it sets its own CSP); the API's paths keep the API's answers and headers.
func TestUIHook(t *testing.T) {
	e := newTestEnv(t)
	cfg := e.apiConfig()
	cfg.UI = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'")
		w.Write([]byte("ui " + r.URL.Path))
	})
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for path, ui := range map[string]bool{"/": true, "/clusters/1": true, "/api/v1x": true, "/healthz": false,
		"/readyz": false, "/metrics": false, "/api/v1/user/me": false, "/api/v1/nope": false, "/api/v1": false} {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, fromLoopback(httptest.NewRequest("GET", path, nil)))
		gotUI := strings.HasPrefix(w.Body.String(), "ui ")
		if gotUI != ui {
			t.Errorf("%s: served by the UI %v, want %v (%d %s)", path, gotUI, ui, w.Code, w.Body)
		}
		if ui && w.Header().Get("X-Frame-Options") != "" {
			t.Errorf("%s: the UI got the API's headers", path)
		}
		if !ui {
			checkAPIHeaders(t, path, w.Header())
		}
	}
}
