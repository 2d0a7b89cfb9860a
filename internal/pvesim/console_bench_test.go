package pvesim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// benchConsole serves a cluster with VM 100 and CT 200 (running) and
// returns a function that opens a console as PVE's clients do: the proxy
// call, then vncwebsocket.
func benchConsole(b *testing.B) func(kind string, vmid int, method string) (proxyAnswer, *websocket.Conn) {
	c := New(Options{ManualClock: true, Start: testStart})
	must(c.AddNode(NodeSpec{Name: "pve1"}))
	must(c.AddVM(VMSpec{VMID: 100, Node: "pve1", Name: "web1", Running: true}))
	must(c.AddCT(CTSpec{VMID: 200, Node: "pve1", Hostname: "ct200", Running: true}))
	must(c.AddToken(consoleTokenID, consoleSecret, TokenOptions{VMPrivileges: []string{"VM.Console"}}))
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := c.Serve(ctx, ServeOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close(); cancel() })
	base := srv.Endpoints()[0].URL + "/api2/json/nodes/pve1/"
	auth := "PVEAPIToken=" + consoleTokenID + "=" + consoleSecret
	return func(kind string, vmid int, method string) (proxyAnswer, *websocket.Conn) {
		form := url.Values{"websocket": {"1"}}
		if method == "termproxy" {
			form = nil
		}
		req, _ := http.NewRequest("POST", base+kind+"/"+strconv.Itoa(vmid)+"/"+method, strings.NewReader(form.Encode()))
		req.Header.Set("Authorization", auth)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var env struct{ Data proxyAnswer }
		if err := json.Unmarshal(body, &env); err != nil {
			b.Fatalf("%s: %s", method, body)
		}
		a := env.Data
		q := url.Values{"port": {strconv.Itoa(a.Port)}, "vncticket": {a.Ticket}}
		ws, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(base, "http")+kind+"/"+strconv.Itoa(vmid)+"/vncwebsocket?"+q.Encode(),
			&websocket.DialOptions{Subprotocols: []string{"binary"}, HTTPHeader: http.Header{"Authorization": {auth}}})
		if err != nil {
			b.Fatal(err)
		}
		ws.SetReadLimit(8 << 20)
		b.Cleanup(func() { ws.CloseNow() })
		return a, ws
	}
}

// BenchmarkConsoleKeystrokeEcho: one key typed on a container's terminal
// until its echo is back, directly against the emulator (the baseline of
// issue 21's keystroke goal); reports p50 and p99.
func BenchmarkConsoleKeystrokeEcho(b *testing.B) {
	open := benchConsole(b)
	a, ws := open("lxc", 200, "termproxy")
	tc := &termClient{t: b, ws: ws}
	tc.send(a.User + ":" + a.Ticket + "\n")
	tc.until("OK")
	tc.until("# ")
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		tc.typeText("x")
		tc.until("x")
		lat = append(lat, time.Since(start))
		if i%1000 == 999 {
			tc.typeText("\x15") // ^U: keep the line short
			tc.until("\b \b")
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkConsoleFramebuffer: full 1024×768 Raw updates of a VM's VNC
// console, directly against the emulator (the baseline of issue 21's
// framebuffer goal).
func BenchmarkConsoleFramebuffer(b *testing.B) {
	open := benchConsole(b)
	a, ws := open("qemu", 100, "vncproxy")
	nc := websocket.NetConn(context.Background(), ws, websocket.MessageBinary)
	rc := &rfbClient{t: b, conn: nc}
	if res := rc.securityTo(a.Password); res != 0 {
		b.Fatalf("SecurityResult %d", res)
	}
	rc.init()
	frame := 16 + rc.w*rc.h*4
	buf := make([]byte, frame)
	b.SetBytes(int64(frame))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rc.request(false, 0, 0, rc.w, rc.h)
		if _, err := io.ReadFull(nc, buf); err != nil {
			b.Fatal(err)
		}
	}
}
