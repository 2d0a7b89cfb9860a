package audit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/store"
)

// chainEnv is a trail of n records in a SQLite file, and the file opened a second
// time with the driver directly, as someone with a copy of the database would.
func chainEnv(t *testing.T, n int) (store.Store, *sql.DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "t.db")
	st, err := store.Open(context.Background(), "sqlite://"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tr := New(st, Options{})
	ctx := WithActor(WithRequest(context.Background(), "192.0.2.9", "req", "ua"), 1, "a@example.org", "s1")
	for i := range n {
		tr.Record(ctx, store.AuditRecord{Action: "vm.start", VMID: int64(100 + i), Result: "ok"})
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return st, db
}

func exec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// TestVerifyIntact (docs/security.md item 30): an untouched chain verifies, before and after retention
// pruned its head.
func TestVerifyIntact(t *testing.T) {
	t.Parallel()
	st, _ := chainEnv(t, 10)
	v, err := Verify(context.Background(), st, nil)
	if err != nil || v.Rows != 10 || v.FirstID != 1 || v.HeadID != 10 || v.HeadChain == "" || v.CheckpointID != 0 {
		t.Fatalf("verify: %+v %v", v, err)
	}
	if _, err := st.Prune(context.Background(), time.Now().Add(24*time.Hour), store.PruneOptions{AuditOlderThan: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AppendAudit(context.Background(), store.AuditRecord{Action: "x.after"}); err != nil {
		t.Fatal(err)
	}
	v, err = Verify(context.Background(), st, nil)
	if err != nil || v.Rows != 1 || v.CheckpointID != 10 || v.HeadID != 11 {
		t.Fatalf("verify after pruning: %+v %v", v, err)
	}
}

// TestVerifyNamesTheFirstBrokenRow (docs/security.md item 30): a row edited with SQL, a row
// or several deleted, a row inserted (raw, or with a chain value computed to fit),
// and the newest rows removed are each named.
func TestVerifyNamesTheFirstBrokenRow(t *testing.T) {
	t.Parallel()
	forged := func(t *testing.T, st store.Store, db *sql.DB, id int64, prev string) {
		a := store.AuditRecord{ID: id, At: time.Now().UTC().Truncate(time.Millisecond), Action: "user.create",
			Result: "ok", Count: 1, Prev: prev}
		a.Chain = store.AuditChainValue(a)
		exec(t, db, `INSERT INTO audit (id, at, action, result, count, prev, chain) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			a.ID, a.At.UnixMilli(), a.Action, a.Result, a.Count, a.Prev, a.Chain)
	}
	chainOf := func(t *testing.T, db *sql.DB, id int64) string {
		var c string
		if err := db.QueryRow(`SELECT chain FROM audit WHERE id = ?`, id).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, c := range []struct {
		name   string
		tamper func(t *testing.T, st store.Store, db *sql.DB)
		want   ChainBreak
	}{
		{"a field edited", func(t *testing.T, st store.Store, db *sql.DB) {
			exec(t, db, `UPDATE audit SET result = 'denied' WHERE id = 4`)
		}, ChainBreak{Kind: Changed, ID: 4, AfterID: 3}},
		{"the time edited", func(t *testing.T, st store.Store, db *sql.DB) {
			exec(t, db, `UPDATE audit SET at = at - 60000 WHERE id = 7`)
		}, ChainBreak{Kind: Changed, ID: 7, AfterID: 6}},
		{"edited and its value computed anew", func(t *testing.T, st store.Store, db *sql.DB) {
			rehashed(t, st, db, 5, "user:1", "ok")
		}, ChainBreak{Kind: Changed, ID: 5, AfterID: 4}},
		{"the newest row edited and its value computed anew", func(t *testing.T, st store.Store, db *sql.DB) {
			rehashed(t, st, db, 10, "", "failed")
		}, ChainBreak{Kind: Changed, ID: 10, AfterID: 9}},
		{"one row deleted", func(t *testing.T, st store.Store, db *sql.DB) {
			exec(t, db, `DELETE FROM audit WHERE id = 4`)
		}, ChainBreak{Kind: Removed, ID: 4, FromID: 4, ToID: 4, AfterID: 3}},
		{"three rows deleted", func(t *testing.T, st store.Store, db *sql.DB) {
			exec(t, db, `DELETE FROM audit WHERE id BETWEEN 2 AND 4`)
		}, ChainBreak{Kind: Removed, ID: 2, FromID: 2, ToID: 4, AfterID: 1}},
		{"the first row deleted", func(t *testing.T, st store.Store, db *sql.DB) {
			exec(t, db, `DELETE FROM audit WHERE id = 1`)
		}, ChainBreak{Kind: Removed, ID: 1, FromID: 1, ToID: 1, AfterID: 0}},
		{"the newest rows deleted", func(t *testing.T, st store.Store, db *sql.DB) {
			exec(t, db, `DELETE FROM audit WHERE id >= 9`)
		}, ChainBreak{Kind: Removed, ID: 9, FromID: 9, ToID: 10, AfterID: 8}},
		{"a raw row inserted past the head", func(t *testing.T, st store.Store, db *sql.DB) {
			exec(t, db, `INSERT INTO audit (id, at, action, result) VALUES (11, 0, 'user.create', 'ok')`)
		}, ChainBreak{Kind: Inserted, ID: 11, AfterID: 10}},
		{"a fitted row inserted past the head", func(t *testing.T, st store.Store, db *sql.DB) {
			forged(t, st, db, 11, chainOf(t, db, 10))
		}, ChainBreak{Kind: Inserted, ID: 11, AfterID: 10}},
		{"a row replaced by a raw one", func(t *testing.T, st store.Store, db *sql.DB) {
			exec(t, db, `DELETE FROM audit WHERE id = 6`)
			exec(t, db, `INSERT INTO audit (id, at, action, result) VALUES (6, 0, 'user.create', 'ok')`)
		}, ChainBreak{Kind: Changed, ID: 6, AfterID: 5}},
		{"a fitted row inserted in the middle", func(t *testing.T, st store.Store, db *sql.DB) {
			// Make room the only way ids allow: move rows 6..10 up by one.
			exec(t, db, `UPDATE audit SET id = id + 100 WHERE id >= 6`)
			exec(t, db, `UPDATE audit SET id = id - 99 WHERE id >= 106`)
			forged(t, st, db, 6, chainOf(t, db, 5))
		}, ChainBreak{Kind: Inserted, ID: 6, AfterID: 5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st, db := chainEnv(t, 10)
			c.tamper(t, st, db)
			_, err := Verify(context.Background(), st, nil)
			var b *ChainBreak
			if !errors.As(err, &b) {
				t.Fatalf("verify: %v, want a break", err)
			}
			if *b != c.want {
				t.Errorf("break %+v (%v), want %+v (%v)", *b, b, c.want, &c.want)
			}
		})
	}
}

// rehashed gives row id another target and result and its chain value computed
// anew from them, as someone who knows the canonical form would.
func rehashed(t *testing.T, st store.Store, db *sql.DB, id int64, target, result string) {
	t.Helper()
	recs, err := st.AuditRange(context.Background(), id-1, 1)
	if err != nil || len(recs) != 1 {
		t.Fatalf("read row %d: %v", id, err)
	}
	a := recs[0]
	a.Target, a.Result = target, result
	a.Chain = store.AuditChainValue(a)
	exec(t, db, `UPDATE audit SET target = ?, result = ?, chain = ? WHERE id = ?`, a.Target, a.Result, a.Chain, id)
}

// TestVerifyWhileAppending (docs/security.md item 30): rows appended while Verify walks are not taken for
// insertions.
func TestVerifyWhileAppending(t *testing.T) {
	t.Parallel()
	st, _ := chainEnv(t, 3)
	grow := &growing{Store: st}
	v, err := Verify(context.Background(), grow, nil)
	if err != nil || v.HeadID != 3 || v.Rows != 3 {
		t.Fatalf("verify: %+v %v", v, err)
	}
}

// growing appends a row after the chain's state is first read, as another
// replica would during a walk.
type growing struct {
	store.Store
	done bool
}

func (g *growing) AuditChain(ctx context.Context) (store.AuditChainState, error) {
	c, err := g.Store.AuditChain(ctx)
	if !g.done {
		g.done = true
		if _, err := g.Store.AppendAudit(ctx, store.AuditRecord{Action: "x.meanwhile"}); err != nil {
			return c, fmt.Errorf("append: %w", err)
		}
	}
	return c, err
}
