package store_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
)

func testSealer(t *testing.T, b byte) *seal.Sealer {
	t.Helper()
	sl, err := seal.New(bytes.Repeat([]byte{b}, seal.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return sl
}

func openKeyed(t *testing.T, dsn string, sl *seal.Sealer) (store.Store, error) {
	t.Helper()
	s, err := store.OpenWith(t.Context(), dsn, store.Options{Sealer: sl})
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

// testAuditChainKeyed (docs/security.md item 30; docs/decisions/0042): a chain written
// before keying is keyed by the first stores opened with the key file — once,
// however many open together — with one row that begins the keyed part; every
// replica then appends rows whose value is the HMAC under the one key, and the
// whole chain verifies. A store opened without the key file (before the keying)
// refuses to append to the keyed chain, one with another key file does not
// open, and ResealSecrets hands the key over, so that a rotation of the key file
// carries it: the store then opens and verifies with the new key file.
func testAuditChainKeyed(t *testing.T, dsn string) {
	ctx := t.Context()
	sl := testSealer(t, 3)
	plain := openDSN(t, dsn)
	for range 2 {
		if _, err := plain.AppendAudit(ctx, store.AuditRecord{Action: "user.create", Result: "ok"}); err != nil {
			t.Fatal(err)
		}
	}
	replicas := make([]store.Store, 4)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() {
			s, err := openKeyed(t, dsn, sl)
			if err != nil {
				t.Errorf("open %d with the key file: %v", i, err)
			}
			replicas[i] = s
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for i, s := range replicas {
		wg.Go(func() {
			for j := range 5 {
				if _, err := s.AppendAudit(ctx, store.AuditRecord{Action: "vm.start", VMID: int64(100*i + j), Result: "ok"}); err != nil {
					t.Errorf("replica %d append: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	c, err := replicas[0].AuditChain(ctx)
	if err != nil || c.KeyedFrom != 3 || c.KeySealed == nil || c.HeadID != 23 {
		t.Fatalf("chain state %+v %v", c, err)
	}
	rows, err := replicas[0].AuditRange(ctx, 0, 100)
	if err != nil || len(rows) != 23 {
		t.Fatalf("%d rows, %v", len(rows), err)
	}
	begun := 0
	for _, a := range rows {
		keyed := a.Chain != store.AuditChainValue(a)
		if keyed != (a.ID >= 3) {
			t.Errorf("row %d keyed %v", a.ID, keyed)
		}
		if a.Action == store.ChainKeyedAction {
			begun++
		}
	}
	if begun != 1 || rows[2].Action != store.ChainKeyedAction {
		t.Fatalf("%d rows begin the keyed chain; row 3 is %s", begun, rows[2].Action)
	}
	if v, err := audit.Verify(ctx, replicas[1], sl); err != nil || v.KeyedFrom != 3 || v.Rows != 23 {
		t.Fatalf("verify: %+v %v", v, err)
	}

	if _, err := plain.AppendAudit(ctx, store.AuditRecord{Action: "user.create"}); !errs.Is(err, errs.Unavailable) ||
		!strings.Contains(err.Error(), "key file") {
		t.Errorf("an append without the key file to the keyed chain: %v", err)
	}
	other := testSealer(t, 4)
	if _, err := openKeyed(t, dsn, other); err == nil || !strings.Contains(err.Error(), sl.CurrentID()) {
		t.Errorf("open with another key file: %v", err)
	}

	rotated, err := seal.New(bytes.Repeat([]byte{4}, seal.KeySize), bytes.Repeat([]byte{3}, seal.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	handed := 0
	if _, err := replicas[0].ResealSecrets(ctx, func(sec store.SealedSecret) ([]byte, error) {
		if sec.Kind != store.SealedAuditKey {
			return nil, nil
		}
		handed++
		if sec.Name != "3" {
			t.Errorf("the audit key's binding %q", sec.Name)
		}
		key, err := rotated.Open(sec.Value, seal.AuditKeyAAD(sec.Name))
		if err != nil {
			return nil, err
		}
		return rotated.Seal(key, seal.AuditKeyAAD(sec.Name))
	}); err != nil || handed != 1 {
		t.Fatalf("reseal: %v, the audit key handed %d times", err, handed)
	}
	after, err := openKeyed(t, dsn, other)
	if err != nil {
		t.Fatalf("open with the new key file: %v", err)
	}
	if _, err := after.AppendAudit(ctx, store.AuditRecord{Action: "x.after"}); err != nil {
		t.Fatal(err)
	}
	if v, err := audit.Verify(ctx, after, other); err != nil || v.KeyedFrom != 3 || v.Rows != 24 {
		t.Fatalf("verify after the rotation: %+v %v", v, err)
	}
}

func TestSQLiteAuditChainKeyed(t *testing.T) {
	t.Parallel()
	testAuditChainKeyed(t, "sqlite://"+filepath.Join(t.TempDir(), "keyed.db"))
}

func TestPostgresAuditChainKeyed(t *testing.T) {
	postgresDSN(t)
	t.Parallel()
	testAuditChainKeyed(t, freshSchema(t))
}
