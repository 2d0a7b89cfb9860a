package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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
