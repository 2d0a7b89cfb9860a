package pve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestNewValidates(t *testing.T) {
	t.Parallel()
	ok := Endpoint{URL: "https://10.0.0.1:8006"}
	fp := Fingerprint([]byte("x"))
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no endpoints", Config{TokenID: testTokenID, TokenSecret: testSecret}},
		{"http", Config{Endpoints: []Endpoint{{URL: "http://10.0.0.1:8006"}}, TokenID: testTokenID, TokenSecret: testSecret}},
		{"path", Config{Endpoints: []Endpoint{{URL: "https://10.0.0.1:8006/api2/json"}}, TokenID: testTokenID, TokenSecret: testSecret}},
		{"userinfo", Config{Endpoints: []Endpoint{{URL: "https://root:pw@10.0.0.1:8006"}}, TokenID: testTokenID, TokenSecret: testSecret}},
		{"query", Config{Endpoints: []Endpoint{{URL: "https://10.0.0.1:8006?x=1"}}, TokenID: testTokenID, TokenSecret: testSecret}},
		{"no host", Config{Endpoints: []Endpoint{{URL: "https://:8006"}}, TokenID: testTokenID, TokenSecret: testSecret}},
		{"non-ASCII host", Config{Endpoints: []Endpoint{{URL: "https://pvé:8006"}}, TokenID: testTokenID, TokenSecret: testSecret}},
		{"twice", Config{Endpoints: []Endpoint{ok, {URL: "https://10.0.0.1:8006/"}}, TokenID: testTokenID, TokenSecret: testSecret}},
		{"short fingerprint", Config{Endpoints: []Endpoint{{URL: ok.URL, Fingerprint: "AB:CD"}}, TokenID: testTokenID, TokenSecret: testSecret}},
		{"bad fingerprint", Config{Endpoints: []Endpoint{{URL: ok.URL, Fingerprint: strings.Replace(fp, fp[:2], "ZZ", 1)}}, TokenID: testTokenID, TokenSecret: testSecret}},
		{"no token", Config{Endpoints: []Endpoint{ok}, TokenSecret: testSecret}},
		{"token without name", Config{Endpoints: []Endpoint{ok}, TokenID: "vmgate@pve", TokenSecret: testSecret}},
		{"token without realm", Config{Endpoints: []Endpoint{ok}, TokenID: "vmgate!gw", TokenSecret: testSecret}},
		{"token short realm", Config{Endpoints: []Endpoint{ok}, TokenID: "vmgate@p!gw", TokenSecret: testSecret}},
		{"token name digit", Config{Endpoints: []Endpoint{ok}, TokenID: "vmgate@pve!1gw", TokenSecret: testSecret}},
		{"token user space", Config{Endpoints: []Endpoint{ok}, TokenID: "vm gate@pve!gw", TokenSecret: testSecret}},
		{"token user semicolon", Config{Endpoints: []Endpoint{ok}, TokenID: "vm;gate@pve!gw", TokenSecret: testSecret}},
		{"token newline", Config{Endpoints: []Endpoint{ok}, TokenID: "vmgate@pve!gw\n", TokenSecret: testSecret}},
		{"no secret", Config{Endpoints: []Endpoint{ok}, TokenID: testTokenID}},
		{"secret with =", Config{Endpoints: []Endpoint{ok}, TokenID: testTokenID, TokenSecret: "a=b"}},
		{"secret with newline", Config{Endpoints: []Endpoint{ok}, TokenID: testTokenID, TokenSecret: "ab\r\nX-Evil: 1"}},
		{"bad CA", Config{Endpoints: []Endpoint{ok}, TokenID: testTokenID, TokenSecret: testSecret, CACertPEM: "not a PEM"}},
		{"negative timeout", Config{Endpoints: []Endpoint{ok}, TokenID: testTokenID, TokenSecret: testSecret, Timeout: -1}},
	}
	for _, tt := range tests {
		if _, err := New(tt.cfg); err == nil || !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: New = %v, want an ErrInvalidArgument error", tt.name, err)
		} else if tt.cfg.TokenSecret != "" && strings.Contains(err.Error(), tt.cfg.TokenSecret) {
			t.Errorf("%s: the error shows the secret: %v", tt.name, err)
		}
	}
	for _, id := range []string{"vmgate@pve!gw", "root@pam!monitoring", "a.b-c_d@my-realm.x!Tok_1.x", "jörg@pve!gw", "user@corp@ad!gw"} {
		if _, err := New(Config{Endpoints: []Endpoint{ok}, TokenID: id, TokenSecret: testSecret}); err != nil {
			t.Errorf("token id %q refused: %v", id, err)
		}
	}
	c, err := New(Config{Endpoints: []Endpoint{{URL: "https://PVE1.example:8006/", Fingerprint: strings.ToLower(fp)}, {URL: "https://[::1]"}},
		TokenID: testTokenID, TokenSecret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	got := c.Endpoints()
	if got[0].URL != "https://PVE1.example:8006" || got[0].Fingerprint != fp || got[1].URL != "https://[::1]" {
		t.Errorf("Endpoints() = %+v", got)
	}
}

func TestAuthorizationAndHeaders(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []*http.Request
	srv := newFakePVE(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r)
		mu.Unlock()
		versionHandler(w, r)
	})
	c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()}})
	if _, err := c.Version(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := seen[0]
	if got, want := r.Header.Get("Authorization"), "PVEAPIToken="+testTokenID+"="+testSecret; got != want {
		t.Errorf("Authorization = %q, want %q", got, want)
	}
	if r.URL.Path != "/api2/json/version" || r.Header.Get("Cookie") != "" || r.Header.Get("CSRFPreventionToken") != "" {
		t.Errorf("request = %s %v", r.URL, r.Header)
	}
}

