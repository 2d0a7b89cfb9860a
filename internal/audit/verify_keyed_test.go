package audit

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
)

// keyedChainEnv is a chain of 3 unkeyed rows, then keyed by a store opened with a
// key file (row 4 begins the keyed chain), then 6 keyed rows: 10 rows. It returns
// the keyed store, its key file's Sealer, and the file opened with the driver, as
// a writer of the database alone has it.
func keyedChainEnv(t *testing.T) (store.Store, *seal.Sealer, *sql.DB) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "t.db")
	plain, err := store.Open(ctx, "sqlite://"+path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := plain.AppendAudit(ctx, store.AuditRecord{Action: "vm.start", VMID: int64(100 + i), Result: "ok"}); err != nil {
			t.Fatal(err)
		}
	}
	plain.Close()
	sl, err := seal.New(bytes.Repeat([]byte{3}, seal.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenWith(ctx, "sqlite://"+path, store.Options{Sealer: sl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tr := New(st, Options{})
	rctx := WithActor(WithRequest(ctx, "192.0.2.9", "req", "ua"), 1, "a@example.org", "s1")
	for i := range 6 {
		tr.Record(rctx, store.AuditRecord{Action: "vm.stop", VMID: int64(200 + i), Result: "ok"})
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return st, sl, db
}

// rewriteUnkeyed is what a writer of the database alone can do: change row from
// and give it and every row after it a chain value computed anew, linked, by the
// rule anyone can compute (store.AuditChainValue), moving the head along; with
// keyedFrom >= 0 it also sets where the chain says keying began.
func rewriteUnkeyed(t *testing.T, st store.Store, db *sql.DB, from int64, keyedFrom int64) {
	t.Helper()
	ctx := context.Background()
	rows, err := st.AuditRange(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	prev := ""
	for _, a := range rows {
		if a.ID < from {
			prev = a.Chain
			continue
		}
		if a.ID == from {
			a.Result = "denied"
		}
		a.Prev = prev
		a.Chain = store.AuditChainValue(a)
		exec(t, db, `UPDATE audit SET result = ?, prev = ?, chain = ? WHERE id = ?`, a.Result, a.Prev, a.Chain, a.ID)
		prev = a.Chain
		exec(t, db, `UPDATE audit_chain SET head_id = ?, head_chain = ? WHERE id = 1`, a.ID, a.Chain)
	}
	if keyedFrom >= 0 {
		exec(t, db, `UPDATE audit_chain SET keyed_from = ? WHERE id = 1`, keyedFrom)
	}
}

// TestVerifyKeyedChain (docs/security.md item 30): once keyed, the chain names where keying
// began and when, and a writer of the database alone cannot rewrite it
// consistently — a row rewritten with its successors by the unkeyed rule, in the
// keyed part or before it, is named; moving or removing the record of where
// keying began, to pass keyed rows off as unkeyed, is named too. Verifying needs
// the key file, and says so when given none or another.
func TestVerifyKeyedChain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	st, sl, _ := keyedChainEnv(t)
	v, err := Verify(ctx, st, sl)
	if err != nil || v.Rows != 10 || v.HeadID != 10 || v.KeyedFrom != 4 || v.KeyedAt.IsZero() {
		t.Fatalf("verify the keyed chain: %+v %v", v, err)
	}
	recs, _ := st.AuditRange(ctx, 3, 1)
	if recs[0].Action != store.ChainKeyedAction || recs[0].Chain == store.AuditChainValue(recs[0]) {
		t.Fatalf("row 4 does not begin a keyed chain: %+v", recs[0])
	}
	if _, err := Verify(ctx, st, nil); !errors.Is(err, ErrKeyFileNeeded) {
		t.Errorf("verify without the key file: %v", err)
	}
	other, _ := seal.New(bytes.Repeat([]byte{4}, seal.KeySize))
	if _, err := Verify(ctx, st, other); err == nil || !strings.Contains(err.Error(), sl.CurrentID()) ||
		!strings.Contains(err.Error(), other.CurrentID()) {
		t.Errorf("verify with another key file: %v", err)
	}

	for _, c := range []struct {
		name   string
		tamper func(t *testing.T, st store.Store, db *sql.DB)
		want   ChainBreak
	}{
		{"a keyed row and its successors rewritten by the unkeyed rule", func(t *testing.T, st store.Store, db *sql.DB) {
			rewriteUnkeyed(t, st, db, 6, -1)
		}, ChainBreak{Kind: Changed, ID: 6, AfterID: 5}},
		{"the newest row rewritten by the unkeyed rule", func(t *testing.T, st store.Store, db *sql.DB) {
			rewriteUnkeyed(t, st, db, 10, -1)
		}, ChainBreak{Kind: Changed, ID: 10, AfterID: 9}},
		{"an unkeyed row before the keying, and all after it", func(t *testing.T, st store.Store, db *sql.DB) {
			rewriteUnkeyed(t, st, db, 2, -1)
		}, ChainBreak{Kind: Changed, ID: 4, AfterID: 3}},
		{"the keying moved past the rows rewritten", func(t *testing.T, st store.Store, db *sql.DB) {
			rewriteUnkeyed(t, st, db, 6, 11)
		}, ChainBreak{Kind: Rekeyed, ID: 11, FromID: 11, AfterID: 0}},
		{"the keying removed, everything rewritten", func(t *testing.T, st store.Store, db *sql.DB) {
			rewriteUnkeyed(t, st, db, 1, 0)
			exec(t, db, `UPDATE audit_chain SET key_sealed = NULL WHERE id = 1`)
		}, ChainBreak{Kind: Rekeyed, ID: 4, FromID: 0, AfterID: 3}},
		{"the sealed key damaged", func(t *testing.T, st store.Store, db *sql.DB) {
			exec(t, db, `UPDATE audit_chain SET key_sealed = CAST(substr(key_sealed, 1, 40) || x'00' AS BLOB) WHERE id = 1`)
		}, ChainBreak{Kind: Rekeyed, ID: 4, FromID: 4, AfterID: 0}},
		{"another audit key in its place (sealed with the key file itself)", func(t *testing.T, st store.Store, db *sql.DB) {
			forged, _ := sl.Seal(bytes.Repeat([]byte{9}, store.AuditKeySize), seal.AuditKeyAAD("4"))
			exec(t, db, `UPDATE audit_chain SET key_sealed = ? WHERE id = 1`, forged)
		}, ChainBreak{Kind: Changed, ID: 4, AfterID: 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st, sl, db := keyedChainEnv(t)
			c.tamper(t, st, db)
			_, err := Verify(ctx, st, sl)
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
