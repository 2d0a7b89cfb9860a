package store_test

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/vmgate/vmgate/internal/store"
)

// openDSN opens a store on dsn and closes it when t ends.
func openDSN(t testing.TB, dsn string) store.Store {
	t.Helper()
	s, err := store.Open(t.Context(), dsn)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openTogether opens n stores on dsn at once, as replicas starting together on a
// fresh database do, and fails t unless every one succeeds.
func openTogether(t *testing.T, dsn string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s, err := store.Open(t.Context(), dsn)
			if err != nil {
				t.Errorf("concurrent open %d: %v", i, err)
				return
			}
			s.Close()
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// shippedVersions lists the versions of the engine's migration files, "1,2,...".
func shippedVersions(t *testing.T, engine string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("migrations", engine, "*.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("migrations of %s: %v", engine, err)
	}
	var vs []string
	for _, f := range files { // Glob sorts; NNNN_ has a fixed width
		n, err := strconv.Atoi(strings.SplitN(filepath.Base(f), "_", 2)[0])
		if err != nil {
			t.Fatalf("migration %s: %v", f, err)
		}
		vs = append(vs, fmt.Sprint(n))
	}
	return strings.Join(vs, ",")
}

// appliedVersions lists schema_migrations, "1,2,..." when each applied once.
func appliedVersions(t *testing.T, driver, dsn string) string {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(t.Context(), `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatalf("read schema_migrations: %v", err)
	}
	defer rows.Close()
	var vs []string
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, fmt.Sprint(v))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(vs, ",")
}
