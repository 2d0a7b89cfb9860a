// Package connlimit caps the connections a vmgate process holds open: in total,
// and per client network, so that one client cannot take every file descriptor
// (docs/security.md item 34; one client held 3 000 idle keep-alive connections and 3 000
// slow ones, 21 → 6 021 descriptors).
//
// A Listener wraps the server's listener and learns each connection's state from
// the http.Server's ConnState hook. When a new connection would pass a cap, the
// connection of that client network (or, for the total, of anyone) that has been
// idle between requests the longest is closed to make room; when none is idle the
// new connection is refused — closed at once, before a byte is read
// (docs/decisions/0039). An idle keep-alive connection costs a client nothing to
// keep and may be reopened at will; a connection in the middle of a request is
// never cut for another.
//
// Counting is by the TCP peer: behind a reverse proxy every client is the
// proxy's address, which is why the addresses in Exempt (the trusted proxies) are
// capped by the total only.
package connlimit

import (
	"container/list"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Default caps (docs/security.md item 34). A browser holds 6 connections to a site over
// HTTP/1.1 and one over HTTP/2, the CLI one or two; 256 leaves room for dozens of
// people behind one NAT address. 4 096 stays far below a service's descriptor
// limit (systemd's hard limit is 524 288, which Go raises the soft one to) with
// room for the database and PVE connections.
const (
	DefaultTotal      = 4096
	DefaultPerNetwork = 256
)

// Limits are a Listener's caps. Zero takes the default; a negative cap is none.
type Limits struct {
	Total      int // connections open at once
	PerNetwork int // connections open at once from one client network
	// IPv4Prefix and IPv6Prefix make a client network of an address, as the login
	// throttling does (default 32 and 64: an IPv6 client has a /64 to choose from).
	IPv4Prefix, IPv6Prefix int
	// Exempt peers are capped by Total only: the trusted proxies, which carry
	// many clients on one address.
	Exempt []netip.Prefix
	// Logger warns, at most once a minute, that a cap refused connections.
	Logger *slog.Logger
	// Now is the clock of those warnings (default time.Now).
	Now func() time.Time
}

// Stats are a Listener's counts.
type Stats struct {
	Open             int   // connections open now
	Idle             int   // of them, idle between requests
	Refused          int64 // refused since the start: a cap was reached and no connection was idle
	RefusedNetwork   int64 // of them, by the cap of a client network
	Reclaimed        int64 // idle connections closed to make room for a new one
	ReclaimedNetwork int64 // of them, by the cap of a client network
}

// Listener is a net.Listener that holds connections within Limits. Set the
// http.Server's ConnState to its ConnState, so that it knows which connections
// are idle. It is safe for concurrent use.
type Listener struct {
	net.Listener
	total, perNet int
	v4, v6        int
	exempt        []netip.Prefix
	log           *slog.Logger
	now           func() time.Time

	mu       sync.Mutex
	open     int
	networks map[string]*network
	idle     list.List // *conn, idle the longest first
	stats    Stats
	warned   time.Time
}

// network is what the Listener counts of one client network.
type network struct {
	open int
	idle list.List // *conn, idle the longest first
}

// New wraps ln.
func New(ln net.Listener, l Limits) *Listener {
	out := &Listener{Listener: ln, total: capOf(l.Total, DefaultTotal), perNet: capOf(l.PerNetwork, DefaultPerNetwork),
		v4: l.IPv4Prefix, v6: l.IPv6Prefix, exempt: l.Exempt, log: l.Logger, now: l.Now, networks: map[string]*network{}}
	if out.v4 <= 0 || out.v4 > 32 {
		out.v4 = 32
	}
	if out.v6 <= 0 || out.v6 > 128 {
		out.v6 = 64
	}
	if out.log == nil {
		out.log = slog.New(slog.DiscardHandler)
	}
	if out.now == nil {
		out.now = time.Now
	}
	return out
}

func capOf(v, def int) int {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0 // no cap
	}
	return v
}

// conn is an accepted connection, counted until it closes.
type conn struct {
	net.Conn
	l      *Listener
	net    *network // nil: exempt from the network's cap
	key    string
	closed bool          // guarded by l.mu: no longer counted
	idle   *list.Element // guarded by l.mu: in l.idle while idle
	netIdl *list.Element // guarded by l.mu: in net.idle while idle
}

// Close stops counting the connection and closes it.
func (c *conn) Close() error {
	c.l.forget(c)
	return c.Conn.Close()
}

// Accept returns the next connection within the caps. A connection past a cap
// with nothing idle to reclaim is closed here, and Accept waits for the next.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c, victims, why := l.admit(nc)
		for _, v := range victims {
			v.Conn.Close() // the server's goroutine sees it and lets go
		}
		if c == nil {
			nc.Close()
			l.warn(why, nc.RemoteAddr())
			continue
		}
		return c, nil
	}
}

