package store

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestPreferWriter: a new connection tries the host that took writes last
// first (both of its entries under sslmode=prefer, in their order), the others
// after it in theirs, without changing the configuration it was copied from.
func TestPreferWriter(t *testing.T) {
	t.Parallel()
	cfg, err := pgx.ParseConfig("postgres://u@127.0.0.1:5432,127.0.0.2:5433,127.0.0.3:5434/db?sslmode=prefer")
	if err != nil {
		t.Fatal(err)
	}
	order := func(c *pgx.ConnConfig) string {
		s := fmt.Sprintf("%s:%d/%v", c.Host, c.Port, c.TLSConfig != nil)
		for _, f := range c.Fallbacks {
			s += fmt.Sprintf(" %s:%d/%v", f.Host, f.Port, f.TLSConfig != nil)
		}
		return s
	}
	before := order(cfg)
	for _, tc := range []struct{ writer, want string }{
		{"", before},
		{"127.0.0.1:5432", before},
		{"127.0.0.2:5433", "127.0.0.2:5433/true 127.0.0.2:5433/false 127.0.0.1:5432/true 127.0.0.1:5432/false 127.0.0.3:5434/true 127.0.0.3:5434/false"},
		{"127.0.0.3:5434", "127.0.0.3:5434/true 127.0.0.3:5434/false 127.0.0.1:5432/true 127.0.0.1:5432/false 127.0.0.2:5433/true 127.0.0.2:5433/false"},
		{"127.0.0.2:9999", before}, // a port of no host: the order stays
	} {
		w := &pgWriter{host: tc.writer}
		c := *cfg
		if err := w.preferWriter(context.Background(), &c); err != nil {
			t.Fatal(err)
		}
		if got := order(&c); got != tc.want {
			t.Errorf("writer %q: order %s, want %s", tc.writer, got, tc.want)
		}
		if order(cfg) != before {
			t.Fatalf("writer %q changed the configuration it was given a copy of: %s", tc.writer, order(cfg))
		}
	}
}

// TestConnectTimeoutShared: without connect_timeout, each host of a multi-host
// DSN gets its share of the store's deadline (at least minConnectTimeout), so
// the last is tried within it; one host gets all of it, and a DSN's own
// connect_timeout is kept.
func TestConnectTimeoutShared(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dsn  string
		want time.Duration
	}{
		{"postgres://u@h1:5432/db?sslmode=disable", 6 * time.Second},
		{"postgres://u@h1:5432,h2:5433/db?sslmode=disable", 3 * time.Second},
		{"postgres://u@h1:5432,h2:5433/db", 3 * time.Second}, // sslmode=prefer: two entries per host
		{"postgres://u@h1,h2,h3/db?sslmode=disable", 2 * time.Second},
		{"postgres://u@h1:5432,h2:5433/db?sslmode=disable&connect_timeout=1", time.Second},
		{"postgres://u@a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p/db?sslmode=disable", minConnectTimeout},
	} {
		cfg, err := postgresConfig(tc.dsn, Options{Timeout: 6 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.ConnectTimeout != tc.want {
			t.Errorf("%s: connect timeout %v, want %v", tc.dsn, cfg.ConnectTimeout, tc.want)
		}
	}
}

// TestFailoverSign: what drops the pool's connections.
func TestFailoverSign(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err         error
		multi, want bool
	}{
		{&pgconn.PgError{Code: "25006"}, true, true},
		{&pgconn.PgError{Code: "25006"}, false, false}, // one host: read-only is store_read_only (issue 17)
		{&pgconn.PgError{Code: "57P01"}, false, true},
		{&pgconn.PgError{Code: "08006"}, false, true},
		{&pgconn.PgError{Code: "23505"}, true, false},
		{context.DeadlineExceeded, true, false},
		{fmt.Errorf("read: %w", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), true, true},
	} {
		if got := failoverSign(tc.err, tc.multi); got != tc.want {
			t.Errorf("%v (multi %v): %v, want %v", tc.err, tc.multi, got, tc.want)
		}
	}
}
