package store_test

import (
	"log/slog"
	"net"
	"net/url"
	"strings"
	"testing"

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
