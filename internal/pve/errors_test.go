package pve

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestErrorShapes sends every error shape PVE produces (reference §1.3, §2)
// byte for byte and checks the typed error.
func TestErrorShapes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		answer string
		// expectations
		status   int
		reason   string
		message  string
		errs     map[string]string
		notFound bool
		check    func(error) bool
	}{
		{
			name:   "401 no ticket, empty body",
			answer: rawAnswer("401 No ticket", "", true),
			status: 401, reason: "No ticket", check: IsUnauthorized,
		},
		{
			name:   "401 PVE 9.1.5+",
			answer: rawAnswer("401 Authentication failed!", "", true),
			status: 401, reason: "Authentication failed!", check: IsUnauthorized,
		},
		{
			name:   "401 older PVE, bad token, with Content-Length 0",
			answer: "HTTP/1.1 401 no such token 'gw' for user 'vmgate@pve'\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
			status: 401, reason: "no such token 'gw' for user 'vmgate@pve'", check: IsUnauthorized,
		},
		{
			name:   "403 permission",
			answer: rawAnswer("403 Permission check failed (/vms/100, VM.PowerMgmt)", `{"data":null,"message":"Permission check failed (/vms/100, VM.PowerMgmt)\n"}`, true),
			status: 403, reason: "Permission check failed (/vms/100, VM.PowerMgmt)", message: "Permission check failed (/vms/100, VM.PowerMgmt)",
			check: IsPermissionDenied,
		},
		{
			name:   "400 parameter verification (PVE >= 8.3)",
			answer: rawAnswer("400 Parameter verification failed.", `{"data":null,"errors":{"target":"target is local node."},"message":"Parameter verification failed.\n"}`, true),
			status: 400, reason: "Parameter verification failed.", message: "Parameter verification failed.",
			errs: map[string]string{"target": "target is local node."}, check: IsParameterError,
		},
		{
			name:   "400 older PVE: errors only",
			answer: rawAnswer("400 Parameter verification failed.", `{"data":null,"errors":{"vmid":"value must have a minimum value of 100"}}`, true),
			status: 400, reason: "Parameter verification failed.", errs: map[string]string{"vmid": "value must have a minimum value of 100"},
			check: IsParameterError,
		},
		{
			name:   "400 no such task",
			answer: rawAnswer("400 Parameter verification failed.", `{"data":null,"errors":{"upid":"no such task"},"message":"Parameter verification failed.\n"}`, true),
			status: 400, reason: "Parameter verification failed.", message: "Parameter verification failed.",
			errs: map[string]string{"upid": "no such task"}, notFound: true,
		},
		{
			name:   "500 config does not exist",
			answer: rawAnswer("500 Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist", `{"data":null,"message":"Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist\n"}`, true),
			status: 500, reason: "Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist",
			message: "Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist", notFound: true,
		},
		{
			name:   "500 older PVE: message only in the status line",
			answer: rawAnswer("500 Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist", `{"data":null}`, true),
			status: 500, reason: "Configuration file 'nodes/pve1/qemu-server/100.conf' does not exist", notFound: true,
		},
		{
			name:   "500 unable to find configuration file",
			answer: rawAnswer("500 unable to find configuration file for VM 100 on node 'pve1'", `{"data":null,"message":"unable to find configuration file for VM 100 on node 'pve1'\n"}`, true),
			status: 500, reason: "unable to find configuration file for VM 100 on node 'pve1'",
			message: "unable to find configuration file for VM 100 on node 'pve1'", notFound: true,
		},
		{
			name:   "500 unknown node",
			answer: rawAnswer("500 hostname lookup 'pve9' failed - failed to get address info for: pve9: Name or service not known", `{"data":null,"message":"hostname lookup 'pve9' failed - failed to get address info for: pve9: Name or service not known\n"}`, true),
			status: 500, reason: "hostname lookup 'pve9' failed - failed to get address info for: pve9: Name or service not known",
			message: "hostname lookup 'pve9' failed - failed to get address info for: pve9: Name or service not known", notFound: true,
		},
		{
			name:   "500 not running (not a not-found)",
			answer: rawAnswer("500 VM 100 not running", `{"data":null,"message":"VM 100 not running\n"}`, true),
			status: 500, reason: "VM 100 not running", message: "VM 100 not running",
		},
		{
			name:   "500 storage does not exist (not a VM not-found)",
			answer: rawAnswer("500 storage 'foo' does not exist", `{"data":null,"message":"storage 'foo' does not exist\n"}`, true),
			status: 500, reason: "storage 'foo' does not exist", message: "storage 'foo' does not exist",
		},
		{
			name:   "500 multi-line message: reason is the first line",
			answer: rawAnswer("500 command failed", `{"data":null,"message":"command failed\nsecond line\n"}`, true),
			status: 500, reason: "command failed", message: "command failed\nsecond line",
		},
		{
			name:   "501 plain-text body",
			answer: "HTTP/1.1 501 Method 'GET /nodes/pve1/qemu/100/status/foo' not implemented\r\nContent-Length: 60\r\nConnection: close\r\n\r\nMethod 'GET /nodes/pve1/qemu/100/status/foo' not implemented",
			status: 501, reason: "Method 'GET /nodes/pve1/qemu/100/status/foo' not implemented",
			message: "Method 'GET /nodes/pve1/qemu/100/status/foo' not implemented",
		},
		{
			name:   "status line without reason",
			answer: "HTTP/1.1 500\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
			status: 500,
		},
		{
			name:   "control characters in the message are dropped",
			answer: rawAnswer("500 bad", "{\"data\":null,\"message\":\"a\\u001b[31mb\\u0000c\\n\"}", true),
			status: 500, reason: "bad", message: "a[31mbc",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newRawPVE(t, func(*http.Request) string { return tt.answer })
			c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()}})
			_, err := c.GuestStatus(context.Background(), VMOn("pve1", 100))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v (%T), want *Error", err, err)
			}
			if e.StatusCode != tt.status || e.Reason != tt.reason || e.Message != tt.message {
				t.Errorf("got status %d reason %q message %q; want %d %q %q", e.StatusCode, e.Reason, e.Message, tt.status, tt.reason, tt.message)
			}
			if len(e.Errors) != len(tt.errs) {
				t.Errorf("errors = %v, want %v", e.Errors, tt.errs)
			}
			for k, v := range tt.errs {
				if e.Errors[k] != v {
					t.Errorf("errors[%q] = %q, want %q", k, e.Errors[k], v)
				}
			}
			if e.Method != "GET" || e.Path != "/nodes/pve1/qemu/100/status/current" || e.Endpoint != srv.url {
				t.Errorf("request = %s %s at %s", e.Method, e.Path, e.Endpoint)
			}
			if IsNotFound(err) != tt.notFound {
				t.Errorf("IsNotFound = %v, want %v", IsNotFound(err), tt.notFound)
			}
			if tt.check != nil && !tt.check(err) {
				t.Errorf("classifier false for %v", err)
			}
			if errors.Is(err, ErrUnavailable) || errors.Is(err, ErrTimeout) || errors.Is(err, ErrNodeOffline) {
				t.Errorf("a PVE answer classified as transport failure: %v", err)
			}
			if srv.reqs.Load() != 1 {
				t.Errorf("PVE error answers must not be retried: %d requests", srv.reqs.Load())
			}
			if e.Text() == "" && tt.reason != "" {
				t.Errorf("Text() empty")
			}
			if !strings.Contains(err.Error(), "500") && !strings.Contains(err.Error(), "40") && !strings.Contains(err.Error(), "501") {
				t.Errorf("Error() = %q lacks the status", err)
			}
		})
	}
}

