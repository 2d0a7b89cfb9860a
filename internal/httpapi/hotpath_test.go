package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestAnswersSayTheirLength: every answer over HTTP/1.1 carries Content-Length
// and is never chunked — a short one from net/http itself (the handler wrote it
// whole), a long one from vmgate (setContentLength), a HEAD the length its GET
// would have, an error too. Leaving the short ones' to net/http keeps the
// header map from growing (issue 19 item 10, docs/history.md); clients such as
// HTTP/1.0 keep-alive ones still need the length.
func TestAnswersSayTheirLength(t *testing.T) {
	e := newVMEnv(t, 1000)
	srv := httptest.NewServer(e.api)
	t.Cleanup(srv.Close)
	upid := e.call("op", "POST", e.vmPath("pve1", 101)+"/start?wait=30", "").expect(t, http.StatusOK, "").header.Get("X-Task-Id")
	for _, c := range []struct {
		name, method, path, user string
		long                     bool
	}{
		{"finished task", "GET", taskPath(upid), "view", false},
		{"finished task, HEAD", "HEAD", taskPath(upid), "view", false},
		{"no such route", "GET", "/api/v1/nothing-here", "view", false},
		{"no token", "GET", taskPath(upid), "", false},
		{"audit trail", "GET", "/api/v1/audit?limit=500", "root", true},
		{"audit trail, HEAD", "HEAD", "/api/v1/audit?limit=500", "root", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			get := func(method string) (*http.Response, []byte) {
				req, err := http.NewRequest(method, srv.URL+c.path, nil)
				if err != nil {
					t.Fatal(err)
				}
				if c.user != "" {
					req.Header.Set("Authorization", "Bearer "+e.tokens[c.user])
				}
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				return resp, body
			}
			_, full := get("GET")
			if long := len(full) > netHTTPBuffer; long != c.long {
				t.Fatalf("the answer is %d bytes: the case wants it longer than %d: %v", len(full), netHTTPBuffer, c.long)
			}
			resp, body := get(c.method)
			if len(resp.TransferEncoding) > 0 {
				t.Errorf("sent with Transfer-Encoding %v", resp.TransferEncoding)
			}
			if want := fmt.Sprint(len(full)); resp.Header.Get("Content-Length") != want || resp.ContentLength != int64(len(full)) {
				t.Errorf("Content-Length %q (%d), want %s", resp.Header.Get("Content-Length"), resp.ContentLength, want)
			}
			if c.method == "GET" && len(body) != len(full) {
				t.Errorf("read %d bytes of %d", len(body), len(full))
			}
		})
	}
}

// lockedBuffer is a bytes.Buffer for a logger that more than one goroutine uses.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRequestLogLine: each request writes one line "request" at INFO with the
// request id, method, path, route, status, bytes, duration and client address,
// and the user and session once authenticated — written straight to the
// handler (issue 19 item 10, docs/history.md), as slog.Logger would.
func TestRequestLogLine(t *testing.T) {
	e := newVMEnv(t, 1000)
	var out lockedBuffer
	cfg := e.apiConfig()
	cfg.VMs, cfg.Operations = e.svc, e.ops
	cfg.Logger = slog.New(slog.NewJSONHandler(&out, nil))
	api, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		user   string
		status int
	}{{"view", http.StatusOK}, {"", http.StatusUnauthorized}} {
		before := len(out.String())
		r := httptest.NewRequest("GET", "/api/v1/user/me", nil)
		r.RemoteAddr = "192.0.2.7:1234"
		r.Header.Set("X-Request-Id", "log-line-test")
		if c.user != "" {
			r.Header.Set("Authorization", "Bearer "+e.tokens[c.user])
		}
		w := httptest.NewRecorder()
		api.ServeHTTP(w, r)
		if w.Code != c.status {
			t.Fatalf("%q: %d %s", c.user, w.Code, w.Body)
		}
		var lines []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(out.String()[before:]), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("log line %q: %v", l, err)
			}
			if m["msg"] == "request" {
				lines = append(lines, m)
			}
		}
		if len(lines) != 1 {
			t.Fatalf("%q: %d request lines in %s", c.user, len(lines), out.String()[before:])
		}
		m := lines[0]
		want := map[string]any{"level": "INFO", "request_id": "log-line-test", "method": "GET", "path": "/api/v1/user/me",
			"route": "GET /api/v1/user/me", "status": float64(c.status), "bytes": float64(w.Body.Len()), "remote": "192.0.2.7"}
		if c.user != "" {
			want["user_id"] = float64(e.users[c.user].ID)
		}
		for k, v := range want {
			if m[k] != v {
				t.Errorf("%q: %s = %v, want %v (%v)", c.user, k, m[k], v, m)
			}
		}
		if _, ok := m["duration"].(float64); !ok || m["time"] == nil {
			t.Errorf("%q: no duration or time in %v", c.user, m)
		}
		if s, _ := m["session"].(string); (s != "") != (c.user != "") {
			t.Errorf("%q: session %q", c.user, s)
		}
		if _, ok := m["user_id"]; ok != (c.user != "") {
			t.Errorf("%q: user_id %v", c.user, m["user_id"])
		}
	}
}
