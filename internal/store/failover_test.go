package store_test

import (
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// deadAddr is a loopback address where nothing listens: a dead host.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// multiHost is dsn with a dead host named before its own, and query set.
func multiHost(t *testing.T, dsn string, query map[string]string) (string, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	live := u.Host
	if !strings.Contains(live, ":") {
		live += ":5432"
	}
	u.Host = deadAddr(t) + "," + live
	q := u.Query()
	for k, v := range query {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String(), live
}

// TestMultiHostDSN (issue 25): a DSN naming a dead host first and the live one
// second opens, writes to the live host and says so (Writer); a write that the
// host refuses as read-only is, with several hosts named, a failover in
// progress: store_unavailable (retry soon), not store_read_only, and the log
// says the store reconnects to the host that takes writes.
func TestMultiHostDSN(t *testing.T) {
	postgresDSN(t)
	t.Parallel()
	ctx := t.Context()
	dsn := freshSchema(t)
	multi, live := multiHost(t, dsn, map[string]string{"target_session_attrs": "read-write"})
	st := openDSN(t, multi)
	if _, err := st.CreateUser(ctx, store.User{Email: "a@example.com", PasswordHash: "h", Role: store.RoleUser}); err != nil {
		t.Fatalf("a write through the multi-host DSN: %v", err)
	}
	w, ok := st.(store.WriterReporter).Writer()
	liveIP, livePort, _ := net.SplitHostPort(live)
	if ips, err := net.LookupHost(liveIP); err == nil && net.ParseIP(liveIP) == nil {
		liveIP = ips[0]
	}
	if !ok || w.Host != net.JoinHostPort(liveIP, livePort) || w.Failovers != 0 {
		t.Errorf("Writer: %+v %v, want %s:%s and no failover", w, ok, liveIP, livePort)
	}

	var logged syncBuffer
	roDSN, _ := multiHost(t, readOnlyDSN(t, dsn), nil)
	ro, err := store.OpenWith(ctx, roDSN, store.Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ro.Close() })
	_, err = ro.CreateUser(ctx, store.User{Email: "b@example.com", PasswordHash: "h", Role: store.RoleUser})
	if e, ok := errs.As(err); !ok || e.Kind != errs.Unavailable || e.Reason != errs.ReasonStoreUnavailable || e.RetryAfter <= 0 {
		t.Fatalf("a write refused read-only with two hosts named: %v, want store_unavailable with a Retry-After", err)
	}
	if !strings.Contains(logged.String(), "reconnecting to the host that takes writes") {
		t.Errorf("the log does not say the store reconnects:\n%s", logged.String())
	}
	if got, err := ro.UserByEmail(ctx, "a@example.com"); err != nil || got.Email != "a@example.com" {
		t.Errorf("a read after the failover sign: %+v %v", got, err)
	}
}

// blackHole is a host that takes TCP connections and never answers them, as a
// dead primary behind a firewall that drops packets looks to a client once its
// SYN is answered (the worst case: pgx waits for the server's first message).
type blackHole struct {
	ln       net.Listener
	mu       sync.Mutex
	accepted []net.Conn
}

func newBlackHole(t *testing.T) *blackHole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &blackHole{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.accepted = append(h.accepted, c)
			h.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, c := range h.accepted {
			c.Close()
		}
	})
	return h
}

// connections is how many connections the black hole took so far.
func (h *blackHole) connections() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.accepted)
}

// TestBlackHoledFirstHost (issue 25, docs/decisions/0118): with a dead primary
// that swallows connections named first, the store still opens within its
// deadline (each host gets its share of it to connect), and once it knows the
// live host takes writes, new connections go there first: the black hole sees
// none of them.
func TestBlackHoledFirstHost(t *testing.T) {
	postgresDSN(t)
	t.Parallel()
	ctx := t.Context()
	hole := newBlackHole(t)
	u, err := url.Parse(freshSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	live := u.Host
	if !strings.Contains(live, ":") {
		live += ":5432"
	}
	u.Host = hole.ln.Addr().String() + "," + live
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	q.Del("connect_timeout") // the store shares its own deadline out
	u.RawQuery = q.Encode()
	// Without its share, the black hole would take the whole 4 s and the open
	// would fail: the store's first connection has that deadline too.
	st, err := store.OpenWith(ctx, u.String(), store.Options{Timeout: 4 * time.Second})
	if err != nil {
		t.Fatalf("open with a black-holed first host: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	if n := hole.connections(); n == 0 {
		t.Fatal("the black hole saw no connection: the test tests nothing")
	}
	if _, err := st.CreateUser(ctx, store.User{Email: "a@example.com", PasswordHash: "h", Role: store.RoleUser}); err != nil {
		t.Fatalf("a write: %v", err)
	}
	before := hole.connections()
	// Three connections held at once: the pool opens at least two new ones.
	for range 3 {
		c, err := store.PoolConn(ctx, st)
		if err != nil {
			t.Fatalf("a pool connection: %v", err)
		}
		defer c.Close()
	}
	if after := hole.connections(); after != before {
		t.Errorf("new connections tried the black hole again (%d → %d): the last writer is not tried first", before, after)
	}
}
