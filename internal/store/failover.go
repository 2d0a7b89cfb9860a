package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A PostgreSQL failover (issue 25, docs/decisions/0118): the primary dies and a
// standby is promoted at another address. The DSN names both hosts
// (postgres://h1:5432,h2:5433/vmgate?target_session_attrs=read-write), so every
// new connection goes to whichever host takes writes; what is left to vmgate is
// to let go of the connections it holds to the old primary, and to find the new
// one quickly:
//
//   - a broken connection, or a "read-only transaction" (SQLSTATE 25006, a
//     demoted primary that still answers), drops every pooled connection made
//     before it (a new generation: older connections are discarded when next
//     taken from the pool, idle ones at once);
//   - a new connection tries the host that took writes last first, so a dead
//     host that black-holes its connections costs one connect timeout, not one
//     per connection;
//   - each host has its share of the store's deadline to connect, so that the
//     last host is still tried within it.

// pgWriter follows which PostgreSQL host a store writes to.
type pgWriter struct {
	db  *sql.DB
	log *slog.Logger
	// multi: the DSN names several hosts, or asks for a session that takes
	// writes; only then is a read-only answer taken for a failover in progress.
	multi bool
	// gen is the pool's generation: a connection made in an older one is
	// discarded when it is next taken from the pool.
	gen atomic.Int64

	mu        sync.Mutex
	host      string    // the address of the newest connection, "" before the first
	failovers int64     // times host changed
	dropped   time.Time // last drop, so that a burst of failures logs once
}

// genKey is where a connection keeps its generation (pgconn.PgConn.CustomData).
const genKey = "vmgate.pool.generation"

// WriterState is what a PostgreSQL store knows of the host it writes to.
type WriterState struct {
	// Host is the address (ip:port) of the host the newest connection went to;
	// empty before the first.
	Host string
	// Failovers counts the times Host changed since the store opened.
	Failovers int64
}

// WriterReporter is a store that can tell which database host it writes to:
// a PostgreSQL store. (SQLite's is the file, and never fails over.)
type WriterReporter interface {
	Writer() (WriterState, bool)
}

// Writer implements WriterReporter: ok is false on SQLite.
func (b *bounded) Writer() (WriterState, bool) {
	w := b.s.writer
	if w == nil {
		return WriterState{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return WriterState{Host: w.host, Failovers: w.failovers}, true
}

// hostsOf lists the distinct host:port pairs cfg connects to, in its order
// (sslmode=prefer lists each host twice, with and without TLS).
func hostsOf(cfg *pgconn.Config) []string {
	all := []string{net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))}
	for _, f := range cfg.Fallbacks {
		all = append(all, net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port))))
	}
	var hosts []string
	seen := map[string]bool{}
	for _, h := range all {
		if !seen[h] {
			seen[h] = true
			hosts = append(hosts, h)
		}
	}
	return hosts
}

// preferWriter reorders cfg's hosts so that those at the address that took
// writes last come first, the others after them in their order. cfg is a copy
// whose Fallbacks slice may be shared: it is replaced, never changed in place.
func (w *pgWriter) preferWriter(ctx context.Context, cfg *pgx.ConnConfig) error {
	w.mu.Lock()
	last := w.host
	w.mu.Unlock()
	if last == "" || len(cfg.Fallbacks) == 0 {
		return nil
	}
	all := append([]*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port, TLSConfig: cfg.TLSConfig}}, cfg.Fallbacks...)
	var first, rest []*pgconn.FallbackConfig
	for _, f := range all {
		if w.isAt(ctx, cfg, f, last) {
			first = append(first, f)
		} else {
			rest = append(rest, f)
		}
	}
	if len(first) == 0 || first[0] == all[0] {
		return nil
	}
	all = append(first, rest...)
	cfg.Host, cfg.Port, cfg.TLSConfig = all[0].Host, all[0].Port, all[0].TLSConfig
	cfg.Fallbacks = all[1:]
	return nil
}