// admit counts nc in, or says why it cannot be. To make room it takes idle
// connections out of the count, which the caller closes.
func (l *Listener) admit(nc net.Conn) (c *conn, victims []*conn, why string) {
	key, exempt := l.networkOf(nc.RemoteAddr())
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.networks[key]
	if n == nil && !exempt {
		n = &network{}
	}
	if n != nil && !exempt && l.perNet > 0 && n.open >= l.perNet {
		e := n.idle.Front()
		if e == nil {
			l.stats.Refused++
			l.stats.RefusedNetwork++
			return nil, nil, "network"
		}
		v := e.Value.(*conn)
		l.drop(v)
		l.stats.Reclaimed++
		l.stats.ReclaimedNetwork++
		victims = append(victims, v)
	}
	if l.total > 0 && l.open >= l.total {
		e := l.idle.Front()
		if e == nil {
			l.stats.Refused++
			return nil, victims, "total"
		}
		v := e.Value.(*conn)
		l.drop(v)
		l.stats.Reclaimed++
		victims = append(victims, v)
	}
	c = &conn{Conn: nc, l: l, key: key}
	if !exempt {
		c.net = n
		n.open++
		l.networks[key] = n
	}
	l.open++
	return c, victims, ""
}

// networkOf is the client network of a peer address, and whether it is exempt
// from the network's cap.
func (l *Listener) networkOf(a net.Addr) (string, bool) {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return a.String(), false
	}
	ip := ap.Addr().Unmap()
	for _, p := range l.exempt {
		if p.Contains(ip) {
			return "", true
		}
	}
	bits := l.v6
	if ip.Is4() {
		bits = l.v4
	}
	p, err := ip.Prefix(bits)
	if err != nil {
		return ip.String(), false
	}
	return p.String(), false
}

// drop stops counting c (l.mu held).
func (l *Listener) drop(c *conn) {
	if c.closed {
		return
	}
	c.closed = true
	l.setBusy(c)
	l.open--
	if c.net != nil {
		if c.net.open--; c.net.open == 0 {
			delete(l.networks, c.key)
		}
	}
}

// setBusy takes c off the idle lists (l.mu held).
func (l *Listener) setBusy(c *conn) {
	if c.idle != nil {
		l.idle.Remove(c.idle)
		c.idle = nil
	}
	if c.netIdl != nil {
		c.net.idle.Remove(c.netIdl)
		c.netIdl = nil
	}
}

func (l *Listener) forget(c *conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.drop(c)
}

// ConnState is the http.Server's ConnState hook: a connection idle between
// requests may be closed to make room; one that is not may not.
func (l *Listener) ConnState(nc net.Conn, state http.ConnState) {
	c, ok := unwrap(nc)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.closed {
		return
	}
	switch state {
	case http.StateIdle:
		if c.idle == nil {
			c.idle = l.idle.PushBack(c)
			if c.net != nil {
				c.netIdl = c.net.idle.PushBack(c)
			}
		}
	case http.StateClosed:
		l.drop(c)
	default: // new, active, hijacked: in use
		l.setBusy(c)
	}
}

// unwrap finds the Listener's conn under what the server holds (a *tls.Conn over
// HTTPS).
func unwrap(nc net.Conn) (*conn, bool) {
	for {
		if c, ok := nc.(*conn); ok {
			return c, true
		}
		w, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			return nil, false
		}
		nc = w.NetConn()
	}
}

// Stats returns the counts now.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.stats
	st.Open, st.Idle = l.open, l.idle.Len()
	return st
}

// warn logs a refusal, at most once a minute: the metrics count them all.
func (l *Listener) warn(why string, peer net.Addr) {
	now := l.now()
	l.mu.Lock()
	quiet := now.Sub(l.warned) < time.Minute
	if !quiet {
		l.warned = now
	}
	l.mu.Unlock()
	if quiet {
		return
	}
	switch why {
	case "network":
		l.log.Warn("refusing connections: a client network holds as many as it may, none of them idle (--max-connections-per-client)",
			"peer", peer.String(), "cap", l.perNet)
	default:
		l.log.Warn("refusing connections: as many are open as may be, none of them idle (--max-connections)",
			"peer", peer.String(), "cap", l.total)
	}
}

var (
	descOpen = prometheus.NewDesc("vmgate_connections_open",
		"Client connections open now (the main listener).", nil, nil)
	descIdle = prometheus.NewDesc("vmgate_connections_idle",
		"Of the open client connections, those idle between requests.", nil, nil)
	descRefused = prometheus.NewDesc("vmgate_connections_refused_total",
		"Client connections closed at accept: a cap was reached and none was idle, by cap (total, network).", []string{"cap"}, nil)
	descReclaimed = prometheus.NewDesc("vmgate_connections_reclaimed_total",
		"Idle client connections closed to make room for a new one, by cap (total, network).", []string{"cap"}, nil)
)

// Describe implements prometheus.Collector.
func (l *Listener) Describe(ch chan<- *prometheus.Desc) {
	ch <- descOpen
	ch <- descIdle
	ch <- descRefused
	ch <- descReclaimed
}

// Collect implements prometheus.Collector.
func (l *Listener) Collect(ch chan<- prometheus.Metric) {
	st := l.Stats()
	ch <- prometheus.MustNewConstMetric(descOpen, prometheus.GaugeValue, float64(st.Open))
	ch <- prometheus.MustNewConstMetric(descIdle, prometheus.GaugeValue, float64(st.Idle))
	ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(st.Refused-st.RefusedNetwork), "total")
	ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(st.RefusedNetwork), "network")
	ch <- prometheus.MustNewConstMetric(descReclaimed, prometheus.CounterValue, float64(st.Reclaimed-st.ReclaimedNetwork), "total")
	ch <- prometheus.MustNewConstMetric(descReclaimed, prometheus.CounterValue, float64(st.ReclaimedNetwork), "network")
}
