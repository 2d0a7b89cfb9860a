package store_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// guard is how long a test waits for a store call before calling it hung: far more
// than any deadline the tests set, so a slow machine cannot fail them, and far less
// than go test's own timeout, so a hang fails with a message.
const guard = 60 * time.Second

// outageProxy stands between the store and PostgreSQL and plays the network's
// failures: a black hole (every byte held, nothing refused, as in a partition) and
// resets. Heal lets held bytes through again, as TCP's retransmissions would.
type outageProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cond  *sync.Cond
	holed bool // hold every byte
	held  int  // reads held so far
	down  bool // reset every new connection at once
	conns map[net.Conn]bool
	done  bool
}

// startOutageProxy listens on a free loopback port and forwards to target.
func startOutageProxy(t *testing.T, target string) *outageProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &outageProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.cond = sync.NewCond(&p.mu)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *outageProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			abort(c)
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, up) {
			return
		}
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

func (p *outageProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		if p.done {
			c.Close()
			continue
		}
		p.conns[c] = true
	}
	return !p.done
}

// pipe copies src to dst, holding what it read while the proxy is a black hole.
func (p *outageProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			if p.holed {
				p.held++
			}
			for p.holed && !p.done {
				p.cond.Wait()
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// blackHole makes every connection, old and new, silent.
func (p *outageProxy) blackHole() { p.set(true) }

// heal lets traffic through again.
func (p *outageProxy) heal() { p.set(false) }

func (p *outageProxy) set(holed bool) {
	p.mu.Lock()
	p.holed = holed
	p.cond.Broadcast()
	p.mu.Unlock()
}

// reset aborts every open connection with a TCP reset; with down, every later one
// too, until up.
func (p *outageProxy) reset(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	for c := range p.conns {
		abort(c)
		delete(p.conns, c)
	}
}

// up ends a reset's down.
func (p *outageProxy) up() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// abort closes c with a TCP reset rather than a FIN.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

func (p *outageProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.done = true
	p.cond.Broadcast()
	p.mu.Unlock()
	p.reset(false)
}

// viaProxy returns dsn with its host and port replaced by the proxy's.
func viaProxy(t *testing.T, dsn string, p *outageProxy) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.ln.Addr().String()
	return u.String()
}

// postgresAddr is the host:port of dsn.
func postgresAddr(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// within runs fn and returns its error, failing t if fn has not returned after guard.
func within(t testing.TB, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(guard):
		t.Fatalf("%s: still waiting after %v: the store call is not bounded", what, guard)
		return nil
	}
}

// wantUnavailable fails t unless err is store_unavailable with a Retry-After.
func wantUnavailable(t *testing.T, err error, what string) {
	t.Helper()
	e, ok := errs.As(err)
	if !ok || e.Kind != errs.Unavailable || e.Reason != errs.ReasonStoreUnavailable || e.RetryAfter <= 0 {
		t.Fatalf("%s: got %v (%#v), want kind Unavailable, reason %s and a Retry-After",
			what, err, e, errs.ReasonStoreUnavailable)
	}
}

// eventually calls fn until it succeeds, failing t after guard.
func eventually(t testing.TB, what string, fn func() error) {
	t.Helper()
	end := time.Now().Add(guard)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: still failing after %v: %v", what, guard, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPostgresBlackHole: with PostgreSQL silent, reads, writes, transactions and
// pings fail as store_unavailable instead of hanging, and once the network heals the
// same store works again, without being reopened.
func TestPostgresBlackHole(t *testing.T) {
	postgresDSN(t)
	t.Parallel()
	dsn := freshSchema(t)
	p := startOutageProxy(t, postgresAddr(t, dsn))
	s, err := store.OpenWith(t.Context(), viaProxy(t, dsn, p), store.Options{Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer s.Close()
	ctx := context.Background()
	u, err := s.CreateUser(ctx, store.User{Email: "hole@example.com", Role: store.RoleUser})
	if err != nil {
		t.Fatalf("create user: %v", err)
	}

	p.blackHole()
	calls := map[string]func() error{
		"read": func() error { _, err := s.UserByID(ctx, u.ID); return err },
		"write": func() error {
			_, err := s.UpdateUser(ctx, store.User{ID: u.ID, Role: store.RoleUser, Nickname: "x"})
			return err
		},
		"transaction": func() error { return s.RevokeSession(ctx, "no-such-session", time.Now(), "logout") },
		"ping":        func() error { return s.Ping(ctx) },
	}
	// The first call finds a pooled connection and sends into the hole; the pool
	// drops that connection, so the later ones try to connect, into the hole too.
	for _, name := range []string{"read", "write", "transaction", "ping", "read"} {
		wantUnavailable(t, within(t, name, calls[name]), name+" into a black hole")
	}

	p.heal()
	eventually(t, "read after healing", calls["read"])
	for name, call := range calls {
		if name == "transaction" {
			continue // NotFound: the session does not exist
		}
		if err := call(); err != nil {
			t.Errorf("%s after healing: %v", name, err)
		}
	}
}

// TestPostgresReset: with PostgreSQL resetting connections, calls fail as
// store_unavailable (a statement cut in flight may also be retried by the pool on a
// fresh connection and succeed: never anything else), and once the resets stop the
// pool replaces its connections.
func TestPostgresReset(t *testing.T) {
	postgresDSN(t)
	t.Parallel()
	dsn := freshSchema(t)
	p := startOutageProxy(t, postgresAddr(t, dsn))
	s, err := store.OpenWith(t.Context(), viaProxy(t, dsn, p), store.Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer s.Close()
	ctx := context.Background()
	list := func() error { _, err := s.ListUsers(ctx); return err }

	// A statement in flight when the reset comes (the black hole keeps it there).
	p.blackHole()
	inFlight := make(chan error, 1)
	go func() { inFlight <- list() }()
	eventually(t, "the statement reaching the proxy", func() error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.held == 0 {
			return errors.New("nothing held yet")
		}
		return nil
	})
	p.reset(true)
	p.heal()
	select {
	case err := <-inFlight:
		if err != nil {
			wantUnavailable(t, err, "read cut by a reset")
		}
	case <-time.After(guard):
		t.Fatal("read cut by a reset: still waiting")
	}
	// Every connection reset as it opens.
	wantUnavailable(t, within(t, "read", list), "read while every connection is reset")
	wantUnavailable(t, within(t, "ping", func() error { return s.Ping(ctx) }), "ping while every connection is reset")

	p.up()
	eventually(t, "read after the resets stop", list)
}

// TestSQLiteLocked: a writer of another process that holds SQLite's write lock makes
// the store's writes fail as store_unavailable after the timeout, not wait forever,
// and they succeed once the lock is gone.
func TestSQLiteLocked(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "vmgate.db")
	s, err := store.OpenWith(t.Context(), path, store.Options{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer s.Close()
	other, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx := context.Background()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	create := func() error {
		_, err := s.CreateUser(ctx, store.User{Email: "locked@example.com", Role: store.RoleUser})
		return err
	}
	wantUnavailable(t, within(t, "write while locked", create), "write while another process holds the lock")
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if err := create(); err != nil {
		t.Fatalf("write after the lock is gone: %v", err)
	}
}

// TestCallerCancelStaysCancelled: a caller that gave up gets its own error back,
// not store_unavailable, which is for the store's failures.
func TestCallerCancelStaysCancelled(t *testing.T) {
	t.Parallel()
	s := openSQLite(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.ListUsers(ctx)
	if err == nil || errs.Is(err, errs.Unavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("list users with a cancelled context: %v, want context.Canceled", err)
	}
}
