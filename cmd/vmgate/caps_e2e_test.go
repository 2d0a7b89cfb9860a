package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/testkit"
)

// TestConnectionCapsOnRealBinary (docs/security.md item 34): the real server with
// --max-connections-per-client 2 holds two silent connections of one client
// network and closes its third at once, counted in
// vmgate_connections_refused_total; another network (127.0.0.2) is served and
// reads the metrics. Counted, never timed: the only waits poll the metrics.
func TestConnectionCapsOnRealBinary(t *testing.T) {
	t.Parallel()
	p := start(t, nil, "server", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(),
		"--max-connections-per-client", "2", "--idle-timeout", "1h")
	base := p.line(t, listening)[1]
	host := strings.TrimPrefix(base, "http://")

	other := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	metric := func(name string) string {
		t.Helper()
		resp, err := other.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, name+" "); ok {
				return v
			}
		}
		t.Fatalf("no %s in the metrics:\n%s", name, b)
		return ""
	}
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(30 * time.Second)) // a safety net only
		return c
	}
	held := []net.Conn{dial(), dial()}
	// Two held, and the metrics reader's own connection.
	testkit.Until(t, "the two held connections counted (3 open)", func() bool { return metric("vmgate_connections_open") == "3" })
	if _, err := bufio.NewReader(dial()).ReadByte(); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("the third connection of the network was not closed: %v", err)
	}
	if got := metric(`vmgate_connections_refused_total{cap="network"}`); got != "1" {
		t.Fatalf("refused by the network's cap: %s, want 1", got)
	}
	// The held ones are served.
	for i, c := range held {
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: vmgate\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("held connection %d: %v %v", i, resp, err)
		}
		resp.Body.Close()
	}
}
