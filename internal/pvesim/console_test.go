package pvesim

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/vmgate/vmgate/internal/testkit"
)

const (
	consoleTokenID = "console@pve!term"
	consoleSecret  = "0b7f3d52-4a39-4c3e-9f0a-77c1d2e5a901"
	// otherConsoleToken may open consoles too, but not with the first's tickets.
	otherConsoleToken = "other@pve!term"
)

// consoleEnv is a cluster with CT 200 (ct200, running), CT 201 (stopped),
// VM 100 (web1, running, serial0), VM 101 (stopped) and VM 102 (running,
// no serial port), and a token that has VM.Console.
func consoleEnv(t *testing.T) *env { return consoleEnvAs(t, "") }

// consoleEnvAs is consoleEnv answering as a PVE release.
func consoleEnvAs(t *testing.T, release string) *env {
	e := newEnv(t, envOptions{opts: Options{Version: release}, build: func(c *Cluster) {
		addCT(t, c, CTSpec{VMID: 200, Node: "pve1", Hostname: "ct200", Running: true})
		addCT(t, c, CTSpec{VMID: 201, Node: "pve1", Hostname: "ct201"})
		addVM(t, c, VMSpec{VMID: 100, Node: "pve1", Name: "web1", Running: true, Serial: "serial0"})
		addVM(t, c, VMSpec{VMID: 101, Node: "pve1", Name: "db1"})
		addVM(t, c, VMSpec{VMID: 102, Node: "pve1", Name: "app1", Running: true})
		for _, id := range []string{consoleTokenID, otherConsoleToken} {
			if err := c.AddToken(id, consoleSecret, TokenOptions{VMPrivileges: []string{"VM.Audit", "VM.Console", "VM.PowerMgmt"}}); err != nil {
				t.Fatal(err)
			}
		}
	}})
	e.auth = "PVEAPIToken=" + consoleTokenID + "=" + consoleSecret
	return e
}

// proxyAnswer is vncproxy's and termproxy's answer.
type proxyAnswer struct {
	User     string `json:"user"`
	Ticket   string `json:"ticket"`
	Port     int    `json:"port"`
	UPID     string `json:"upid"`
	Cert     string `json:"cert"`
	Password string `json:"password"`
}

func (e *env) openProxy(kind string, vmid int, method string, form url.Values) proxyAnswer {
	e.t.Helper()
	r := e.do(call{method: "POST", path: "/nodes/pve1/" + kind + "/" + strconv.Itoa(vmid) + "/" + method, form: form})
	if r.status != 200 {
		e.t.Fatalf("%s: %s %s", method, r.line, r.body)
	}
	return decodeData[proxyAnswer](e.t, r)
}

func wsURL(e *env, endpoint, kind string, vmid int, a proxyAnswer) string {
	q := url.Values{"port": {strconv.Itoa(a.Port)}, "vncticket": {a.Ticket}}
	u := e.eps[endpoint].URL + "/api2/json/nodes/pve1/" + kind + "/" + strconv.Itoa(vmid) + "/vncwebsocket?" + q.Encode()
	return "ws" + strings.TrimPrefix(u, "http")
}

// dialConsole opens vncwebsocket as PVE's own clients do, at pve1's endpoint.
func (e *env) dialConsole(kind string, vmid int, a proxyAnswer) (*websocket.Conn, error) {
	return e.dialConsoleAt("pve1", kind, vmid, a)
}

func (e *env) dialConsoleAt(endpoint, kind string, vmid int, a proxyAnswer) (*websocket.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, wsURL(e, endpoint, kind, vmid, a), &websocket.DialOptions{
		Subprotocols: []string{"binary"},
		HTTPHeader:   http.Header{"Authorization": {e.auth}},
	})
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err == nil {
		ws.SetReadLimit(8 << 20)
	}
	return ws, err
}

// termClient is a termproxy client: what it read so far, and helpers.
type termClient struct {
	t   testing.TB
	ws  *websocket.Conn
	got bytes.Buffer
}

func (tc *termClient) send(s string) {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := tc.ws.Write(ctx, websocket.MessageBinary, []byte(s)); err != nil {
		tc.t.Fatal(err)
	}
}

func (tc *termClient) typeText(s string) { tc.send("0:" + strconv.Itoa(len(s)) + ":" + s) }

