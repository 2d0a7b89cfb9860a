package connlimit

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmgate/vmgate/internal/testkit"
)

// server is an HTTP server (plain or TLS) on loopback behind a Listener.
type server struct {
	t    *testing.T
	l    *Listener
	addr string
	tls  bool
}

func newServer(t *testing.T, lim Limits, useTLS bool) *server {
	t.Helper()
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	l := New(ts.Listener, lim)
	ts.Listener = l
	ts.Config.ConnState = l.ConnState // httptest calls it from its own hook
	if useTLS {
		ts.StartTLS()
	} else {
		ts.Start()
	}
	t.Cleanup(ts.Close)
	return &server{t: t, l: l, addr: ts.Listener.Addr().String(), tls: useTLS}
}

// client is one raw connection to the server, from a loopback address of its own
// choosing (127.0.0.0/8 is all loopback on Linux: each address its own network).
type client struct {
	s  *server
	c  net.Conn
	br *bufio.Reader
}

func (s *server) dial(from string) *client {
	s.t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", s.addr)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { c.Close() })
	if s.tls {
		// The handshake waits for the server's Accept, so a refused connection
		// fails here (or at its first read).
		c = tls.Client(c, &tls.Config{InsecureSkipVerify: true})
	}
	// A safety net against a test that would hang; no assertion here is timed.
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return &client{s: s, c: c, br: bufio.NewReader(c)}
}

// get sends one keep-alive request and reads its answer; false when the server
// closed the connection instead.
func (c *client) get() bool {
	c.s.t.Helper()
	if _, err := io.WriteString(c.c, "GET / HTTP/1.1\r\nHost: vmgate\r\n\r\n"); err != nil {
		return false
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return err == nil && resp.StatusCode == http.StatusOK && string(b) == "ok"
}

// closedByServer reports whether the server closed the connection without a
// word: a read returns EOF (or a reset), not data and not the safety deadline.
func (c *client) closedByServer() bool {
	c.s.t.Helper()
	if tc, ok := c.c.(*tls.Conn); ok {
		if err := tc.Handshake(); err != nil {
			return !isTimeout(err)
		}
	}
	_, err := c.br.ReadByte()
	return err != nil && !isTimeout(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// until polls the Listener's counts until cond holds (the server accepts and
// changes states on goroutines of its own); it fails past a deadline.
func (s *server) until(what string, cond func(Stats) bool) {
	s.t.Helper()
	testkit.Eventually(s.t, what, func() error {
		if st := s.l.Stats(); !cond(st) {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
}

// TestACapRefusesWhenNothingIsIdle (docs/security.md item 34): three connections of one
// client network that have sent nothing fill its cap of 3; the fourth is closed
// at once and counted, exactly one refused; another network is not held by them;
// and the three are served afterwards, none cut for the refused one.
func TestACapRefusesWhenNothingIsIdle(t *testing.T) {
	t.Parallel()
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "https"}[useTLS], func(t *testing.T) {
			t.Parallel()
			s := newServer(t, Limits{Total: 100, PerNetwork: 3}, useTLS)
			var held []*client
			for i := range 3 {
				held = append(held, s.dial("127.0.0.1"))
				s.until("accepted", func(st Stats) bool { return st.Open == i+1 })
			}
			if over := s.dial("127.0.0.1"); !over.closedByServer() {
				t.Fatal("the fourth connection of the network was not closed")
			}
			st := s.l.Stats()
			if st.Refused != 1 || st.RefusedNetwork != 1 || st.Reclaimed != 0 || st.Open != 3 {
				t.Fatalf("stats %+v, want 1 refused by the network's cap and 3 open", st)
			}
			other := s.dial("127.0.0.2")
			if !other.get() {
				t.Fatal("another network was refused")
			}
			for i, c := range held {
				if !c.get() {
					t.Fatalf("held connection %d was cut", i)
				}
			}
			if st := s.l.Stats(); st.Refused != 1 || st.Open != 4 {
				t.Fatalf("stats %+v, want still 1 refused, 4 open", st)
			}
		})
	}
}

// TestACapReclaimsTheLongestIdle (docs/security.md item 34, docs/decisions/0039): when a
// client network holds its cap of 3 and all are idle keep-alive connections, a
// new one is admitted and the one idle the longest is closed — exactly that one;
// the others still serve. Over HTTPS too, where the server's ConnState sees the
// TLS connection.
func TestACapReclaimsTheLongestIdle(t *testing.T) {
	t.Parallel()
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "https"}[useTLS], func(t *testing.T) {
			t.Parallel()
			s := newServer(t, Limits{Total: 100, PerNetwork: 3}, useTLS)
			var idle []*client
			for i := range 3 {
				c := s.dial("127.0.0.1")
				if !c.get() {
					t.Fatalf("connection %d not served", i)
				}
				idle = append(idle, c)
				s.until("idle in order", func(st Stats) bool { return st.Idle == i+1 })
			}
			fresh := s.dial("127.0.0.1")
			if !fresh.get() {
				t.Fatal("the new connection was not served")
			}
			if !idle[0].closedByServer() {
				t.Fatal("the connection idle the longest is still open")
			}
			for i, c := range idle[1:] {
				if !c.get() {
					t.Fatalf("idle connection %d was closed too", i+1)
				}
			}
			if st := s.l.Stats(); st.Reclaimed != 1 || st.ReclaimedNetwork != 1 || st.Refused != 0 || st.Open != 3 {
				t.Fatalf("stats %+v, want 1 reclaimed, none refused, 3 open", st)
			}
		})
	}
}

