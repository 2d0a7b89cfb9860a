package httpapi

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// docs/security.md item 22 on a live socket: a client that sends its headers too slowly,
// its body too slowly, or leaves a kept-alive connection idle is cut off at the
// server's timeouts. The timeouts are made short for the test; what is asserted is
// that the server closed the connection (the client reads EOF or a reset well
// before its own, generous, deadline), never how fast.

// cutGuard is how long the client waits for the server to hang up: far longer
// than the short timeouts, so a busy machine does not fail the test, while a
// server without timeouts is still caught (the client's own deadline fires).
const cutGuard = 20 * time.Second

// liveServer serves the API on a loopback socket with short timeouts.
func liveServer(t *testing.T, e *testEnv) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := NewHTTPServerWith("", e.api, nil, Timeouts{ReadHeader: 150 * time.Millisecond, Read: 300 * time.Millisecond,
		Write: 10 * time.Second, Idle: 200 * time.Millisecond})
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

// waitForHangUp reads from c until the server closes it and returns what it read.
// It fails t when the client's own deadline comes first: the server never cut.
func waitForHangUp(t *testing.T, c net.Conn, what string) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(cutGuard))
	b, err := io.ReadAll(c)
	var ne net.Error
	switch {
	case err == nil, errors.Is(err, net.ErrClosed):
	case errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded):
		t.Fatalf("%s: the server kept the connection open for %v", what, cutGuard)
	default: // a reset is a cut too
	}
	return string(b)
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestSlowHeadersAreCut (docs/security.md item 22): half a request head, then silence.
func TestSlowHeadersAreCut(t *testing.T) {
	e := newTestEnv(t)
	c := dial(t, liveServer(t, e))
	// Half a request head, then nothing.
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: vmgate\r\nX-Slow: "); err != nil {
		t.Fatal(err)
	}
	if got := waitForHangUp(t, c, "slow headers"); strings.Contains(got, " 200 ") {
		t.Errorf("slow headers were answered: %q", got)
	}
}

// TestSlowBodyIsCut (docs/security.md item 22): a head announcing a body, a few bytes of it, then silence.
func TestSlowBodyIsCut(t *testing.T) {
	e := newTestEnv(t)
	c := dial(t, liveServer(t, e))
	// A whole head announcing 200 bytes, a few of them, then nothing.
	head := "POST /api/v1/user/login HTTP/1.1\r\nHost: vmgate\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n"
	if _, err := io.WriteString(c, head+`{"email":"ann@exa`); err != nil {
		t.Fatal(err)
	}
	got := waitForHangUp(t, c, "slow body")
	if strings.Contains(got, " 200 ") || strings.Contains(got, " 401 ") {
		t.Errorf("a body that never came was used: %q", got)
	}
}

// TestIdleConnectionIsCut (docs/security.md item 22): a kept-alive connection left idle.
func TestIdleConnectionIsCut(t *testing.T) {
	e := newTestEnv(t)
	c := dial(t, liveServer(t, e))
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: vmgate\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(cutGuard))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Close {
		t.Fatalf("first request: %d, close %v", resp.StatusCode, resp.Close)
	}
	// Kept alive, then idle: the server hangs up.
	c.SetReadDeadline(time.Now().Add(cutGuard))
	rest, err := io.ReadAll(br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the idle connection was kept for %v", cutGuard)
	}
	if len(rest) != 0 {
		t.Errorf("the server said more on an idle connection: %q", rest)
	}
}
