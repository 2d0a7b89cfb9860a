package store_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/store/storetest"
)

// postgresEnv names the PostgreSQL server the tests use. Each test works in a schema
// of its own, created and dropped around it, so runs never collide.
const postgresEnv = "VMGATE_TEST_POSTGRES"

// localPostgres is where a developer's (and this project's CI machine's) PostgreSQL
// answers when VMGATE_TEST_POSTGRES is not set.
const localPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable&connect_timeout=2"

var (
	localOnce sync.Once
	localErr  error
)

// postgresDSN returns the server's DSN: VMGATE_TEST_POSTGRES, or else the local
// server if one answers (go test ./... hides a passing package's skip messages, so
// a machine with PostgreSQL should simply run these). With neither, t is skipped
// loudly; in CI (env CI set) it fails instead, so CI cannot pass without PostgreSQL.
func postgresDSN(t testing.TB) string {
	t.Helper()
	if dsn := os.Getenv(postgresEnv); dsn != "" {
		return dsn
	}
	if localPostgresUp() {
		return localPostgres
	}
	msg := "PostgreSQL tests SKIPPED: no server at 127.0.0.1:5432 (" + localErr.Error() + "); set " + postgresEnv +
		"=postgres://USER@HOST:PORT/DB?sslmode=disable to run them"
	if os.Getenv("CI") != "" {
		t.Fatal(msg + " (required in CI)")
	}
	t.Skip("!!!!! " + msg + " !!!!!")
	return ""
}

// localPostgresUp reports whether the local server answers, for tests that run
// on PostgreSQL too when it is there but do not need it.
func localPostgresUp() bool {
	localOnce.Do(func() {
		db, err := sql.Open("pgx", localPostgres)
		if err != nil {
			localErr = err
			return
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		localErr = db.PingContext(ctx)
	})
	return localErr == nil
}

// freshSchema creates an empty schema, drops it when t ends and returns a DSN that
// puts vmgate's tables in it.
func freshSchema(t testing.TB) string {
	t.Helper()
	dsn := postgresDSN(t)
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("connect to %s: %v", postgresEnv, err)
	}
	t.Cleanup(func() { admin.Close() })
	schema := "vmgate_test_" + hex.EncodeToString(randomBytes(t, 6))
	if _, err := admin.ExecContext(t.Context(), "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		if _, err := admin.ExecContext(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("%s is not a URL: %v", postgresEnv, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func randomBytes(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// openPostgres opens a store in a fresh schema.
func openPostgres(t *testing.T) store.Store { return openDSN(t, freshSchema(t)) }

func TestPostgres(t *testing.T) {
	postgresDSN(t)
	t.Parallel()
	storetest.Run(t, openPostgres)
}

func TestPostgresMigrations(t *testing.T) {
	postgresDSN(t)
	t.Parallel()
	dsn := freshSchema(t)

	openTogether(t, dsn, 4)
	s := openDSN(t, dsn) // again: nothing left to do
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if v, want := appliedVersions(t, "pgx", dsn), shippedVersions(t, "postgres"); v != want {
		t.Errorf("applied migrations %q, want each once: %s", v, want)
	}
}