// until reads until the output so far contains want (a read error fails).
func (tc *termClient) until(want string) string {
	tc.t.Helper()
	for !strings.Contains(tc.got.String(), want) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, b, err := tc.ws.Read(ctx)
		cancel()
		if err != nil {
			tc.t.Fatalf("waiting for %q, got %q: %v", want, tc.got.String(), err)
		}
		tc.got.Write(b)
	}
	out := tc.got.String()
	i := strings.Index(out, want) + len(want)
	tc.got.Reset()
	tc.got.WriteString(out[i:])
	return out[:i]
}

// closed reads until the server ends the connection; it returns what came.
func (tc *termClient) closed() string {
	tc.t.Helper()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, b, err := tc.ws.Read(ctx)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				tc.t.Fatalf("connection still open after %q", tc.got.String())
			}
			return tc.got.String()
		}
		tc.got.Write(b)
	}
}

func (e *env) termLogin(kind string, vmid int) (*termClient, proxyAnswer) {
	e.t.Helper()
	a := e.openProxy(kind, vmid, "termproxy", nil)
	ws, err := e.dialConsole(kind, vmid, a)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { ws.CloseNow() })
	tc := &termClient{t: e.t, ws: ws}
	tc.send(a.User + ":" + a.Ticket + "\n")
	if got := tc.until("OK"); got != "OK" {
		e.t.Fatalf("login answer %q", got)
	}
	return tc, a
}

// TestTermproxyShell: a container's terminal logs in with termproxy's line,
// answers like a shell, takes resizes and ends with exit (TASK OK).
func TestTermproxyShell(t *testing.T) {
	t.Parallel()
	e := consoleEnv(t)
	tc, a := e.termLogin("lxc", 200)
	if a.User != consoleTokenID || !strings.HasPrefix(a.Ticket, "PVEVNC:") || a.Port != 5900 || !strings.Contains(a.UPID, ":vncproxy:200:"+consoleTokenID+":") {
		t.Fatalf("termproxy answer %+v", a)
	}
	tc.until("root@ct200:~# ")
	// Split across frames, with a ping between: termproxy reads a stream.
	tc.send("0:8:echo")
	tc.send(" hi\r")
	tc.send("2")
	if got := tc.until("root@ct200:~# "); got != "echo hi\r\nhi\r\nroot@ct200:~# " {
		t.Fatalf("echo: %q", got)
	}
	tc.typeText("hostname\r")
	if got := tc.until("# "); got != "hostname\r\nct200\r\nroot@ct200:~# " {
		t.Fatalf("hostname: %q", got)
	}
	tc.typeText("uname -a\r")
	if got := tc.until("# "); !strings.Contains(got, "\r\nLinux ct200 6.") || !strings.Contains(got, "-pve #1 SMP") || !strings.Contains(got, " x86_64 GNU/Linux\r\n") {
		t.Fatalf("uname -a: %q", got)
	}
	tc.typeText("stty size\r")
	if got := tc.until("# "); !strings.Contains(got, "\r\n20 80\r\n") {
		t.Fatalf("stty size at start: %q", got)
	}
	tc.send("1:132:43:")
	tc.typeText("stty size\r")
	if got := tc.until("# "); !strings.Contains(got, "\r\n43 132\r\n") {
		t.Fatalf("stty size after resize: %q", got)
	}
	// Line editing: a backspace erases, ^C drops the line.
	tc.typeText("echo abd\x7fc\r")
	if got := tc.until("# "); !strings.Contains(got, "\r\nabc\r\n") {
		t.Fatalf("backspace: %q", got)
	}
	tc.typeText("nosuch\r")
	if got := tc.until("# "); !strings.Contains(got, "bash: nosuch: command not found\r\n") {
		t.Fatalf("unknown command: %q", got)
	}
	tc.typeText("exit\r")
	if got := tc.closed(); got != "exit\r\nexit\r\n" {
		t.Fatalf("exit: %q", got)
	}
	if st := e.wait(a.UPID); st.ExitStatus != "OK" {
		t.Fatalf("task %+v", st)
	}
	if n := e.c.ConsoleSessions(); n != 0 {
		t.Fatalf("%d sessions left", n)
	}
}

