package faultproxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/vmgate/vmgate/internal/testkit"
)

// postgresDSN is the server of internal/store's tests: VMGATE_TEST_POSTGRES or
// the local one; the test is skipped when neither answers (CI fails).
func postgresDSN(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("VMGATE_TEST_POSTGRES")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable&connect_timeout=2"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("PostgreSQL required in CI: %v", err)
		}
		t.Skipf("no PostgreSQL (%v)", err)
	}
	c.Close(ctx)
	return dsn
}

// via points dsn at the proxy, without TLS (so that the proxy's request
// counting sees PostgreSQL's messages, not a handshake).
func via(t *testing.T, dsn string, p *Proxy) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.Addr()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return u.String()
}

// TestPostgres puts the proxy in front of PostgreSQL: a black hole makes a
// query wait until its own deadline (never an error from the network), a
// heal lets a new connection work, and a reset after forwarding loses the
// answer of an INSERT that PostgreSQL committed.
//
// The reset goes through a proxy of its own. A counted fault strikes the next
// request on any connection of its proxy, and the black-holed connection still
// sends requests after the heal, when the test no longer waits for it: pgx
// closes a connection whose query ran out of time in a goroutine of its own,
// which sends a CancelRequest on a new connection and a Terminate on the old
// one. Through one proxy either could take ResetAfterForwarding(1)'s only
// strike and the INSERT's answer arrived (issue 17, docs/history.md).
func TestPostgres(t *testing.T) {
	t.Parallel()
	dsn := postgresDSN(t)
	ctx := context.Background()
	host := func() string { u, _ := url.Parse(dsn); return u.Host }()
	if _, _, err := net.SplitHostPort(host); err != nil {
		t.Skipf("DSN host %q", host)
	}
	p := newProxy(t, host, Options{})

	direct, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(ctx)
	b := make([]byte, 6)
	rand.Read(b)
	schema := "faultproxy_test_" + hex.EncodeToString(b)
	if _, err := direct.Exec(ctx, "CREATE SCHEMA "+schema+"; CREATE TABLE "+schema+".t (n int)"); err != nil {
		t.Fatal(err)
	}
	defer direct.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")

	c, err := pgx.Connect(ctx, via(t, dsn, p))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var one int
	if err := c.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("through the proxy: %d, %v", one, err)
	}

	// Black hole: the query waits for its deadline, whatever it is.
	p.BlackHole()
	qctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = c.QueryRow(qctx, "SELECT 2").Scan(&one)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) && !pgconnTimeout(err) {
		t.Fatalf("black-holed query: %v, want its deadline", err)
	}
	// The query's bytes reach the proxy's gate on the proxy's goroutines, which
	// the client's deadline does not wait for.
	testkit.Until(t, "the query held in the black hole", func() bool { return p.Waiting() > 0 })
	p.Heal()
	c2, err := pgx.Connect(ctx, via(t, dsn, p))
	if err != nil {
		t.Fatalf("after the heal: %v", err)
	}
	defer c2.Close(ctx)
	if err := c2.QueryRow(ctx, "SELECT 3").Scan(&one); err != nil || one != 3 {
		t.Fatalf("after the heal: %d, %v", one, err)
	}

	// Reset after forwarding: PostgreSQL committed, the client got a reset. The
	// proxy's only client is c3, its startup done: the INSERT is the next request.
	pr := newProxy(t, host, Options{})
	c3, err := pgx.Connect(ctx, via(t, dsn, pr))
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close(ctx)
	pr.ResetAfterForwarding(1)
	_, err = c3.Exec(ctx, "INSERT INTO "+schema+".t VALUES (1)")
	if err == nil {
		t.Fatal("the INSERT's answer arrived through a reset")
	}
	var n int
	if err := direct.QueryRow(ctx, "SELECT count(*) FROM "+schema+".t").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows committed: %d, %v; want 1", n, err)
	}
	if s := pr.Stats(); s.Resets != 1 {
		t.Errorf("stats %+v", s)
	}
}

func pgconnTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}
