package vmops

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/faultproxy"
	_ "github.com/vmgate/vmgate/internal/store" // registers the pgx driver
)

// postgresThroughProxy gives a test a fresh schema on the test PostgreSQL
// ($VMGATE_TEST_POSTGRES, else the local server; skipped without one, failed
// under CI) and a DSN that reaches it through a fault proxy (without TLS, so the
// proxy sees PostgreSQL's messages).
func postgresThroughProxy(t *testing.T) (*faultproxy.Proxy, string) {
	t.Helper()
	dsn := os.Getenv("VMGATE_TEST_POSTGRES")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable&connect_timeout=2"
	}
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		msg := "no PostgreSQL for this test (" + err.Error() + "); set VMGATE_TEST_POSTGRES"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	var b [6]byte
	rand.Read(b[:])
	schema := "vmgate_test_" + hex.EncodeToString(b[:])
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.ExecContext(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
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
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return p, u.String()
}