func TestFailoverOnConnectionError(t *testing.T) {
	t.Parallel()
	good := newFakePVE(t, versionHandler)
	dead := deadAddr(t)
	c := newTestClient(t, Config{Endpoints: []Endpoint{{URL: dead, Fingerprint: good.fp}, good.endpoint()}})
	for i := 0; i < 3; i++ {
		if _, err := c.Version(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// The dead endpoint was tried once; afterwards the working one is preferred.
	if s := c.Stats(); s.Failovers != 1 || s.Requests != 4 {
		t.Errorf("stats = %+v, want 1 failover and 4 requests", s)
	}
	if good.count("GET /api2/json/version") != 3 {
		t.Errorf("good endpoint got %d requests", good.count("GET /api2/json/version"))
	}
}

func TestAllEndpointsDown(t *testing.T) {
	t.Parallel()
	var backoffs []int
	c := newTestClient(t, Config{
		Endpoints: []Endpoint{{URL: deadAddr(t)}, {URL: deadAddr(t)}},
		Backoff:   func(n int) time.Duration { backoffs = append(backoffs, n); return 0 },
	})
	_, err := c.Nodes(context.Background())
	var ue *UnavailableError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want *UnavailableError", err)
	}
	if len(ue.Attempts) != 6 || fmt.Sprint(backoffs) != "[1 2]" {
		t.Errorf("%d attempts, backoffs %v; want 3 rounds over 2 endpoints", len(ue.Attempts), backoffs)
	}
	if !strings.Contains(err.Error(), "refused") {
		t.Errorf("error %q does not say why", err)
	}
}

func TestGETRetriesBrokenConnections(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	srv := newFakePVE(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 2 {
			dropConn(w)
			return
		}
		versionHandler(w, r)
	})
	c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()}})
	if _, err := c.Version(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.Retries != 2 || n.Load() != 3 {
		t.Errorf("stats = %+v, server saw %d", s, n.Load())
	}

	// Bounded: a server that always breaks the connection sees 3 attempts.
	var m atomic.Int64
	broken := newFakePVE(t, func(w http.ResponseWriter, r *http.Request) { m.Add(1); dropConn(w) })
	c = newTestClient(t, Config{Endpoints: []Endpoint{broken.endpoint()}})
	if _, err := c.Version(context.Background()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
	if m.Load() != 3 {
		t.Errorf("server saw %d requests, want 3", m.Load())
	}
}

func TestDefaultBackoffIsJitteredAndBounded(t *testing.T) {
	t.Parallel()
	seen := map[time.Duration]bool{}
	for i := 0; i < 50; i++ {
		for n := 1; n <= 8; n++ {
			d := defaultBackoff(n)
			if d < 0 || d > 2*time.Second {
				t.Fatalf("backoff(%d) = %v", n, d)
			}
			seen[d] = true
		}
	}
	if len(seen) < 20 {
		t.Errorf("backoff looks unjittered: %d distinct values", len(seen))
	}
}

func TestCircuitBreaker(t *testing.T) {
	t.Parallel()
	clock := &testClock{now: time.Unix(1_800_000_000, 0)}
	// A listener that accepts and closes at once: every handshake fails.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepts atomic.Int64
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepts.Add(1)
			conn.Close()
		}
	}()
	c := newTestClient(t, Config{
		Endpoints:        []Endpoint{{URL: "https://" + ln.Addr().String()}},
		Now:              clock.Now,
		BreakerThreshold: 3,
		BreakerCooldown:  time.Minute,
	})
	ctx := context.Background()
	if _, err := c.Version(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
	if h := c.Health(); h[0].State != "open" {
		t.Fatalf("after 3 failures the circuit is %s", h[0].State)
	}
	before := accepts.Load()
	_, err = c.Version(ctx)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, errCircuitOpen) {
		t.Fatalf("open circuit: err = %v", err)
	}
	if accepts.Load() != before {
		t.Errorf("an open circuit still connected")
	}
	clock.Advance(61 * time.Second)
	if h := c.Health(); h[0].State != "half-open" {
		t.Errorf("after the cooldown the circuit is %s", h[0].State)
	}
	// Half-open: exactly one probe; it fails and the circuit opens again.
	_, _ = c.Version(ctx)
	if got := accepts.Load() - before; got != 1 {
		t.Errorf("half-open let %d connections through, want 1", got)
	}
	if h := c.Health(); h[0].State != "open" {
		t.Errorf("after a failed probe the circuit is %s", h[0].State)
	}
}

