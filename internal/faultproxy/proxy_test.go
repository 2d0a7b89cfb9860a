package faultproxy

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/testkit"
)

// echoServer echoes every connection until the test ends; it counts
// connections and bytes.
type echoServer struct {
	addr  string
	conns atomic.Int64
	bytes atomic.Int64
}

func newEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.conns.Add(1)
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						e.bytes.Add(int64(n))
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return e
}

func newProxy(t *testing.T, upstream string, opts Options) *Proxy {
	t.Helper()
	p, err := New(upstream, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// reader delivers what a connection receives, chunk by chunk, and its end.
type reader struct {
	data chan []byte
	err  chan error
}

func readAll(c net.Conn) *reader {
	r := &reader{data: make(chan []byte, 64), err: make(chan error, 1)}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				r.data <- append([]byte(nil), buf[:n]...)
			}
			if err != nil {
				r.err <- err
				return
			}
		}
	}()
	return r
}

// want reads exactly len(s) bytes and compares them.
func (r *reader) want(t *testing.T, s string) {
	t.Helper()
	var got []byte
	timeout := time.After(10 * time.Second)
	for len(got) < len(s) {
		select {
		case b := <-r.data:
			got = append(got, b...)
		case err := <-r.err:
			t.Fatalf("got %q, then %v; want %q", got, err, s)
		case <-timeout:
			t.Fatalf("got %q within 10s, want %q", got, s)
		}
	}
	if string(got) != s {
		t.Fatalf("got %q, want %q", got, s)
	}
}

// nothingYet asserts that nothing has arrived so far.
func (r *reader) nothingYet(t *testing.T) {
	t.Helper()
	select {
	case b := <-r.data:
		t.Fatalf("%q arrived while it should be held back", b)
	case err := <-r.err:
		t.Fatalf("connection ended while it should be held: %v", err)
	default:
	}
}

// end waits for the connection's end and returns the error (io.EOF for a
// clean close).
func (r *reader) end(t *testing.T) ([]byte, error) {
	t.Helper()
	var got []byte
	timeout := time.After(10 * time.Second)
	for {
		select {
		case b := <-r.data:
			got = append(got, b...)
		case err := <-r.err:
			for {
				select {
				case b := <-r.data:
					got = append(got, b...)
				default:
					return got, err
				}
			}
		case <-timeout:
			t.Fatal("the connection did not end within 10s")
		}
	}
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

func TestTransparent(t *testing.T) {
	t.Parallel()
	echo := newEcho(t)
	p := newProxy(t, echo.addr, Options{})
	c := dial(t, p)
	r := readAll(c)
	for _, msg := range []string{"hello", "world, again"} {
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatal(err)
		}
		r.want(t, msg)
	}
	c.(*net.TCPConn).CloseWrite()
	if rest, err := r.end(t); err != io.EOF || len(rest) != 0 {
		t.Fatalf("after the client's half-close: %q, %v; want a clean EOF", rest, err)
	}
	testkit.Until(t, "the connection to close", func() bool { return p.Stats().Open == 0 })
	s := p.Stats()
	want := Stats{Accepted: 1, Dials: 1, BytesToUpstream: 17, BytesToClient: 17, Requests: 2} // plain: each chunk is a request
	if s != want {
		t.Errorf("stats %+v, want %+v", s, want)
	}
}

// fakeClock moves only when told to.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.waiters = append(c.waiters, fakeWaiter{at: c.now.Add(d), ch: ch})
	return ch
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	keep := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
			continue
		}
		keep = append(keep, w)
	}
	c.waiters = keep
}

func TestLatency(t *testing.T) {
	t.Parallel()
	for _, dir := range []Direction{ToUpstream, ToClient} {
		t.Run(dir.String(), func(t *testing.T) {
			echo := newEcho(t)
			clock := &fakeClock{now: time.Unix(1_000_000, 0)}
			p := newProxy(t, echo.addr, Options{Clock: clock})
			p.Latency(dir, 2*time.Second)
			c := dial(t, p)
			r := readAll(c)
			io.WriteString(c, "ping")
			testkit.Until(t, "the chunk to wait for its latency", func() bool { return p.Waiting() == 1 })
			clock.Advance(time.Second) // not yet
			r.nothingYet(t)
			if dir == ToUpstream && echo.bytes.Load() != 0 {
				t.Fatal("the upstream got the request before its latency passed")
			}
			if p.Waiting() != 1 {
				t.Fatalf("%d chunks waiting after half the latency, want 1", p.Waiting())
			}
			clock.Advance(time.Second)
			r.want(t, "ping")
			if dir == ToClient && echo.bytes.Load() != 4 {
				t.Fatalf("upstream got %d bytes", echo.bytes.Load())
			}
			// Latency is a delay line: chunks that arrived while one waited
			// are not delayed again on top of it.
			p.Latency(dir, 0)
			io.WriteString(c, "pong")
			r.want(t, "pong")
		})
	}
}

