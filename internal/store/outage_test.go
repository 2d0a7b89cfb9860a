package store_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/faultproxy"
	"github.com/vmgate/vmgate/internal/store"

	"github.com/vmgate/vmgate/internal/testkit"
)

// guard is how long a test waits for a store call before calling it hung: far more
// than any deadline the tests set, so a slow machine cannot fail them, and far less
// than go test's own timeout, so a hang fails with a message.
const guard = 60 * time.Second

// startProxy starts a fault-injecting proxy in front of dsn's server and returns
// it with dsn pointed at it (without TLS, so the proxy sees PostgreSQL's messages).
func startProxy(t testing.TB, dsn string) (*faultproxy.Proxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.New(u.Host, faultproxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	u.Host = p.Addr()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return p, u.String()
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

// TestPostgresBlackHole: with PostgreSQL silent, reads, writes, transactions and
// pings fail as store_unavailable instead of hanging, and once the network heals the
// same store works again, without being reopened.
func TestPostgresBlackHole(t *testing.T) {
	postgresDSN(t)
	t.Parallel()
	p, dsn := startProxy(t, freshSchema(t))
	s, err := store.OpenWith(t.Context(), dsn, store.Options{Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer s.Close()
	ctx := context.Background()
	u, err := s.CreateUser(ctx, store.User{Email: "hole@example.com", Role: store.RoleUser})
	if err != nil {
		t.Fatalf("create user: %v", err)
	}

	p.BlackHole()
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

	p.Heal()
	testkit.Eventually(t, "read after healing", calls["read"])
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
	p, dsn := startProxy(t, freshSchema(t))
	s, err := store.OpenWith(t.Context(), dsn, store.Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer s.Close()
	ctx := context.Background()
	list := func() error { _, err := s.ListUsers(ctx); return err }

	// A statement in flight when the reset comes (the black hole keeps it there).
	p.BlackHole()
	inFlight := make(chan error, 1)
	go func() { inFlight <- list() }()
	testkit.Eventually(t, "the statement reaching the proxy", func() error {
		if p.Waiting() == 0 {
			return errors.New("nothing held yet")
		}
		return nil
	})
	p.ResetAll()
	p.Heal()
	select {
	case err := <-inFlight:
		if err != nil {
			wantUnavailable(t, err, "read cut by a reset")
		}
	case <-time.After(guard):
		t.Fatal("read cut by a reset: still waiting")
	}
	// Every connection is reset at its first message.
	p.ResetBeforeForwarding(0)
	p.ResetAll()
	wantUnavailable(t, within(t, "read", list), "read while every connection is reset")
	wantUnavailable(t, within(t, "ping", func() error { return s.Ping(ctx) }), "ping while every connection is reset")

	p.Heal()
	testkit.Eventually(t, "read after the resets stop", list)
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
	// Once the lock is gone the write succeeds. The 200 ms timeout is what the
	// test is about while the lock is held; on a busy machine an ordinary write
	// may take longer than that, so it is asked until it succeeds (a failure for
	// another reason than time would fail every try).
	testkit.Eventually(t, "a write after the lock is gone", create)
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

// TestClosedStoreIsUnavailable: once Close has run, every call fails as
// store_unavailable (a request still running while the process stops gets 503,
// not 500), on both engines.
func TestClosedStoreIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sqlite, err := store.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "closed.db"))
	if err != nil {
		t.Fatal(err)
	}
	engines := map[string]store.Store{"sqlite": sqlite}
	if os.Getenv(postgresEnv) != "" || localPostgresUp() {
		pg, err := store.Open(ctx, freshSchema(t))
		if err != nil {
			t.Fatal(err)
		}
		engines["postgres"] = pg
	}
	for name, st := range engines {
		st.Close()
		_, err := st.UserByEmail(ctx, "nobody@example.com")
		wantUnavailable(t, err, name+": UserByEmail after Close")
		_, _, err = st.ClaimIdempotencyKey(ctx, store.IdempotencyRecord{UserID: 1, Key: "k", RequestHash: "h"})
		wantUnavailable(t, err, name+": ClaimIdempotencyKey after Close")
		wantUnavailable(t, st.Ping(ctx), name+": Ping after Close")
	}
}