func TestBreakerClosesAfterSuccessfulProbe(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	b := breaker{threshold: 2, cooldown: time.Second}
	b.failure(now)
	if !b.allow(now) {
		t.Fatal("one failure opened the circuit")
	}
	if !b.failure(now) || b.allow(now) {
		t.Fatal("two failures did not open the circuit")
	}
	later := now.Add(2 * time.Second)
	if !b.allow(later) || b.allow(later) {
		t.Fatal("half-open must allow exactly one probe")
	}
	b.release()
	if !b.allow(later) {
		t.Fatal("a released probe must be available again")
	}
	b.success()
	if !b.allow(later) || !b.allow(later) || b.state(later) != stateClosed {
		t.Fatal("success must close the circuit")
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	// The deadline passes once the read has reached PVE: a 150 ms Timeout could
	// pass during the TLS handshake on a busy machine, before any request
	// (issue 17, docs/history.md).
	ctx0 := newExpiring()
	srv := newFakePVE(t, func(w http.ResponseWriter, r *http.Request) {
		ctx0.expire()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()}, Timeout: time.Minute})
	_, err := c.Nodes(ctx0)
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if srv.total() != 1 {
		t.Errorf("a read that timed out was retried: %d requests", srv.total())
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.Nodes(ctx)
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Fatalf("cancelled: err = %v", err)
	}
}