func TestHoldAndRelease(t *testing.T) {
	t.Parallel()
	echo := newEcho(t)
	p := newProxy(t, echo.addr, Options{})
	c := dial(t, p)
	r := readAll(c)
	io.WriteString(c, "warm")
	r.want(t, "warm")

	p.Hold(ToClient)
	io.WriteString(c, "held answer")
	testkit.Until(t, "the answer to be held", func() bool { return p.Waiting() == 1 })
	testkit.Until(t, "the upstream to get the request", func() bool { return echo.bytes.Load() == 4+11 })
	r.nothingYet(t)
	p.Release(ToClient)
	r.want(t, "held answer")

	p.Hold(ToUpstream)
	io.WriteString(c, "held request")
	testkit.Until(t, "the request to be held", func() bool { return p.Waiting() == 1 })
	if got := echo.bytes.Load(); got != 15 {
		t.Fatalf("the upstream got %d bytes while the request was held", got)
	}
	p.Heal()
	r.want(t, "held request")
}

func TestBlackHole(t *testing.T) {
	t.Parallel()
	echo := newEcho(t)
	p := newProxy(t, echo.addr, Options{})
	old := dial(t, p)
	ro := readAll(old)
	io.WriteString(old, "before")
	ro.want(t, "before")

	p.BlackHole()
	fresh := dial(t, p)
	rf := readAll(fresh)
	io.WriteString(old, "lost?")
	io.WriteString(fresh, "anyone?")
	testkit.Until(t, "both requests to be swallowed", func() bool { return p.Waiting() == 2 })
	ro.nothingYet(t)
	rf.nothingYet(t)
	if s := p.Stats(); s.Dials != 1 || s.Accepted != 2 || s.Open != 2 {
		t.Fatalf("stats %+v: a black hole must accept, not dial, not close", s)
	}
	if echo.conns.Load() != 1 || echo.bytes.Load() != 6 {
		t.Fatalf("the upstream saw %d connections, %d bytes", echo.conns.Load(), echo.bytes.Load())
	}
	// Healed, the held bytes flow on, as after a healed partition.
	p.Heal()
	ro.want(t, "lost?")
	rf.want(t, "anyone?")
	if s := p.Stats(); s.Dials != 2 {
		t.Fatalf("stats %+v, want the second dial after the heal", s)
	}
}

// httpUpstream counts the requests an HTTP server got, by method.
type httpUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	hits map[string]int
}

func newHTTP(t *testing.T, useTLS bool, body string) *httpUpstream {
	t.Helper()
	u := &httpUpstream{hits: map[string]int{}}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		u.mu.Lock()
		u.hits[r.Method]++
		u.mu.Unlock()
		io.WriteString(w, body)
	}))
	u.Config.ErrorLog = log.New(io.Discard, "", 0) // resets mid-handshake are the point
	if useTLS {
		u.StartTLS()
	} else {
		u.Start()
	}
	t.Cleanup(u.Close)
	return u
}

func (u *httpUpstream) count(method string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.hits[method]
}

func (u *httpUpstream) addr() string {
	return strings.TrimPrefix(strings.TrimPrefix(u.URL, "https://"), "http://")
}