// TestTheTotalCapAndExemptPeers (docs/security.md item 34): a trusted proxy's address is
// held by the total cap only (3 connections past a network cap of 2); the total
// of 4 refuses the fifth connection, from anyone, when none is idle — and
// reclaims an idle one of another network when there is one.
func TestTheTotalCapAndExemptPeers(t *testing.T) {
	t.Parallel()
	s := newServer(t, Limits{Total: 4, PerNetwork: 2, Exempt: []netip.Prefix{netip.MustParsePrefix("127.0.0.3/32")}}, false)
	for i := range 3 {
		s.dial("127.0.0.3")
		s.until("the proxy's connections accepted", func(st Stats) bool { return st.Open == i+1 })
	}
	busy := s.dial("127.0.0.1")
	s.until("the fourth accepted", func(st Stats) bool { return st.Open == 4 })
	if over := s.dial("127.0.0.2"); !over.closedByServer() {
		t.Fatal("the fifth connection was not closed")
	}
	if st := s.l.Stats(); st.Refused != 1 || st.RefusedNetwork != 0 || st.Open != 4 {
		t.Fatalf("stats %+v, want 1 refused by the total", st)
	}
	// busy becomes idle: the next newcomer takes its place.
	if !busy.get() {
		t.Fatal("not served")
	}
	s.until("idle", func(st Stats) bool { return st.Idle == 1 })
	if c := s.dial("127.0.0.2"); !c.get() {
		t.Fatal("a newcomer was not served though a connection was idle")
	}
	if !busy.closedByServer() {
		t.Fatal("the idle connection was not reclaimed")
	}
	if st := s.l.Stats(); st.Reclaimed != 1 || st.ReclaimedNetwork != 0 || st.Refused != 1 || st.Open != 4 {
		t.Fatalf("stats %+v", st)
	}
}

// TestNetworkOf: a client network is the address for IPv4 (by default) and the
// /64 for IPv6, an IPv4-mapped address is IPv4, and an exempt peer has none.
func TestNetworkOf(t *testing.T) {
	t.Parallel()
	l := New(nil, Limits{Exempt: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}})
	l24 := New(nil, Limits{IPv4Prefix: 24, IPv6Prefix: 48})
	cases := []struct {
		l      *Listener
		addr   string
		key    string
		exempt bool
	}{
		{l, "192.0.2.7:5000", "192.0.2.7/32", false},
		{l, "[2001:db8:1:2:3:4:5:6]:5000", "2001:db8:1:2::/64", false},
		{l, "[::ffff:192.0.2.7]:5000", "192.0.2.7/32", false},
		{l, "10.9.8.7:5000", "", true},
		{l24, "192.0.2.7:5000", "192.0.2.0/24", false},
		{l24, "[2001:db8:1:2:3:4:5:6]:5000", "2001:db8:1::/48", false},
	}
	for _, c := range cases {
		key, exempt := c.l.networkOf(addr(c.addr))
		if key != c.key || exempt != c.exempt {
			t.Errorf("%s: %q %v, want %q %v", c.addr, key, exempt, c.key, c.exempt)
		}
	}
}

type addr string

func (a addr) Network() string { return "tcp" }
func (a addr) String() string  { return string(a) }

// TestMetrics: the counts are exported as vmgate_connections_*.
func TestMetrics(t *testing.T) {
	t.Parallel()
	s := newServer(t, Limits{Total: 100, PerNetwork: 1}, false)
	s.dial("127.0.0.1")
	s.until("accepted", func(st Stats) bool { return st.Open == 1 })
	if !s.dial("127.0.0.1").closedByServer() {
		t.Fatal("not refused")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.l)
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, lp := range m.GetLabel() {
				name += "{" + lp.GetName() + "=" + lp.GetValue() + "}"
			}
			got[name] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	for name, v := range map[string]float64{
		"vmgate_connections_open": 1, "vmgate_connections_idle": 0,
		"vmgate_connections_refused_total{cap=network}": 1, "vmgate_connections_refused_total{cap=total}": 0,
		"vmgate_connections_reclaimed_total{cap=network}": 0, "vmgate_connections_reclaimed_total{cap=total}": 0,
	} {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (%v), want %v", name, g, ok, v)
		}
	}
}