// TestTermproxyVMSerial: a VM's terminal is its serial port; without one, or
// stopped, qm terminal's error and the end.
func TestTermproxyVMSerial(t *testing.T) {
	t.Parallel()
	e := consoleEnv(t)
	tc, _ := e.termLogin("qemu", 100)
	if got := tc.until("root@web1:~# "); got != "starting serial terminal on interface serial0\r\nroot@web1:~# " {
		t.Fatalf("banner: %q", got)
	}
	tc.typeText("hostname\r")
	tc.until("\r\nweb1\r\n")

	tc, _ = e.termLogin("qemu", 102)
	if got := tc.closed(); got != "unable to find a serial interface\r\n" {
		t.Fatalf("no serial: %q", got)
	}
	e.c.mu.Lock()
	e.c.vms[101].serial = "serial0"
	e.c.mu.Unlock()
	tc, _ = e.termLogin("qemu", 101)
	if got := tc.closed(); got != "VM 101 not running\r\n" {
		t.Fatalf("stopped VM: %q", got)
	}
	a := e.openProxy("qemu", 100, "termproxy", url.Values{"serial": {"serial1"}})
	ws, err := e.dialConsole("qemu", 100, a)
	if err != nil {
		t.Fatal(err)
	}
	tc = &termClient{t: t, ws: ws}
	tc.send(a.User + ":" + a.Ticket + "\n")
	if got := tc.closed(); got != "OKserial interface 'serial1' is not configured\r\n" {
		t.Fatalf("serial1: %q", got)
	}
}

// TestTermproxyStoppedContainer: lxc-console's refusal, then the end.
func TestTermproxyStoppedContainer(t *testing.T) {
	t.Parallel()
	e := consoleEnv(t)
	tc, _ := e.termLogin("lxc", 201)
	if got := tc.closed(); got != "201 is not running\r\n" {
		t.Fatalf("stopped CT: %q", got)
	}
}

// TestTermproxyGuestStops: the console ends when the container stops.
func TestTermproxyGuestStops(t *testing.T) {
	t.Parallel()
	e := consoleEnv(t)
	tc, _ := e.termLogin("lxc", 200)
	tc.until("# ")
	e.post("pve1", "/nodes/pve1/lxc/200/status/stop", nil)
	e.c.Advance(time.Minute)
	tc.closed()
}

// TestTermproxyLogin: termproxy's login line must carry the pinned ticket
// for the user it was issued to; anything else ends the connection without
// "OK" and the worker fails.
func TestTermproxyLogin(t *testing.T) {
	t.Parallel()
	e := consoleEnv(t)
	for name, line := range map[string]func(a proxyAnswer) string{
		"other user":   func(a proxyAnswer) string { return "root@pam:" + a.Ticket + "\n" },
		"other ticket": func(a proxyAnswer) string { return a.User + ":" + a.Ticket[:len(a.Ticket)-2] + "AA\n" },
		"no colon":     func(a proxyAnswer) string { return a.Ticket + "\n" },
	} {
		a := e.openProxy("lxc", 200, "termproxy", nil)
		ws, err := e.dialConsole("lxc", 200, a)
		if err != nil {
			t.Fatal(err)
		}
		tc := &termClient{t: t, ws: ws}
		tc.send(line(a))
		if got := tc.closed(); got != "" {
			t.Fatalf("%s: got %q", name, got)
		}
		st := e.wait(a.UPID)
		if st.ExitStatus == "OK" {
			t.Fatalf("%s: task %+v", name, st)
		}
	}
	// A ticket line longer than termproxy's buffer.
	a := e.openProxy("lxc", 200, "termproxy", nil)
	ws, err := e.dialConsole("lxc", 200, a)
	if err != nil {
		t.Fatal(err)
	}
	tc := &termClient{t: t, ws: ws}
	tc.send(strings.Repeat("x", termTicketLineMax+10))
	if got := tc.closed(); got != "" {
		t.Fatalf("long line: %q", got)
	}
}