// isAt reports whether f's host resolves to addr (ip:port). A host name that does
// not resolve now is not at addr: it keeps its place.
func (w *pgWriter) isAt(ctx context.Context, cfg *pgx.ConnConfig, f *pgconn.FallbackConfig, addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port != strconv.Itoa(int(f.Port)) {
		return false
	}
	if ip := net.ParseIP(f.Host); ip != nil {
		return ip.Equal(net.ParseIP(host))
	}
	if len(f.Host) > 0 && f.Host[0] == '/' {
		return f.Host == host // a Unix socket directory
	}
	lookup := cfg.LookupFunc
	if lookup == nil {
		lookup = net.DefaultResolver.LookupHost
	}
	ips, err := lookup(ctx, f.Host)
	if err != nil {
		return false
	}
	for _, ip := range ips {
		if p := net.ParseIP(ip); p != nil && p.Equal(net.ParseIP(host)) {
			return true
		}
	}
	return false
}

// connected notes a new connection: its generation, and the host it went to.
func (w *pgWriter) connected(_ context.Context, conn *pgx.Conn) error {
	conn.PgConn().CustomData()[genKey] = w.gen.Load()
	w.note(remoteAddr(conn.PgConn()), "pool")
	return nil
}

// remoteAddr is the address a connection went to (ip:port, or a socket's path).
func remoteAddr(c *pgconn.PgConn) string {
	if nc := c.Conn(); nc != nil && nc.RemoteAddr() != nil {
		return nc.RemoteAddr().String()
	}
	return ""
}

// note records host as the one written to, counting and logging a change.
func (w *pgWriter) note(host, by string) {
	if host == "" {
		return
	}
	w.mu.Lock()
	was := w.host
	w.host = host
	changed := was != "" && was != host
	if changed {
		w.failovers++
	}
	w.mu.Unlock()
	if changed {
		w.log.Warn("PostgreSQL: now writing to another host (a failover)", slog.String("host", host),
			slog.String("was", was), slog.String("seen_by", by))
	}
}

// reuse discards a connection made before the last drop.
func (w *pgWriter) reuse(_ context.Context, conn *pgx.Conn) error {
	if g, _ := conn.PgConn().CustomData()[genKey].(int64); g < w.gen.Load() {
		return driver.ErrBadConn
	}
	return nil
}

// failed looks at the error of a call: a lost connection, or a read-only answer
// when the DSN asks for a writable host, drops the pool's connections, and
// reports true when err is such a failover sign (so that the caller answers
// store_unavailable, not store_read_only).
func (w *pgWriter) failed(err error) bool {
	if !failoverSign(err, w.multi) {
		return false
	}
	w.gen.Add(1)
	// Closing the idle connections now spares the next callers a failed
	// statement each; those in use are discarded when they come back.
	w.db.SetMaxIdleConns(0)
	w.db.SetMaxIdleConns(poolMaxIdle)
	now := time.Now()
	w.mu.Lock()
	log := now.Sub(w.dropped) >= time.Second
	if log {
		w.dropped = now
	}
	host := w.host
	w.mu.Unlock()
	if log {
		w.log.Warn("PostgreSQL: connection lost or read-only; reconnecting to the host that takes writes",
			slog.String("host", host), slog.String("error", err.Error()))
	}
	return true
}

// failoverSign reports whether err says the connection's host is gone or no
// longer takes writes.
func failoverSign(err error, multi bool) bool {
	var e *pgconn.PgError
	if errors.As(err, &e) {
		switch {
		case e.Code == "25006": // read_only_sql_transaction
			return multi
		case len(e.Code) == 5 && e.Code[:2] == "08", // connection_exception
			e.Code == "57P01", // admin_shutdown
			e.Code == "57P02", // crash_shutdown
			e.Code == "57P03": // cannot_connect_now
			return true
		}
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false // slow, not gone: pgx closes that connection itself
	}
	var connectErr *pgconn.ConnectError
	return errors.As(err, &connectErr) || connectionFailed(err)
}