func TestAttemptTimeoutFailsOverSilentEndpoint(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	silent := newFakePVE(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	good := newFakePVE(t, versionHandler)
	c := newTestClient(t, Config{Endpoints: []Endpoint{silent.endpoint(), good.endpoint()}, AttemptTimeout: 100 * time.Millisecond})
	if _, err := c.Version(context.Background()); err != nil {
		t.Fatal(err)
	}
	if good.total() != 1 {
		t.Errorf("good endpoint got %d requests", good.total())
	}
}

func TestKeepAliveAndConnectionCounting(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	srv := newRawPVE(t, func(r *http.Request) string {
		if fail.Load() {
			return rawAnswer("500 VM 100 not running", `{"data":null,"message":"VM 100 not running\n"}`, true)
		}
		return rawAnswer("200 OK", `{"data":{"version":"9.1.4","release":"9.1","repoid":"abcdef12"}}`, false)
	})
	c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()}})
	ctx := context.Background()
	for i := 0; i < 1000; i++ {
		if _, err := c.Version(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// One connection does it all. (Rarely a second one: net/http may dial
	// while the previous answer's connection is still on its way back to the
	// idle pool.)
	s := c.Stats()
	if s.Requests != 1000 || s.NewConns > 2 || srv.conns.Load() != s.NewConns {
		t.Errorf("1000 sequential reads: stats %+v, server saw %d connections; want 1", s, srv.conns.Load())
	}
	// PVE closes the connection after every error answer: each costs a new
	// connection, and each is counted.
	fail.Store(true)
	for i := 0; i < 5; i++ {
		if _, err := c.Version(ctx); StatusCode(err) != 500 {
			t.Fatalf("err = %v", err)
		}
	}
	s2 := c.Stats()
	if s2.ServerCloses != 5 || s2.NewConns-s.NewConns < 4 || srv.conns.Load() != s2.NewConns {
		t.Errorf("after 5 errors: stats %+v, server saw %d connections", s2, srv.conns.Load())
	}
}

func TestResponseSizeLimit(t *testing.T) {
	t.Parallel()
	srv := newFakePVE(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"data":{"version":"`))
		chunk := []byte(strings.Repeat("x", 1<<20))
		for i := 0; i < 9; i++ {
			w.Write(chunk)
		}
		w.Write([]byte(`"}}`))
	})
	c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()}})
	if _, err := c.Version(context.Background()); !errors.Is(err, ErrBadResponse) {
		t.Fatalf("err = %v, want ErrBadResponse", err)
	}
}

func TestBadAnswers(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"not JSON":       "<html>hello</html>",
		"array":          `[1,2]`,
		"wrong type":     `{"data":{"version":["x"]}}`,
		"no data":        `{"total":1}`,
		"truncated JSON": `{"data":{"version":"9`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := newRawPVE(t, func(*http.Request) string { return rawAnswer("200 OK", body, false) })
			c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()}})
			if _, err := c.Version(context.Background()); !errors.Is(err, ErrBadResponse) {
				t.Fatalf("err = %v, want ErrBadResponse", err)
			}
		})
	}
}

func TestRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	other := newFakePVE(t, versionHandler)
	srv := newFakePVE(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/api2/json/version", http.StatusFound)
	})
	c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()}})
	if _, err := c.Version(context.Background()); StatusCode(err) != 302 {
		t.Fatalf("err = %v, want the 302 as an error", err)
	}
	if other.total() != 0 {
		t.Error("the redirect was followed")
	}
}

