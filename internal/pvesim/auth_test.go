package pvesim

import (
	"bufio"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestTokenAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		if err := c.AddToken("old@pve!expired", "s3cret", TokenOptions{Expire: testStart.Add(-time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}})
	for _, tc := range []struct {
		name, header string
		line         string
	}{
		{"no credentials", "", "401 No ticket"},
		{"good token", "PVEAPIToken=vmgate@pve!gw=" + testSecret, "200 OK"},
		{"space variant", "PVEAPIToken vmgate@pve!gw=" + testSecret, "200 OK"},
		{"percent-encoded", "PVEAPIToken=vmgate%40pve%21gw=" + testSecret, "200 OK"},
		{"after another scheme", "Basic x; PVEAPIToken=vmgate@pve!gw=" + testSecret, "200 OK"},
		{"wrong secret", "PVEAPIToken=vmgate@pve!gw=nope", "401 Authentication failed!"},
		{"unknown token", "PVEAPIToken=vmgate@pve!other=" + testSecret, "401 Authentication failed!"},
		{"not a token id", "PVEAPIToken=vmgate@pve=" + testSecret, "401 Authentication failed!"},
		{"no secret", "PVEAPIToken=vmgate@pve!gw", "401 Authentication failed!"},
		{"expired", "PVEAPIToken=old@pve!expired=s3cret", "401 Authentication failed!"},
		{"other scheme only", "Bearer abc", "401 No ticket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(call{path: "/version", noAuth: true, headers: map[string]string{"Authorization": tc.header}})
			if r.line != tc.line {
				t.Fatalf("got %q, want %q", r.line, tc.line)
			}
			if r.status == 401 {
				if len(r.body) != 0 || r.header.Get("Content-Type") != "" {
					t.Fatalf("401 has a body %q / content type %q", r.body, r.header.Get("Content-Type"))
				}
				if r.header.Get("Server") != "pve-api-daemon/3.0" || r.header.Get("Cache-Control") != "max-age=0" || r.header.Get("Pragma") != "no-cache" {
					t.Fatalf("401 headers %v", r.header)
				}
			}
		})
	}
}

func TestTicketAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{build: func(c *Cluster) {
		addVM(t, c, VMSpec{VMID: 100, Node: "pve1"})
		if err := c.AddUser("alice@pve", "wonderland"); err != nil {
			t.Fatal(err)
		}
	}})
	login := e.do(call{method: "POST", path: "/access/ticket", noAuth: true, form: url.Values{"username": {"alice"}, "realm": {"pve"}, "password": {"wonderland"}}})
	wantLine(t, login, 200, "200 OK")
	tk := decodeData[struct {
		Username string         `json:"username"`
		Ticket   string         `json:"ticket"`
		CSRF     string         `json:"CSRFPreventionToken"`
		Cap      map[string]any `json:"cap"`
		Cluster  string         `json:"clustername"`
	}](t, login)
	if tk.Username != "alice@pve" || !strings.HasPrefix(tk.Ticket, "PVE:alice@pve:69B531A0::") || !strings.HasPrefix(tk.CSRF, "69B531A0:") || tk.Cap["vms"] == nil {
		t.Fatalf("ticket answer %s", login.data)
	}
	if login.header.Get("Set-Cookie") != "" {
		t.Fatal("the json formatter sets no cookie")
	}
	cookie := "PVEAuthCookie=" + url.QueryEscape(tk.Ticket)
	start := vmPath("pve1", 100, "/status/start")
	for _, tc := range []struct {
		name    string
		method  string
		path    string
		headers map[string]string
		line    string
	}{
		{"cookie GET", "GET", "/version", map[string]string{"Cookie": cookie}, "200 OK"},
		{"cookie among others", "GET", "/version", map[string]string{"Cookie": "lang=en; " + cookie}, "200 OK"},
		{"ticket in Authorization", "GET", "/version", map[string]string{"Authorization": "PVEAuthCookie=" + tk.Ticket}, "200 OK"},
		{"POST without CSRF", "POST", start, map[string]string{"Cookie": cookie}, "401 Permission denied - invalid csrf token"},
		{"POST with wrong CSRF", "POST", start, map[string]string{"Cookie": cookie, "CSRFPreventionToken": "69B531A0:AAAA"}, "401 Permission denied - invalid csrf token"},
		{"POST with CSRF", "POST", start, map[string]string{"Cookie": cookie, "CSRFPreventionToken": tk.CSRF}, "200 OK"},
		{"forged ticket", "GET", "/version", map[string]string{"Cookie": "PVEAuthCookie=PVE:alice@pve:69B531A0::Zm9v"}, "401 Authentication failed!"},
		{"cookie beats token", "GET", "/version", map[string]string{"Cookie": "PVEAuthCookie=garbage", "Authorization": e.auth}, "401 Authentication failed!"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(call{method: tc.method, path: tc.path, noAuth: true, headers: tc.headers})
			if r.line != tc.line {
				t.Fatalf("got %q %s, want %q", r.line, r.body, tc.line)
			}
		})
	}

	// A ticket renews a ticket.
	renew := e.do(call{method: "POST", path: "/access/ticket", noAuth: true, form: url.Values{"username": {"alice@pve"}, "password": {tk.Ticket}}})
	wantLine(t, renew, 200, "200 OK")

	// Tickets and CSRF tokens live 2 hours.
	e.c.Advance(2*time.Hour - time.Second)
	wantLine(t, e.do(call{path: "/version", noAuth: true, headers: map[string]string{"Cookie": cookie}}), 200, "200 OK")
	e.c.Advance(time.Second)
	wantLine(t, e.do(call{path: "/version", noAuth: true, headers: map[string]string{"Cookie": cookie}}), 401, "401 Authentication failed!")
}

func TestTicketFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	for _, tc := range []struct {
		name string
		c    call
		line string
		msg  string
	}{
		{"wrong password", call{method: "POST", path: "/access/ticket", noAuth: true, form: url.Values{"username": {"root@pam"}, "password": {"x"}}},
			"401 authentication failure", "authentication failure\n"},
		{"unknown user", call{method: "POST", path: "/access/ticket", noAuth: true, form: url.Values{"username": {"bob@pam"}, "password": {"x"}}},
			"401 authentication failure", "authentication failure\n"},
		{"with an API token", call{method: "POST", path: "/access/ticket", form: url.Values{"username": {"root@pam"}, "password": {"rootpw"}}},
			"403 Permission check failed (URI '/access/ticket' not available with API token, need proper ticket.",
			"Permission check failed (URI '/access/ticket' not available with API token, need proper ticket.\n)\n"},
		{"missing password", call{method: "POST", path: "/access/ticket", noAuth: true, form: url.Values{"username": {"root@pam"}}},
			"400 Parameter verification failed.", "Parameter verification failed.\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(tc.c)
			if r.line != tc.line || r.message != tc.msg {
				t.Fatalf("got %q %q, want %q %q", r.line, r.message, tc.line, tc.msg)
			}
		})
	}
	// root@pam may verify privileges with path+privs (no ticket is made).
	r := e.do(call{method: "POST", path: "/access/ticket", noAuth: true, form: url.Values{"username": {"root@pam"}, "password": {"rootpw"}, "path": {"/vms/100"}, "privs": {"VM.Audit"}}})
	wantLine(t, r, 200, "200 OK")
	if got := decodeData[map[string]any](t, r); got["ticket"] != nil || got["username"] != "root@pam" {
		t.Fatalf("verify answer %s", r.data)
	}
	// GET /access/ticket is a dummy that needs no auth.
	wantLine(t, e.do(call{path: "/access/ticket", noAuth: true}), 200, "200 OK")
}

func TestAuthDelay(t *testing.T) {
	t.Parallel()
	const delay = 300 * time.Millisecond
	e := newEnv(t, envOptions{opts: Options{AuthDelay: delay}})
	for _, c := range []call{
		{path: "/version", noAuth: true},
		{method: "POST", path: "/access/ticket", noAuth: true, form: url.Values{"username": {"root@pam"}, "password": {"bad"}}},
	} {
		began := time.Now()
		r := e.do(c)
		if r.status != 401 {
			t.Fatalf("got %s", r.line)
		}
		if took := time.Since(began); took < delay {
			t.Fatalf("401 after %v, want at least the auth delay", took)
		}
	}
	// A good request is not held back: with failures held for an hour, it is
	// answered at all (e.do gives up after its client's 20 s timeout). Counted by
	// whether it is answered, not by how fast, so a busy machine cannot fail it.
	held := newEnv(t, envOptions{opts: Options{AuthDelay: time.Hour}})
	wantLine(t, held.do(call{path: "/version"}), 200, "200 OK")
}

// TestRawErrorResponse reads the bytes pveproxy would send for a 401.
func TestRawErrorResponse(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	u, _ := url.Parse(e.eps["pve1"].URL)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /api2/json/nodes HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	var lines []string
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if l == "\r\n" {
			break
		}
		lines = append(lines, strings.TrimRight(l, "\r\n"))
	}
	if lines[0] != "HTTP/1.1 401 No ticket" {
		t.Fatalf("status line %q", lines[0])
	}
	head := strings.Join(lines[1:], "\n")
	for _, want := range []string{"Connection: close", "Server: pve-api-daemon/3.0", "Cache-Control: max-age=0", "Pragma: no-cache", "Expires: ", "Date: "} {
		if !strings.Contains(head, want) {
			t.Errorf("headers lack %q:\n%s", want, head)
		}
	}
	if strings.Contains(head, "Content-") {
		t.Errorf("401 carries content headers:\n%s", head)
	}
	rest := make([]byte, 10)
	if n, _ := br.Read(rest); n != 0 {
		t.Fatalf("401 body %q", rest[:n])
	}
}

// TestErrorAfterLargeBody: a 401 for a POST whose body was never read still
// reaches the client intact.
func TestErrorAfterLargeBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	big := url.Values{"x": {strings.Repeat("a", 200<<10)}}
	for i := 0; i < 5; i++ {
		r := e.do(call{method: "POST", path: "/nodes/pve1/qemu/100/status/start", form: big, noAuth: true})
		wantLine(t, r, 401, "401 No ticket")
	}
}
