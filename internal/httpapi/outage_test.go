package httpapi

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/apitest"
	"github.com/vmgate/vmgate/internal/errs"
)

// outageBody is a well-formed body for each route that takes one, so that the
// request gets past decoding to the store.
var outageBody = map[string]string{
	"POST /api/v1/user/login":                                `{"email":"root@example.org","password":"` + envPassword + `"}`,
	"POST /api/v1/user/password":                             `{"currentPassword":"` + envPassword + `","newPassword":"another-Fine-passphrase-43"}`,
	"POST /api/v1/users":                                     `{"email":"new@example.org","nickname":"n","password":"another-Fine-passphrase-43","role":"user"}`,
	"PATCH /api/v1/users/{id}":                               `{"nickname":"x"}`,
	"PUT /api/v1/clusters/{clusterId}/grants/{userId}":       `{"role":"viewer"}`,
	"PATCH /api/v1/clusters/{clusterId}":                     `{"name":"renamed"}`,
	"POST /api/v1/clusters":                                  `{"name":"x","endpoints":["https://127.0.0.1:1"],"tokenId":"a@pve!b","tokenSecret":"s","insecureSkipVerify":true}`,
	"POST /api/v1/pve/vm/{clusterId}/{node}/{vmid}/migrate":  `{"target":"pve2"}`,
	"POST /api/v1/pve/lxc/{clusterId}/{node}/{vmid}/migrate": `{"target":"pve2","restart":true}`,
}

// TestEveryRouteWithTheStoreClosed: with vmgate's database gone (closed, as
// during a shutdown, or unreachable), no route answers 500. Each answers 503
// store_unavailable with a Retry-After, or what it can answer without the store
// (a 401 for a token it can no longer check, a 404/400 decided before the store).
func TestEveryRouteWithTheStoreClosed(t *testing.T) {
	e := newVMEnv(t, 1000)
	upid := e.call("op", "POST", e.vmPath("pve1", 101)+"/start?wait=0", "").header.Get("X-Task-Id")
	if upid == "" {
		t.Fatal("no task to query")
	}
	e.store.Close()
	repl := strings.NewReplacer("{clusterId}", itoa(e.cid), "{node}", "pve1", "{vmid}", "100", "{taskId}", upid,
		"{id}", itoa(e.users["view"].ID), "{userId}", itoa(e.users["view"].ID))
	unavailable := 0
	for _, rt := range e.api.routes() {
		key := rt.method + " " + rt.pattern
		if !strings.HasPrefix(rt.pattern, "/api/v1/") || rt.pattern == "/api/v1/openapi.json" {
			continue // none of them reads the store (/readyz: TestReadyzNamesTheStore)
		}
		if strings.HasSuffix(rt.pattern, "/events") {
			// A stream, not an envelope: the caller, the grant and the tracked task
			// are in memory, so it may be served in full.
			req, _ := http.NewRequest(rt.method, e.srv.URL+repl.Replace(rt.pattern), nil)
			req.Header.Set("Authorization", "Bearer "+e.tokens["root"])
			resp, err := e.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusInternalServerError {
				t.Errorf("%s with the store closed: 500", key)
			}
			t.Logf("%-60s %d", key, resp.StatusCode)
			continue
		}
		a := e.call("root", rt.method, repl.Replace(rt.pattern), outageBody[key])
		switch {
		case a.status == http.StatusInternalServerError:
			t.Errorf("%s with the store closed: 500 %s", key, a.raw)
		case a.status == http.StatusServiceUnavailable && a.env.Reason == errs.ReasonStoreUnavailable:
			unavailable++
			if a.header.Get("Retry-After") == "" {
				t.Errorf("%s: 503 store_unavailable without Retry-After", key)
			}
		}
		t.Logf("%-60s %d %s", key, a.status, a.env.Reason)
	}
	if unavailable == 0 {
		t.Error("no route answered 503 store_unavailable")
	}
}

// guard bounds how long a fault test waits for an answer that must come "in
// time": far more than any deadline the test sets, so a busy machine cannot fail
// it, far less than go test's own timeout, so a hang fails with a message.
const guard = 30 * time.Second

// TestRequestTimeout: a request as a whole has a deadline (--request-timeout):
// with PVE answering slower than it, a read answers 504 upstream_timeout, not
// whenever PVE answers.
//
// The deadline must run out while PVE holds the request, not before it gets
// there: what comes first (authentication, the grant, the cluster's client) is
// quick, but not on a busy machine within a 200 ms deadline, and then the
// answer is rightly 503 request_timeout. So the deadline is 2 s, against PVE's
// hour.
func TestRequestTimeout(t *testing.T) {
	t.Parallel()
	e := newVMEnv(t, 1000)
	cfg := e.apiConfig()
	cfg.VMs, cfg.RequestTimeout = e.svc, 2*time.Second
	api, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = apitest.NewServer(t, api)

	e.dev.SetLatency(time.Hour) // PVE holds every request
	t.Cleanup(func() { e.dev.SetLatency(0) })
	began := time.Now()
	e.call("view", "GET", e.vmPath("pve1", 100), "").expect(t, http.StatusGatewayTimeout, "upstream_timeout")
	if d := time.Since(began); d > guard {
		t.Errorf("the read took %v", d)
	}
}
