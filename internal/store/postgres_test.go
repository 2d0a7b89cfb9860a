package store_test

import (
	"testing"

	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/store/storetest"
)

// postgresDSN and freshSchema are storetest's, shared with the other packages'
// PostgreSQL tests: the server is VMGATE_TEST_POSTGRES or the local one, and each
// test works in a schema of its own.
func postgresDSN(t testing.TB) string { t.Helper(); return storetest.PostgresDSN(t) }
func freshSchema(t testing.TB) string { t.Helper(); return storetest.FreshSchema(t) }

// postgresEnv names the PostgreSQL server the tests use.
const postgresEnv = storetest.PostgresEnv

// localPostgresUp reports whether the local server answers, for tests that run
// on PostgreSQL too when it is there but do not need it.
func localPostgresUp() bool { return storetest.LocalPostgresUp() }

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