// TestConsoleTickets: vncwebsocket checks the ticket as
// verify_vnc_ticket does — user, guest, port and age.
func TestConsoleTickets(t *testing.T) {
	t.Parallel()
	e := consoleEnv(t)
	a := e.openProxy("lxc", 200, "termproxy", nil)
	get := func(path string, q url.Values, auth string) result {
		c := call{path: path, query: q}
		if auth != "" {
			c.noAuth = true
			c.headers = map[string]string{"Authorization": auth}
		}
		return e.do(c)
	}
	q := func(port int, ticket string) url.Values {
		return url.Values{"port": {strconv.Itoa(port)}, "vncticket": {ticket}}
	}
	const bad = "500 permission denied - invalid PVEVNC ticket"
	// Without an Upgrade the answer is {port}.
	r := get("/nodes/pve1/lxc/200/vncwebsocket", q(a.Port, a.Ticket), "")
	if r.status != 200 || string(r.data) != `{"port":"5900"}` {
		t.Fatalf("plain GET: %s %s", r.line, r.body)
	}
	wantLine(t, get("/nodes/pve1/lxc/200/vncwebsocket", q(a.Port+1, a.Ticket), ""), 500, bad)
	wantLine(t, get("/nodes/pve1/lxc/201/vncwebsocket", q(a.Port, a.Ticket), ""), 500, bad)
	wantLine(t, get("/nodes/pve1/lxc/200/vncwebsocket", q(a.Port, a.Ticket), "PVEAPIToken="+otherConsoleToken+"="+consoleSecret), 500, bad)
	wantLine(t, get("/nodes/pve1/lxc/200/vncwebsocket", q(a.Port, strings.Replace(a.Ticket, "PVEVNC:", "PVEVNC:0", 1)), ""), 500, bad)
	// The VNC ticket with its password in front is accepted too.
	v := e.openProxy("qemu", 100, "vncproxy", url.Values{"websocket": {"1"}})
	if len(v.Password) != 8 || !strings.HasPrefix(v.Ticket, v.Password+":PVEVNC:") || v.Cert == "" {
		t.Fatalf("vncproxy answer %+v", v)
	}
	r = get("/nodes/pve1/qemu/100/vncwebsocket", q(v.Port, v.Ticket), "")
	if r.status != 200 || string(r.data) != `{"port":"5901"}` {
		t.Fatalf("vnc ticket: %s %s", r.line, r.body)
	}
	wantLine(t, get("/nodes/pve1/qemu/100/vncwebsocket", q(v.Port, strings.TrimPrefix(v.Ticket, v.Password+":")), ""), 200, "200 OK")
	// The token needs VM.Console.
	wantLine(t, e.do(call{method: "POST", path: "/nodes/pve1/lxc/200/termproxy", noAuth: true,
		headers: map[string]string{"Authorization": "PVEAPIToken=" + testTokenID + "=" + testSecret}}), 403, "403 Permission check failed (/vms/200, VM.Console)")
	// A guest that is not on the node.
	wantLine(t, e.do(call{method: "POST", path: "/nodes/pve2/lxc/200/termproxy"}), 500, "500 Configuration file 'nodes/pve2/lxc/200.conf' does not exist")
	// 40 s later the ticket has expired.
	e.c.Advance(40 * time.Second)
	wantLine(t, get("/nodes/pve1/lxc/200/vncwebsocket", q(a.Port, a.Ticket), ""), 500, bad)
}

// TestConsoleListener: a port takes one connection within 10 s; later, or a
// second time, nothing listens and the connection is dropped.
func TestConsoleListener(t *testing.T) {
	t.Parallel()
	e := consoleEnv(t)
	a := e.openProxy("lxc", 200, "termproxy", nil)
	b := e.openProxy("lxc", 200, "termproxy", nil)
	if a.Port != 5900 || b.Port != 5901 {
		t.Fatalf("ports %d, %d", a.Port, b.Port)
	}
	ws, err := e.dialConsole("lxc", 200, a)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if _, err := e.dialConsole("lxc", 200, a); err == nil {
		t.Fatal("a second connection to the port was taken")
	}
	e.c.Advance(consoleAcceptTimeout)
	st := e.wait(b.UPID)
	if st.ExitStatus != "failed waiting for client: timed out" {
		t.Fatalf("unused port's task: %+v", st)
	}
	if n := e.c.ConsoleListeners(); n != 0 {
		t.Fatalf("%d listeners left", n)
	}
	// The worker closes its listening socket once it has its connection,
	// so both ports are free again.
	if c := e.openProxy("lxc", 200, "termproxy", nil); c.Port != 5900 {
		t.Fatalf("next port %d", c.Port)
	}
}

// TestConsoleWebsocketUpgrade: pveproxy's checks of the upgrade itself.
func TestConsoleWebsocketUpgrade(t *testing.T) {
	t.Parallel()
	e := consoleEnv(t)
	a := e.openProxy("lxc", 200, "termproxy", nil)
	q := url.Values{"port": {strconv.Itoa(a.Port)}, "vncticket": {a.Ticket}}
	base := map[string]string{"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
		"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Protocol": "binary", "Authorization": e.auth}
	for _, tc := range []struct{ header, value, line string }{
		{"Sec-WebSocket-Version", "8", "501 unsupported websocket-version '8'"},
		{"Sec-WebSocket-Protocol", "", "501 missing websocket-protocol header"},
		{"Sec-WebSocket-Protocol", "chat", "501 unsupported websocket-protocol protocol 'chat'"},
		{"Upgrade", "h2c", "501 unable to upgrade to protocol 'h2c'"},
	} {
		h := map[string]string{}
		for k, v := range base {
			h[k] = v
		}
		h[tc.header] = tc.value
		wantLine(t, e.do(call{path: "/nodes/pve1/lxc/200/vncwebsocket", query: q, noAuth: true, headers: h}), 501, tc.line)
	}
}

