package store_test

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/store"
)

// testUpgrade: rows an older vmgate (schema 1) left behind survive the migrations:
// session feed entries become session changes, in order, a key in progress gets
// a lease of 30 s from its creation (migration 0003: the lease of its day), so it can be taken over, a
// task row was last updated when it was created, and a raw signing key is kept as
// it was, marked not sealed (auth seals it at its first start), and the audit
// rows are chained, then keyed at the first start with a key file.
// raw is dsn as driver takes it.
func testUpgrade(t *testing.T, driver, raw, dsn string, created any) {
	ctx := t.Context()
	if err := store.MigrateUpTo(ctx, dsn, 1); err != nil {
		t.Fatalf("migrate to schema 1: %v", err)
	}
	db, err := sql.Open(driver, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`INSERT INTO users (email, role, created_at, updated_at) VALUES ('old@example.com', 'user', $1, $1)`,
		`INSERT INTO session_changes (session_id, changed_at) VALUES ('old-1', $1)`,
		`INSERT INTO session_changes (session_id, changed_at) VALUES ('old-2', $1)`,
		`INSERT INTO idempotency_keys (user_id, idem_key, request_hash, state, created_at, expires_at)
			SELECT id, 'old-key', 'h', 'in_progress', $1, $1 FROM users`,
		`INSERT INTO tasks (upid, cluster_id, user_id, op, vmid, status, created_at)
			VALUES ('UPID:pve1:1:2:3:qmstart:100:x:', 1, 1, 'start', 100, 'running', $1)`,
		`INSERT INTO audit (at, action, result, target) VALUES ($1, 'user.create', 'ok', 'user:1')`,
		`INSERT INTO audit (at, action, result, user_id) VALUES ($1, 'vm.start', 'vm_running', 1)`,
	} {
		if _, err := db.ExecContext(ctx, q, created); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO signing_keys (id, secret, created_at) VALUES ('old-kid', $1, $2)`,
		[]byte("raw-secret-of-32-bytes-123456789"), created); err != nil {
		t.Fatal(err)
	}
	s := openDSN(t, dsn)
	cs, err := s.Changes(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || cs[0].Kind != store.ChangeSession || cs[0].SessionID != "old-1" || cs[1].SessionID != "old-2" ||
		cs[1].Seq <= cs[0].Seq {
		t.Fatalf("feed after the upgrade: %+v", cs)
	}
	keys, err := s.SigningKeys(ctx)
	if err != nil || len(keys) != 1 || keys[0].ID != "old-kid" || keys[0].Sealed || string(keys[0].Secret) != "raw-secret-of-32-bytes-123456789" {
		t.Fatalf("signing keys after the upgrade: %+v %v", keys, err)
	}
	u, err := s.UserByEmail(ctx, "old@example.com")
	if err != nil {
		t.Fatal(err)
	}
	base := u.CreatedAt
	const oldLease = 30 * time.Second // what migration 0003 gives; store.IdempotencyLease is 60 s since 0118
	expired, err := s.ExpiredIdempotencyLeases(ctx, base.Add(oldLease), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(expired) != 1 || !expired[0].LeaseExpiresAt.Equal(base.Add(oldLease)) || expired[0].Owner != "" {
		t.Fatalf("old key in progress after the upgrade: %+v", expired)
	}
	if _, taken, err := s.TakeOverIdempotencyKey(ctx, u.ID, "old-key", "new", base.Add(time.Minute), base.Add(2*time.Minute)); err != nil || !taken {
		t.Fatalf("take over the old key: %v %v", taken, err)
	}
	// A task row gets UpdatedAt = CreatedAt and no idempotency key (0030).
	task, err := s.TaskByUPID(ctx, "UPID:pve1:1:2:3:qmstart:100:x:")
	if err != nil || !task.UpdatedAt.Equal(task.CreatedAt) || task.IdemKey != "" || !task.OutcomeUnknownAt.IsZero() {
		t.Fatalf("old task row after the upgrade: %+v %v", task, err)
	}
	// The audit rows written before the chain are chained at the first start (0016),
	// and new rows follow them.
	if _, err := s.AppendAudit(ctx, store.AuditRecord{Action: "x.after"}); err != nil {
		t.Fatal(err)
	}
	if v, err := audit.Verify(ctx, s, nil); err != nil || v.Rows != 3 || v.HeadID != 3 {
		t.Fatalf("audit chain after the upgrade: %+v %v", v, err)
	}
	// The first start with the key file keys it (0065) after the rows before,
	// which still verify by the unkeyed rule.
	sl := testSealer(t, 5)
	keyed, err := openKeyed(t, dsn, sl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := keyed.AppendAudit(ctx, store.AuditRecord{Action: "x.keyed"}); err != nil {
		t.Fatal(err)
	}
	if v, err := audit.Verify(ctx, keyed, sl); err != nil || v.Rows != 5 || v.KeyedFrom != 4 {
		t.Fatalf("audit chain keyed after the upgrade: %+v %v", v, err)
	}
	// New changes follow the old ones.
	if err := s.DeleteUser(ctx, u.ID); err != nil {
		t.Fatal(err)
	}
	if cs, err = s.Changes(ctx, cs[1].Seq, 10); err != nil || len(cs) != 1 || cs[0].Kind != store.ChangeUser {
		t.Fatalf("a change after the upgrade: %+v %v", cs, err)
	}
}

func TestSQLiteUpgrade(t *testing.T) {
	t.Parallel()
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	path := filepath.Join(t.TempDir(), "old.db")
	testUpgrade(t, "sqlite", path, "sqlite://"+path, when.UnixMilli())
}

func TestPostgresUpgrade(t *testing.T) {
	postgresDSN(t)
	t.Parallel()
	dsn := freshSchema(t)
	testUpgrade(t, "pgx", dsn, dsn, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
}

// testHoldsUpgrade: the unfinished operations an older vmgate (schema 0045)
// left behind hold their nodes after the upgrade (0055); of two unfinished
// evacuations of one node the older holds it, and an ended one holds nothing.
func testHoldsUpgrade(t *testing.T, driver, raw, dsn string, created any) {
	ctx := t.Context()
	if err := store.MigrateUpTo(ctx, dsn, 45); err != nil {
		t.Fatalf("migrate to schema 45: %v", err)
	}
	db, err := sql.Open(driver, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, row := range []struct {
		node, status string
	}{{"pve1", "done"}, {"pve1", "running"}, {"pve1", "planned"}, {"pve2", "running"}, {"", "running"}} {
		if _, err := db.ExecContext(ctx, `INSERT INTO operations (kind, cluster_id, node, status, user_id, max_parallel,
			created_at, lease_expires_at, updated_at) VALUES ('evacuate', 1, $1, $2, 1, 1, $3, $3, $3)`,
			row.node, row.status, created); err != nil {
			t.Fatal(err)
		}
	}
	s := openDSN(t, dsn)
	holds, err := s.OperationHolds(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(holds.Nodes) != 2 || holds.Nodes["pve1"].OperationID != 2 || holds.Nodes["pve2"].OperationID != 4 {
		t.Fatalf("holds after the upgrade: %+v, want pve1 by operation 2 and pve2 by 4", holds.Nodes)
	}
}

func TestSQLiteHoldsUpgrade(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "old.db")
	testHoldsUpgrade(t, "sqlite", path, "sqlite://"+path, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli())
}

func TestPostgresHoldsUpgrade(t *testing.T) {
	postgresDSN(t)
	t.Parallel()
	dsn := freshSchema(t)
	testHoldsUpgrade(t, "pgx", dsn, dsn, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
}

// testOperationsUpgrade: an older vmgate's (schema 0080) operation, its items and
// the hold of its node survive the rebuild that lets an operation end
// 'done_with_skips' (0091); its items are VMs (0090); a new operation gets a new
// id, and the old one can end with skips.
func testOperationsUpgrade(t *testing.T, driver, raw, dsn string, created any) {
	ctx := t.Context()
	if err := store.MigrateUpTo(ctx, dsn, 80); err != nil {
		t.Fatalf("migrate to schema 80: %v", err)
	}
	db, err := sql.Open(driver, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`INSERT INTO operations (kind, cluster_id, node, status, user_id, max_parallel, created_at, owner,
			lease_expires_at, updated_at) VALUES ('evacuate', 1, 'pve1', 'running', 1, 1, $1, 'old', $1, $1)`,
		`INSERT INTO operation_items (operation_id, idx, vmid, action, state) VALUES (1, 0, 100, 'migrate', 'ok')`,
		`INSERT INTO operation_items (operation_id, idx, vmid, action, state, error) VALUES (1, 1, 101, 'migrate', 'skipped', 'local disk')`,
		`INSERT INTO operation_holds (cluster_id, node, operation_id, created_at) VALUES (1, 'pve1', 1, $1)`,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = append(args, created)
		}
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s := openDSN(t, dsn)
	op, err := s.OperationByID(ctx, 1)
	if err != nil || len(op.Items) != 2 || op.Items[0].GuestKind != "qemu" || op.Items[1].Error != "local disk" {
		t.Fatalf("the old operation after the upgrade: %+v %v", op, err)
	}
	holds, err := s.OperationHolds(ctx, 1)
	if err != nil || holds.Nodes["pve1"].OperationID != 1 {
		t.Fatalf("holds after the upgrade: %+v %v", holds, err)
	}
	next, err := s.CreateOperation(ctx, store.Operation{Kind: "bulk.start", ClusterID: 1, UserID: 1, MaxParallel: 1,
		Owner: "new", LeaseExpiresAt: time.Now().Add(time.Minute),
		Items: []store.OperationItem{{VMID: 200, Action: "start", GuestKind: "lxc"}}})
	if err != nil || next.ID <= 1 {
		t.Fatalf("a new operation after the upgrade: %+v %v", next, err)
	}
	if err := s.SetOperationStatus(ctx, 1, "old", store.OperationDoneWithSkips, time.Now()); err != nil {
		t.Fatalf("end the old operation with skips: %v", err)
	}
	if holds, err = s.OperationHolds(ctx, 1); err != nil || len(holds.Nodes) != 0 {
		t.Fatalf("holds after the end: %+v %v", holds, err)
	}
}

func TestSQLiteOperationsUpgrade(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "old.db")
	testOperationsUpgrade(t, "sqlite", path, "sqlite://"+path, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli())
}

func TestPostgresOperationsUpgrade(t *testing.T) {
	postgresDSN(t)
	t.Parallel()
	dsn := freshSchema(t)
	testOperationsUpgrade(t, "pgx", dsn, dsn, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
}
