package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeVmgate answers as vmgate's envelope does, from a table of path → handler,
// and records every request.
type fakeVmgate struct {
	mu       sync.Mutex
	requests []*http.Request
	routes   map[string]func(w http.ResponseWriter, r *http.Request)
}

func (f *fakeVmgate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, r.Clone(context.Background()))
	f.mu.Unlock()
	h, ok := f.routes[r.Method+" "+r.URL.Path]
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"code":404,"message":"no such path","reason":"not_found"}`)
		return
	}
	h(w, r)
}

func serve(t *testing.T, routes map[string]func(w http.ResponseWriter, r *http.Request)) (*fakeVmgate, string) {
	t.Helper()
	f := &fakeVmgate{routes: routes}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func answer(status int, body string, header ...string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// TestAPIErrorCarriesTheEnvelope: an error answer comes back as *APIError with
// its reason, details, Retry-After and the task it names; a page that is not
// vmgate's is *NotVmgateError.
func TestAPIErrorCarriesTheEnvelope(t *testing.T) {
	t.Parallel()
	_, base := serve(t, map[string]func(http.ResponseWriter, *http.Request){
		"POST /api/v1/pve/vm/1/pve1/100/stop": answer(409,
			`{"code":409,"message":"VM 100 did not shut down in time","reason":"shutdown_timeout","taskId":"UPID:pve1:1"}`),
		"POST /api/v1/pve/vm/1/pve1/101/start": answer(504,
			`{"code":504,"message":"unknown","reason":"outcome_unknown","taskRef":42}`, "X-Operation-Id", "42"),
		"GET /api/v1/pve/clusters": answer(429, `{"code":429,"message":"slow down","reason":"rate_limited"}`, "Retry-After", "7"),
		"GET /api/v1/user/me":      answer(502, `<html>bad gateway</html>`),
	})
	c := New(base, WithToken("t"))
	ctx := context.Background()
	cases := []struct {
		name  string
		call  func() error
		check func(*APIError) bool
	}{
		{"shutdown timeout", func() error { _, err := c.Stop(ctx, VM(1, "pve1", 100), PowerOptions{}); return err },
			func(ae *APIError) bool {
				return ae.Status == 409 && ae.Reason == "shutdown_timeout" && ae.TaskID == "UPID:pve1:1"
			}},
		{"outcome unknown", func() error { _, err := c.Start(ctx, VM(1, "pve1", 101), PowerOptions{}); return err },
			func(ae *APIError) bool { return ae.Status == 504 && ae.TaskRef == 42 }},
		{"rate limited", func() error { _, err := c.VisibleClusters(ctx); return err },
			func(ae *APIError) bool { return ae.Status == 429 && ae.RetryAfter == 7*time.Second }},
	}
	for _, tc := range cases {
		var ae *APIError
		if err := tc.call(); !errors.As(err, &ae) || !tc.check(ae) {
			t.Errorf("%s: %v (%+v)", tc.name, err, ae)
		}
	}
	var nv *NotVmgateError
	if _, err := c.Me(ctx); !errors.As(err, &nv) {
		t.Errorf("a proxy's page: %v", err)
	}
}

// TestWritesSendAnIdempotencyKey: every write that may start something sends an
// Idempotency-Key, fresh per call or the caller's; reads send none.
func TestWritesSendAnIdempotencyKey(t *testing.T) {
	t.Parallel()
	f, base := serve(t, map[string]func(http.ResponseWriter, *http.Request){
		"POST /api/v1/pve/lxc/1/pve2/201/migrate": answer(200, `{"code":200,"message":"success","data":{"taskId":"UPID:pve2:9"}}`),
		"POST /api/v1/pve/vm/1/pve1/100/start":    answer(202, `{"code":202,"message":"accepted"}`, "X-Task-Id", "UPID:pve1:2"),
		"GET /api/v1/user/me": answer(200,
			`{"code":200,"message":"success","data":{"id":1,"email":"a@x","nickname":"","role":"admin","grants":[]}}`),
	})
	c := New(base)
	ctx := context.Background()
	upid, err := c.Migrate(ctx, CT(1, "pve2", 201), MigrateRequest{Target: "pve3"})
	if err != nil || upid != "UPID:pve2:9" {
		t.Fatalf("migrate: %q %v", upid, err)
	}
	res, err := c.Start(ctx, VM(1, "pve1", 100), PowerOptions{}, IdempotencyKey("mine"))
	if err != nil || !res.Running || res.TaskID != "UPID:pve1:2" {
		t.Fatalf("start: %+v %v", res, err)
	}
	if _, err := c.Me(ctx); err != nil {
		t.Fatal(err)
	}
	keys := []string{}
	for _, r := range f.requests {
		keys = append(keys, r.Header.Get("Idempotency-Key"))
	}
	if len(keys) != 3 || len(keys[0]) != 32 || keys[1] != "mine" || keys[2] != "" {
		t.Fatalf("Idempotency-Keys %q", keys)
	}
}

// TestRenewAfterA401: an answer 401 is repeated once with the token WithRenew
// gives, and the client keeps it.
func TestRenewAfterA401(t *testing.T) {
	t.Parallel()
	_, base := serve(t, map[string]func(http.ResponseWriter, *http.Request){
		"GET /api/v1/user/me": func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer fresh" {
				answer(401, `{"code":401,"message":"expired","reason":"unauthenticated"}`)(w, r)
				return
			}
			answer(200, `{"code":200,"message":"success","data":{"id":1,"email":"a@x","nickname":"","role":"user","grants":[]}}`)(w, r)
		},
	})
	renewed := 0
	c := New(base, WithToken("stale"), WithRenew(func(context.Context) (string, bool) { renewed++; return "fresh", true }))
	me, err := c.Me(context.Background())
	if err != nil || me.Email != "a@x" || renewed != 1 || c.Token() != "fresh" {
		t.Fatalf("me %+v %v, renewed %d, token %q", me, err, renewed, c.Token())
	}
	if string(me.JSON()) == "" || !strings.Contains(string(me.JSON()), `"grants":[]`) {
		t.Errorf("the raw answer: %s", me.JSON())
	}
}

// TestListsFollowTheCursorAndDecodeStrictly: a paged list is read to its last
// page; with WithStrictDecoding a field the types do not know is an error.
func TestListsFollowTheCursorAndDecodeStrictly(t *testing.T) {
	t.Parallel()
	_, base := serve(t, map[string]func(http.ResponseWriter, *http.Request){
		"GET /api/v1/pve/clusters/1/vms": func(w http.ResponseWriter, r *http.Request) {
			vm := func(id int) string {
				return fmt.Sprintf(`{"vmid":%d,"name":"v","node":"pve1","status":"running","lock":"","tags":[],"haState":"","maxMem":1,"maxCpu":1}`, id)
			}
			if r.URL.Query().Get("cursor") == "" {
				answer(200, `{"code":200,"message":"success","data":[`+vm(100)+`],"asOf":"2026-11-22T10:00:01Z","nextCursor":"100"}`)(w, r)
				return
			}
			answer(200, `{"code":200,"message":"success","data":[`+vm(101)+`],"asOf":"2026-11-22T10:00:00Z","nextCursor":null}`)(w, r)
		},
		"GET /api/v1/pve/clusters": answer(200,
			`{"code":200,"message":"success","data":[{"id":1,"name":"lab","role":"admin","status":"online","pveVersion":null,"new":1}]}`),
	})
	ctx := context.Background()
	l, err := New(base).VMs(ctx, 1, GuestFilter{PageSize: 1, Node: "pve1"})
	if err != nil || len(l.Items) != 2 || l.Items[1].VMID != 101 || len(l.Raw) != 2 || l.AsOf.Second() != 0 {
		t.Fatalf("VMs: %+v %v", l, err)
	}
	if _, err := New(base).VisibleClusters(ctx); err != nil {
		t.Errorf("a field the client does not know, not strict: %v", err)
	}
	if _, err := New(base, WithStrictDecoding()).VisibleClusters(ctx); err == nil || !strings.Contains(err.Error(), "new") {
		t.Errorf("a field the client does not know, strict: %v", err)
	}
}