// TestDevClusterConsoles: the dev token may open consoles, and VM 100's
// terminal is its serial port.
func TestDevClusterConsoles(t *testing.T) {
	t.Parallel()
	c := DevCluster(Options{ManualClock: true, Start: testStart})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := c.Serve(ctx, ServeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	e := &env{t: t, c: c, srv: srv, eps: map[string]Endpoint{}, client: &http.Client{Timeout: 20 * time.Second},
		auth: "PVEAPIToken=" + c.DevToken()}
	for _, ep := range srv.Endpoints() {
		e.eps[ep.Node] = ep
	}
	tc, _ := e.termLogin("qemu", 100)
	if got := tc.until("root@web1:~# "); got != "starting serial terminal on interface serial0\r\nroot@web1:~# " {
		t.Fatalf("VM 100's terminal: %q", got)
	}
	tc, _ = e.termLogin("lxc", 200)
	tc.typeText("hostname\r")
	tc.until("\r\nproxy\r\n")
}

// TestConsoleEnds: a console ends with its guest (a VM's VNC when the VM
// stops) and with its node's endpoint (the node cut off).
func TestConsoleEnds(t *testing.T) {
	t.Parallel()
	e := consoleEnv(t)
	a := e.openProxy("qemu", 100, "vncproxy", url.Values{"websocket": {"1"}})
	rc := &rfbClient{t: t, conn: e.dialRFB("qemu", 100, a)}
	if res := rc.securityTo(a.Password); res != 0 {
		t.Fatalf("SecurityResult %d", res)
	}
	rc.init()
	e.post("pve1", "/nodes/pve1/qemu/100/status/stop", nil)
	e.c.Advance(time.Minute)
	if _, err := io.ReadFull(rc.conn, make([]byte, 1)); err == nil {
		t.Fatal("the VNC console outlived its VM")
	}
	if st := e.wait(a.UPID); st.ExitStatus != "OK" {
		t.Fatalf("task %+v", st)
	}

	tc, _ := e.termLogin("lxc", 200)
	tc.until("# ")
	if err := e.c.SetNodeOnline("pve1", false); err != nil {
		t.Fatal(err)
	}
	tc.closed()
	testkit.Until(t, "the console session ends", func() bool { return e.c.ConsoleSessions() == 0 })
}

// TestConsolesBeforeTicketPorts: PVE 8.x's consoles — tickets bound to user
// and guest but not to the port, no password in front; the ticket itself is
// the VNC password unless generate-password asks for one; termproxy checks
// the ticket it is given.
func TestConsolesBeforeTicketPorts(t *testing.T) {
	t.Parallel()
	for _, release := range []string{"8.0", "8.3", "8.4"} {
		t.Run(release, func(t *testing.T) {
			t.Parallel()
			e := consoleEnvAs(t, release)
			tc, a := e.termLogin("lxc", 200)
			if !strings.HasPrefix(a.Ticket, "PVEVNC:") {
				t.Fatalf("ticket %q", a.Ticket)
			}
			tc.typeText("hostname\r")
			tc.until("\r\nct200\r\n")
			// Any port passes vncwebsocket's check (the VNC password guards it).
			r := e.do(call{path: "/nodes/pve1/lxc/200/vncwebsocket", query: url.Values{"port": {"5999"}, "vncticket": {a.Ticket}}})
			if r.status != 200 || string(r.data) != `{"port":"5999"}` {
				t.Fatalf("other port: %s %s", r.line, r.body)
			}
			v := e.openProxy("qemu", 100, "vncproxy", url.Values{"websocket": {"1"}})
			if v.Password != "" || !strings.HasPrefix(v.Ticket, "PVEVNC:") {
				t.Fatalf("vncproxy %+v", v)
			}
			rc := &rfbClient{t: t, conn: e.dialRFB("qemu", 100, v)}
			if res := rc.securityTo(v.Ticket); res != 0 {
				t.Fatalf("the ticket as VNC password: SecurityResult %d", res)
			}
			v = e.openProxy("qemu", 100, "vncproxy", url.Values{"websocket": {"1"}, "generate-password": {"1"}})
			if len(v.Password) != 8 || !strings.HasPrefix(v.Ticket, "PVEVNC:") {
				t.Fatalf("vncproxy with generate-password %+v", v)
			}
			rc = &rfbClient{t: t, conn: e.dialRFB("qemu", 100, v)}
			if res := rc.securityTo(v.Password); res != 0 {
				t.Fatalf("the generated password: SecurityResult %d", res)
			}
			v = e.openProxy("lxc", 200, "vncproxy", url.Values{"websocket": {"1"}})
			rc = &rfbClient{t: t, conn: e.dialRFB("lxc", 200, v)}
			if res := rc.securityTo(v.Ticket); v.Password != "" || res != 0 {
				t.Fatalf("vncterm: password %q, SecurityResult %d", v.Password, res)
			}
		})
	}
}

// TestConsolePortsRunOut: a node has 100 console ports; the 101st waiting
// worker gets next_vnc_port's error, and a port comes back when its worker
// gives up.
func TestConsolePortsRunOut(t *testing.T) {
	t.Parallel()
	e := consoleEnv(t)
	for i := 0; i < 100; i++ {
		e.openProxy("lxc", 200, "termproxy", nil)
	}
	wantLine(t, e.do(call{method: "POST", path: "/nodes/pve1/lxc/200/termproxy"}), 500, "500 unable to find free port (5900-5999)")
	// Another node has its own ports.
	if a := e.openProxy2("pve2", "lxc", 200, "termproxy"); a.Port != 5900 {
		t.Fatalf("pve2's first port %d", a.Port)
	}
	e.c.Advance(consoleAcceptTimeout)
	if n := e.c.ConsoleListeners(); n != 0 {
		t.Fatalf("%d listeners after the timeout", n)
	}
	if a := e.openProxy("lxc", 200, "termproxy", nil); a.Port != 5900 {
		t.Fatalf("port after the timeout %d", a.Port)
	}
}

// openProxy2 calls a proxy method at another node's endpoint for a guest on
// pve1 (served by that node, as PVE reaches the guest over ssh).
func (e *env) openProxy2(endpoint, kind string, vmid int, method string) proxyAnswer {
	e.t.Helper()
	r := e.do(call{node: endpoint, method: "POST", path: "/nodes/pve1/" + kind + "/" + strconv.Itoa(vmid) + "/" + method})
	if r.status != 200 {
		e.t.Fatalf("%s: %s %s", method, r.line, r.body)
	}
	return decodeData[proxyAnswer](e.t, r)
}

// TestConsoleEndpoint: the port is on the node that received vncproxy (or
// termproxy); vncwebsocket at another node's endpoint finds nothing there.
func TestConsoleEndpoint(t *testing.T) {
	t.Parallel()
	e := consoleEnv(t)
	a := e.openProxy2("pve2", "lxc", 200, "termproxy")
	if _, err := e.dialConsoleAt("pve1", "lxc", 200, a); err == nil {
		t.Fatal("pve1 relayed to pve2's console port")
	}
	ws, err := e.dialConsoleAt("pve2", "lxc", 200, a)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	tc := &termClient{t: t, ws: ws}
	tc.send(a.User + ":" + a.Ticket + "\n")
	tc.until("OK")
	tc.until("root@ct200:~# ")
}

// TestConsoleOverTLS: vncwebsocket upgrades on pveproxy's HTTPS as well.
func TestConsoleOverTLS(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{serve: ServeOptions{TLS: true}, build: func(c *Cluster) {
		addCT(t, c, CTSpec{VMID: 200, Node: "pve1", Hostname: "ct200", Running: true})
		if err := c.AddToken(consoleTokenID, consoleSecret, TokenOptions{VMPrivileges: []string{"VM.Console"}}); err != nil {
			t.Fatal(err)
		}
	}})
	e.auth = "PVEAPIToken=" + consoleTokenID + "=" + consoleSecret
	a := e.openProxy("lxc", 200, "termproxy", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, wsURL(e, "pve1", "lxc", 200, a), &websocket.DialOptions{
		Subprotocols: []string{"binary"},
		HTTPHeader:   http.Header{"Authorization": {e.auth}},
		HTTPClient:   e.client,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	tc := &termClient{t: t, ws: ws}
	tc.send(a.User + ":" + a.Ticket + "\n")
	tc.until("OK")
	tc.typeText("echo tls\r")
	tc.until("\r\ntls\r\n")
}