func TestNodeOffline(t *testing.T) {
	t.Parallel()
	for _, status := range []string{"595 No route to host", "595 Connection refused", "596 Connection timed out"} {
		t.Run(status, func(t *testing.T) {
			t.Parallel()
			offline := newRawPVE(t, func(*http.Request) string { return rawAnswer(status, "", true) })
			other := newFakePVE(t, func(w http.ResponseWriter, r *http.Request) { writeData(w, map[string]any{"status": "running"}) })
			c := newTestClient(t, Config{Endpoints: []Endpoint{offline.endpoint(), other.endpoint()}})

			_, err := c.GuestStatus(context.Background(), VMOn("pve2", 100))
			var noe *NodeOfflineError
			if !errors.As(err, &noe) || !errors.Is(err, ErrNodeOffline) {
				t.Fatalf("err = %v, want *NodeOfflineError", err)
			}
			if noe.Node != "pve2" || noe.Err.StatusCode != atoiPrefix(status) || noe.Err.Reason != status[4:] {
				t.Errorf("NodeOfflineError = %+v / %+v", noe, noe.Err)
			}
			if errors.Is(err, ErrUnavailable) {
				t.Errorf("node offline must not read as cluster unavailable")
			}
			if other.total() != 0 || offline.reqs.Load() != 1 {
				t.Errorf("no failover or retry for a node-scoped 595: other=%d offline=%d", other.total(), offline.reqs.Load())
			}
			if !strings.Contains(err.Error(), "pve2") {
				t.Errorf("message %q does not name the node", err)
			}
		})
	}
}

