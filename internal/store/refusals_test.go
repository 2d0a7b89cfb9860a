package store_test

import (
	"bytes"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/store/storetest"
)

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// wantRefused fails t unless err is a write the database refused for reason,
// with a Retry-After and a message that says what an operator must do.
func wantRefused(t *testing.T, err error, reason, says, what string) {
	t.Helper()
	e, ok := errs.As(err)
	if !ok || e.Kind != errs.Unavailable || e.Reason != reason || e.RetryAfter <= 0 || !strings.Contains(e.Message, says) {
		t.Fatalf("%s: %v (%+v), want Unavailable %s with a Retry-After saying %q", what, err, e, reason, says)
	}
}

// TestSQLiteFull: with its disk full (another connection filled the database
// past the store's page limit), every write that needs room fails store_full
// with a message an operator can act on, and so does the write probe; reads go
// on; the log says the same, with the file, once for many refusals. Once space
// is freed, writes and the probe go through again.
func TestSQLiteFull(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	path := filepath.Join(t.TempDir(), "full.db")
	st, ballast := storetest.OpenFullableSQLite(t, path, 8,
		store.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := t.Context()
	if err := st.ProbeWrite(ctx); err != nil {
		t.Fatalf("the probe before the disk is full: %v", err)
	}
	first, err := st.CreateUser(ctx, store.User{Email: "first@example.com", PasswordHash: "h", Role: store.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	ballast.Fill()
	wantRefused(t, st.ProbeWrite(ctx), errs.ReasonStoreFull, "disk is full", "the probe")
	var werr error
	for i := 0; werr == nil; i++ {
		if i == 1000 {
			t.Fatal("1000 users written into a full database")
		}
		_, werr = st.CreateUser(ctx, store.User{Email: strings.Repeat("x", 200) + string(rune('a'+i%26)) + "@example.com",
			PasswordHash: strings.Repeat("h", 500), Role: store.RoleUser})
		if werr != nil && errs.KindOf(werr) == errs.Conflict {
			werr = nil // a repeated e-mail: the page it needed was there
		}
	}
	wantRefused(t, werr, errs.ReasonStoreFull, "free space", "a write")
	if u, err := st.UserByID(ctx, first.ID); err != nil || u.Email != "first@example.com" {
		t.Fatalf("a read while the disk is full: %+v %v", u, err)
	}
	log := logs.String()
	if n := strings.Count(log, "vmgate's database disk is full: free space on the disk holding "+path); n != 1 {
		t.Errorf("the log says the disk is full %d times (want once a minute), naming %s:\n%s", n, path, log)
	}

	ballast.Empty()
	if err := st.ProbeWrite(ctx); err != nil {
		t.Errorf("the probe once space was freed: %v", err)
	}
	if _, err := st.CreateUser(ctx, store.User{Email: "after@example.com", PasswordHash: "h", Role: store.RoleUser}); err != nil {
		t.Errorf("a write once space was freed: %v", err)
	}
}

// TestSQLiteReadOnly: while the database refuses writes, a write and the probe
// fail store_read_only and reads go on; then both go through again.
func TestSQLiteReadOnly(t *testing.T) {
	t.Parallel()
	st := openDSN(t, "sqlite://"+filepath.Join(t.TempDir(), "ro.db"))
	ctx := t.Context()
	u, err := st.CreateUser(ctx, store.User{Email: "a@example.com", PasswordHash: "h", Role: store.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.SetQueryOnly(st, true); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, st.ProbeWrite(ctx), errs.ReasonStoreReadOnly, "read-only", "the probe")
	_, err = st.CreateUser(ctx, store.User{Email: "b@example.com", PasswordHash: "h", Role: store.RoleUser})
	wantRefused(t, err, errs.ReasonStoreReadOnly, "writable again", "a write")
	if _, err := st.UserByID(ctx, u.ID); err != nil {
		t.Fatalf("a read while read-only: %v", err)
	}
	if err := store.SetQueryOnly(st, false); err != nil {
		t.Fatal(err)
	}
	if err := st.ProbeWrite(ctx); err != nil {
		t.Errorf("the probe once writable: %v", err)
	}
}

// TestPostgresReadOnly: a store opens on a PostgreSQL database that refuses
// writes (default_transaction_read_only, as on a standby) once its schema is up
// to date; reads work, a write and the probe fail store_read_only.
func TestPostgresReadOnly(t *testing.T) {
	postgresDSN(t)
	t.Parallel()
	dsn := freshSchema(t)
	rw := openDSN(t, dsn)
	ctx := t.Context()
	u, err := rw.CreateUser(ctx, store.User{Email: "a@example.com", PasswordHash: "h", Role: store.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	ro := openDSN(t, readOnlyDSN(t, dsn))
	if got, err := ro.UserByID(ctx, u.ID); err != nil || got.Email != u.Email {
		t.Fatalf("a read on the read-only store: %+v %v", got, err)
	}
	_, err = ro.CreateUser(ctx, store.User{Email: "b@example.com", PasswordHash: "h", Role: store.RoleUser})
	wantRefused(t, err, errs.ReasonStoreReadOnly, "read-only", "a write")
	wantRefused(t, ro.ProbeWrite(ctx), errs.ReasonStoreReadOnly, "read-only", "the probe")
	if err := rw.ProbeWrite(ctx); err != nil {
		t.Errorf("the probe on the writable store: %v", err)
	}
}

// readOnlyDSN is dsn with every transaction read-only.
func readOnlyDSN(t *testing.T, dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("default_transaction_read_only", "on")
	u.RawQuery = q.Encode()
	return u.String()
}

// TestPostgresRefusals: PostgreSQL's disk_full (53100) and read-only transaction
// (25006) reach the caller as store_full and store_read_only; its other
// resource errors stay store_unavailable.
func TestPostgresRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ code, reason string }{
		{"53100", errs.ReasonStoreFull},
		{"25006", errs.ReasonStoreReadOnly},
		{"53300", errs.ReasonStoreUnavailable}, // too_many_connections
		{"57P01", errs.ReasonStoreUnavailable}, // admin_shutdown
	} {
		err := store.PostgresRefusal(&pgconn.PgError{Code: tc.code, Message: "from the server"})
		e, ok := errs.As(err)
		if !ok || e.Kind != errs.Unavailable || e.Reason != tc.reason || e.RetryAfter <= 0 {
			t.Errorf("SQLSTATE %s: %v, want %s", tc.code, err, tc.reason)
		}
	}
}