// client returns an HTTP client for the proxy in front of u, keeping its
// connections alive, with TLS between at most maxTLS.
func (u *httpUpstream) client(t *testing.T, maxTLS uint16) *http.Client {
	t.Helper()
	tr := u.Client().Transport.(*http.Transport).Clone()
	if tr.TLSClientConfig != nil {
		tr.TLSClientConfig.MaxVersion = maxTLS
		tr.TLSClientConfig.ServerName = "example.com" // httptest's certificate names it
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func scheme(useTLS bool) string {
	if useTLS {
		return "https://"
	}
	return "http://"
}

// TestResets: before forwarding, the upstream never sees the request; after
// forwarding, it acted on it; the client sees a reset either way. Over TLS
// the handshake passes and the request itself is reset, on a new
// connection as on a kept-alive one.
func TestResets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		useTLS bool
		maxTLS uint16
		warm   bool
	}{
		{"plain new connection", false, 0, false},
		{"plain kept-alive connection", false, 0, true},
		{"TLS 1.3 new connection", true, tls.VersionTLS13, false},
		{"TLS 1.3 kept-alive connection", true, tls.VersionTLS13, true},
		{"TLS 1.2 new connection", true, tls.VersionTLS12, false},
		{"TLS 1.2 kept-alive connection", true, tls.VersionTLS12, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newHTTP(t, tc.useTLS, "done")
			p := newProxy(t, up.addr(), Options{})
			hc := up.client(t, tc.maxTLS)
			url := scheme(tc.useTLS) + p.Addr() + "/act"
			if tc.warm {
				if _, err := hc.Get(url); err != nil {
					t.Fatal(err)
				}
			}

			p.ResetBeforeForwarding(1)
			_, err := hc.Post(url, "text/plain", strings.NewReader("x"))
			if !isReset(err) {
				t.Fatalf("reset before forwarding: err = %v, want a connection reset", err)
			}
			if n := up.count("POST"); n != 0 {
				t.Fatalf("the upstream got %d POSTs through a reset before forwarding", n)
			}

			p.ResetAfterForwarding(1)
			_, err = hc.Post(url, "text/plain", strings.NewReader("x"))
			if !isReset(err) {
				t.Fatalf("reset after forwarding: err = %v, want a connection reset", err)
			}
			if n := up.count("POST"); n != 1 {
				t.Fatalf("the upstream got %d POSTs through a reset after forwarding, want 1", n)
			}

			// Both faults struck their one time: transparent again.
			resp, err := hc.Post(url, "text/plain", strings.NewReader("x"))
			if err != nil {
				t.Fatalf("after the counted faults: %v", err)
			}
			resp.Body.Close()
			if s := p.Stats(); s.Resets != 2 || up.count("POST") != 2 {
				t.Errorf("stats %+v, upstream POSTs %d", s, up.count("POST"))
			}
		})
	}
}