func TestInvalidArgumentsSendNothing(t *testing.T) {
	t.Parallel()
	srv := newFakePVE(t, versionHandler)
	c := newTestClient(t, Config{Endpoints: []Endpoint{srv.endpoint()}})
	ctx := context.Background()
	seven := -7
	calls := map[string]error{}
	_, calls["VMStatus node"] = c.GuestStatus(ctx, VMOn("pve1/..", 100))
	_, calls["VMStatus vmid"] = c.GuestStatus(ctx, VMOn("pve1", 99))
	_, calls["StartVM"] = c.Start(ctx, VMOn("%2e%2e", 100), StartOptions{})
	_, calls["StopVM timeout"] = c.Stop(ctx, VMOn("pve1", 100), StopOptions{Timeout: &seven})
	_, calls["MigrateVM target"] = c.Migrate(ctx, VMOn("pve1", 100), MigrateOptions{Target: "pve2/../x"})
	_, calls["MigrateVM no target"] = c.Migrate(ctx, VMOn("pve1", 100), MigrateOptions{})
	_, calls["MigratePrecheck"] = c.MigratePrecheck(ctx, VMOn("pve1", 100), "a b")
	_, calls["Resources"] = c.Resources(ctx, "qemu&x=1")
	_, calls["TaskStatus"] = c.TaskStatus(ctx, UPID{Node: "pve1"})
	_, _, calls["TaskLog"] = c.TaskLog(ctx, UPID{}, 0, 0)
	_, calls["NodeTasks source"] = c.NodeTasks(ctx, "pve1", TaskListOptions{Source: "everything"})
	_, calls["NodeTasks vmid"] = c.NodeTasks(ctx, "pve1", TaskListOptions{VMID: 5})
	_, calls["NodeTasks filter"] = c.NodeTasks(ctx, "pve1", TaskListOptions{TypeFilter: "a\nb"})
	calls["StopTask"] = c.StopTask(ctx, UPID{})
	for name, err := range calls {
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", name, err)
		}
	}
	if srv.total() != 0 {
		t.Errorf("PVE received %d requests", srv.total())
	}
}

// racingAnswer is what net/http's transport hands over when an answer races
// the request's end: the caller's deadline has passed, and still a response,
// here the empty 200 that net/http's server writes for a handler that returned
// because its client hung up.
type racingAnswer struct{ posts atomic.Int64 }

func (r *racingAnswer) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost {
		r.posts.Add(1)
	}
	<-req.Context().Done()
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Length": {"0"}}, ContentLength: 0, Body: http.NoBody, Request: req}, nil
}

// TestAnswerRacingTheDeadline: an answer that comes with the deadline is not
// read as PVE's. A read times out (504, not 502 "cannot read"); a write whose
// answer cannot be read is ambiguous (its task may have started), never a
// plain failure that a caller could take as "nothing happened".
func TestAnswerRacingTheDeadline(t *testing.T) {
	t.Parallel()
	srv := newFakePVE(t, versionHandler) // never reached: the wrapper answers
	race := &racingAnswer{}
	cfg := WithTransportWrapper(Config{Endpoints: []Endpoint{srv.endpoint()}, Timeout: 50 * time.Millisecond},
		func(http.RoundTripper) http.RoundTripper { return race })
	c := newTestClient(t, cfg)

	_, err := c.Nodes(context.Background())
	if !errors.Is(err, ErrTimeout) || errors.Is(err, ErrBadResponse) {
		t.Fatalf("read: err = %v, want ErrTimeout", err)
	}

	_, err = c.Start(context.Background(), VMOn("pve1", 100), StartOptions{})
	var amb *AmbiguousError
	if errors.Is(err, ErrBadResponse) || !errors.As(err, &amb) {
		t.Fatalf("write: err = %v, want an ambiguous outcome", err)
	}
	if got := race.posts.Load(); got != 1 {
		t.Errorf("%d POSTs, want 1 (an ambiguous write is not sent again)", got)
	}
}

// TestWithinArmsOnlyTheFirstDeadline: a bound that cannot come first adds no
// context (and no timer); one that can, does, and the sooner one holds.
func TestWithinArmsOnlyTheFirstDeadline(t *testing.T) {
	t.Parallel()
	parent, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx, stop := within(parent, time.Hour)
	defer stop()
	if ctx != parent {
		t.Error("a later bound made a new context")
	}
	ctx, stop2 := within(parent, time.Second)
	defer stop2()
	pd, _ := parent.Deadline()
	if d, ok := ctx.Deadline(); ctx == parent || !ok || !d.Before(pd) {
		t.Errorf("a sooner bound: deadline %v (parent's %v)", d, pd)
	}
	ctx, stop3 := within(context.Background(), time.Second)
	defer stop3()
	if _, ok := ctx.Deadline(); !ok {
		t.Error("no deadline under a parent without one")
	}
}