func atoiPrefix(s string) int {
	n := 0
	for _, c := range s[:3] {
		n = n*10 + int(c-'0')
	}
	return n
}

func TestProxyErrorOnClusterWideRequestFailsOver(t *testing.T) {
	t.Parallel()
	bad := newRawPVE(t, func(*http.Request) string { return rawAnswer("595 Connection refused", "", true) })
	good := newFakePVE(t, versionHandler)
	c := newTestClient(t, Config{Endpoints: []Endpoint{bad.endpoint(), good.endpoint()}})
	if _, err := c.Version(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.Failovers != 1 {
		t.Errorf("stats = %+v", s)
	}

	// Alone, it is unavailable, with the reason kept.
	c = newTestClient(t, Config{Endpoints: []Endpoint{bad.endpoint()}})
	_, err := c.Version(context.Background())
	var ue *UnavailableError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUnavailable) || StatusCode(err) != 595 {
		t.Fatalf("err = %v", err)
	}
}

func TestErrorTypesMessages(t *testing.T) {
	t.Parallel()
	e := &Error{StatusCode: 400, Reason: "Parameter verification failed.", Message: "Parameter verification failed.",
		Errors: map[string]string{"b": "2", "a": "1"}, Method: "POST", Path: "/x"}
	if got, want := e.Error(), "pve: POST /x: 400 Parameter verification failed. (a: 1; b: 2)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	amb := &AmbiguousError{Method: "POST", Path: "/p", Endpoint: "https://h", Err: ErrTimeout}
	if !errors.Is(amb, ErrTimeout) || !strings.Contains(amb.Error(), "no matching task") {
		t.Errorf("AmbiguousError = %q", amb)
	}
	if MessageIsNotFound("VM 100 already running") || !MessageIsNotFound("Configuration file 'nodes/pve2/qemu-server/100.conf' does not exist") {
		t.Error("MessageIsNotFound misclassifies")
	}
}

// TestBuildErrorTellsPVEsMessageFromABody: the "message" of PVE's JSON envelope
// is PVE's own words; a body that is not JSON is kept too, marked Plain, so that a
// caller can decline to repeat whatever else answered (fleet's registration).
func TestBuildErrorTellsPVEsMessageFromABody(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		body, message string
		plain         bool
	}{
		{`{"data":null,"message":"VM 100 not running\n"}`, "VM 100 not running", false},
		{`{"data":null}`, "", false},
		{"no such uri\n", "no such uri", true},
		{"<html><body>Bad Gateway</body></html>", "<html><body>Bad Gateway</body></html>", true},
		{"", "", false},
	} {
		e := buildError(&http.Response{StatusCode: 502, Status: "502 Bad Gateway"}, []byte(c.body),
			&call{method: "GET", path: pathVersion}, &endpoint{base: "https://h"})
		if e.Message != c.message || e.Plain != c.plain {
			t.Errorf("body %q: message %q plain %v, want %q %v", c.body, e.Message, e.Plain, c.message, c.plain)
		}
	}
}

func FuzzBuildError(f *testing.F) {
	f.Add(500, "500 VM 100 not running", `{"data":null,"message":"VM 100 not running\n"}`)
	f.Add(400, "400 Parameter verification failed.", `{"data":null,"errors":{"a":"b","c":1}}`)
	f.Add(501, "501 no such uri", "no such uri")
	f.Add(401, "401 No ticket", "")
	f.Fuzz(func(t *testing.T, code int, status, body string) {
		resp := &http.Response{StatusCode: code, Status: status}
		e := buildError(resp, []byte(body), &call{method: "GET", path: pathVersion}, &endpoint{base: "https://h"})
		for _, s := range append([]string{e.Reason, e.Message}, mapTexts(e.Errors)...) {
			if !utf8.ValidString(s) || len(s) > maxMessageLen+len("…") {
				t.Fatalf("unbounded or invalid text %q", s)
			}
			for _, r := range s {
				if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f {
					t.Fatalf("control character in %q", s)
				}
			}
		}
		_ = e.Error()
	})
}

func mapTexts(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k, v)
	}
	return out
}

func TestCleanTextKeepsUTF8(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", maxMessageLen) // 2 bytes each
	got := cleanText(long)
	if !utf8.ValidString(got) || len(got) > maxMessageLen+len("…") || !strings.HasSuffix(got, "…") {
		t.Errorf("cleanText cut badly: %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
	if got := cleanText("a\x1b[0m\x00b\xffc\u0085d\n"); got != "a[0mb\uFFFDcd\n" {
		t.Errorf("cleanText = %q", got)
	}
}