// TestCutAfter: the answer stops after n bytes of it (the TLS handshake not
// counted), and the client sees the body end early.
func TestCutAfter(t *testing.T) {
	t.Parallel()
	t.Run("echo", func(t *testing.T) {
		t.Parallel()
		echo := newEcho(t)
		p := newProxy(t, echo.addr, Options{})
		c := dial(t, p)
		r := readAll(c)
		p.CutAfter(ToClient, 10, 1)
		io.WriteString(c, strings.Repeat("a", 100))
		got, err := r.end(t)
		if string(got) != strings.Repeat("a", 10) || err != io.EOF {
			t.Fatalf("got %q, %v; want 10 bytes and EOF", got, err)
		}
		if s := p.Stats(); s.Cuts != 1 || s.BytesToClient != 10 || s.BytesToUpstream != 100 {
			t.Errorf("stats %+v", s)
		}
	})
	for _, useTLS := range []bool{false, true} {
		t.Run("HTTP TLS="+map[bool]string{false: "off", true: "on"}[useTLS], func(t *testing.T) {
			t.Parallel()
			body := strings.Repeat("b", 64<<10)
			up := newHTTP(t, useTLS, body)
			p := newProxy(t, up.addr(), Options{})
			hc := up.client(t, tls.VersionTLS13)
			p.CutAfter(ToClient, 2000, 1)
			resp, err := hc.Get(scheme(useTLS) + p.Addr() + "/big")
			if err != nil {
				t.Fatalf("the headers should arrive: %v", err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil || len(got) >= len(body) {
				t.Fatalf("read %d of %d body bytes, err %v; want the body cut", len(got), len(body), err)
			}
			if s := p.Stats(); s.Cuts != 1 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

func TestResetAllAndDialError(t *testing.T) {
	t.Parallel()
	echo := newEcho(t)
	p := newProxy(t, echo.addr, Options{})
	c := dial(t, p)
	r := readAll(c)
	io.WriteString(c, "x")
	r.want(t, "x")
	p.ResetAll()
	if _, err := r.end(t); !isReset(err) {
		t.Fatalf("after ResetAll: %v, want a reset", err)
	}

	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	q := newProxy(t, dead, Options{})
	c2 := dial(t, q)
	if _, err := readAll(c2).end(t); err == nil {
		t.Fatal("a connection to a dead upstream stayed open")
	}
	if s := q.Stats(); s.DialErrors != 1 || s.Open != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestCloseLeaksNothing closes a proxy with connections in every state:
// transparent, held, waiting for a latency, black-holed, mid-dial. Not
// parallel: it counts the process's goroutines.
func TestCloseLeaksNothing(t *testing.T) {
	echo := newEcho(t)
	before := runtime.NumGoroutine()
	clock := &fakeClock{now: time.Unix(0, 0)}
	p, err := New(echo.addr, Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	var clients []net.Conn
	open := func() net.Conn {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		return c
	}
	plain := open()
	io.WriteString(plain, "x")
	readAll(plain).want(t, "x")
	p.Latency(ToClient, time.Hour)
	io.WriteString(open(), "late")
	testkit.Until(t, "the latency wait", func() bool { return p.Waiting() == 1 })
	p.Hold(ToUpstream)
	io.WriteString(open(), "held")
	p.BlackHole()
	io.WriteString(open(), "void")
	testkit.Until(t, "every chunk to wait", func() bool { return p.Waiting() == 3 })

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, c := range clients {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadAll(c); err != nil && !isReset(err) {
			t.Errorf("client after Close: %v, want EOF", err)
		}
		c.Close()
	}
	testkit.Until(t, "the proxy's goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Error("the proxy still accepts after Close")
	}
}

func TestNewRejectsBadUpstream(t *testing.T) {
	t.Parallel()
	if _, err := New("no-port", Options{}); err == nil {
		t.Error("an upstream without a port was accepted")
	}
}

// TestPerDirection: a cut of the requests stops the upstream's bytes at n,
// whatever the answers do.
func TestPerDirection(t *testing.T) {
	t.Parallel()
	echo := newEcho(t)
	p := newProxy(t, echo.addr, Options{})
	c := dial(t, p)
	r := readAll(c)
	io.WriteString(c, "12")
	r.want(t, "12")
	p.CutAfter(ToUpstream, 3, 0)
	io.WriteString(c, "abcdef")
	got, err := r.end(t)
	// The echo of "abc" may or may not beat the close.
	if (len(got) != 0 && !bytes.Equal(got, []byte("abc"))) || err == nil {
		t.Fatalf("got %q, %v", got, err)
	}
	testkit.Until(t, "the upstream to read what was forwarded", func() bool { return echo.bytes.Load() >= 5 })
	if n := echo.bytes.Load(); n != 5 {
		t.Errorf("the upstream got %d bytes, want 2+3", n)
	}
	if s := p.Stats(); s.Cuts != 1 || s.BytesToUpstream != 5 {
		t.Errorf("stats %+v", s)
	}
}

// TestOnRequest: the hook sees every request with its number before any of it
// is forwarded, so a fault it switches on applies to exactly that request: here
// the second request (a write after a read, over TLS on one kept-alive
// connection) is forwarded and its answer reset, the first is untouched.
func TestOnRequest(t *testing.T) {
	t.Parallel()
	up := newHTTP(t, true, "done")
	var p *Proxy
	var seen []int64
	var mu sync.Mutex
	p = newProxy(t, up.addr(), Options{OnRequest: func(n int64) {
		mu.Lock()
		seen = append(seen, n)
		mu.Unlock()
		if n == 2 {
			p.ResetAfterForwarding(1)
		}
	}})
	hc := up.client(t, tls.VersionTLS13)
	url := scheme(true) + p.Addr() + "/act"
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatalf("the first request: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := hc.Post(url, "text/plain", strings.NewReader("x")); !isReset(err) {
		t.Fatalf("the second request: err = %v, want a connection reset", err)
	}
	if n := up.count("POST"); n != 1 {
		t.Errorf("the upstream got %d POSTs, want 1", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != 1 || seen[1] != 2 || p.Stats().Requests != 2 {
		t.Errorf("requests seen %v, stats %+v", seen, p.Stats())
	}
}
