package storetest

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
)

// PostgresEnv names the PostgreSQL server tests use. Each test works in a schema of
// its own (FreshSchema), created and dropped around it, so runs never collide.
const PostgresEnv = "VMGATE_TEST_POSTGRES"

// LocalPostgres is where a developer's (and this project's CI machine's) PostgreSQL
// answers when VMGATE_TEST_POSTGRES is not set.
const LocalPostgres = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable&connect_timeout=2"

var (
	localOnce sync.Once
	localErr  error
)

// PostgresDSN returns the server's DSN: VMGATE_TEST_POSTGRES, or else the local
// server if one answers (go test ./... hides a passing package's skip messages, so
// a machine with PostgreSQL should simply run these). With neither, t is skipped
// loudly; in CI (env CI set) it fails instead, so CI cannot pass without PostgreSQL.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	if dsn := os.Getenv(PostgresEnv); dsn != "" {
		return dsn
	}
	if LocalPostgresUp() {
		return LocalPostgres
	}
	msg := "PostgreSQL tests SKIPPED: no server at 127.0.0.1:5432 (" + localErr.Error() + "); set " + PostgresEnv +
		"=postgres://USER@HOST:PORT/DB?sslmode=disable to run them"
	if os.Getenv("CI") != "" {
		t.Fatal(msg + " (required in CI)")
	}
	t.Skip("!!!!! " + msg + " !!!!!")
	return ""
}

// LocalPostgresUp reports whether the local server answers, for tests that run on
// PostgreSQL too when it is there but do not need it.
func LocalPostgresUp() bool {
	localOnce.Do(func() {
		db, err := sql.Open("pgx", LocalPostgres)
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

// FreshSchema creates an empty schema, drops it when t ends and returns a DSN that
// puts vmgate's tables in it (search_path).
func FreshSchema(t testing.TB) string {
	t.Helper()
	dsn := PostgresDSN(t)
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("connect to %s: %v", PostgresEnv, err)
	}
	t.Cleanup(func() { admin.Close() })
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatal(err)
	}
	schema := "vmgate_test_" + hex.EncodeToString(rnd[:])
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
		t.Fatalf("%s is not a URL: %v", PostgresEnv, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
