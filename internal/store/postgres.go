package store

import (
	"database/sql"
	"embed"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

//go:embed migrations/postgres/*.sql
var postgresFiles embed.FS

// postgresDialect stores times as timestamptz, so an operator reading the tables
// with psql sees dates; the store still truncates them to milliseconds so both
// engines give back the same values.
var postgresDialect = dialect{
	name:       "postgres",
	migrations: mustSub(postgresFiles, "migrations/postgres"),
	migrationsTable: `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    BIGINT      PRIMARY KEY,
		name       TEXT        NOT NULL,
		applied_at TIMESTAMPTZ NOT NULL
	)`,
	// One lock for all of vmgate's migrations in this database: migrations take
	// milliseconds, so serialising the rare concurrent start-ups costs nothing.
	migrationLock: `SELECT pg_advisory_xact_lock(hashtext('vmgate schema_migrations'))`,
	// EXCLUSIVE blocks other writers of the table but not its readers.
	lockTable: `LOCK TABLE %s IN EXCLUSIVE MODE`,
	timeArg: func(v time.Time) any {
		if v.IsZero() {
			return nil
		}
		return ms(v)
	},
	constraint: func(err error) constraintKind {
		var e *pgconn.PgError
		if !errors.As(err, &e) {
			return noViolation
		}
		switch e.Code {
		case "23505": // unique_violation
			return uniqueViolation
		case "23503": // foreign_key_violation
			return foreignKeyViolation
		case "23514": // check_violation
			return checkViolation
		}
		return noViolation
	},
}

// openPostgres opens a pool on dsn, a postgres:// or postgresql:// URL for pgx.
func openPostgres(dsn string) (*sqlStore, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		// pgx redacts passwords only from DSNs that parse as URLs, and this one
		// may not: say nothing of it.
		return nil, errors.New("open postgres store: the DSN does not parse")
	}
	db.SetMaxOpenConns(20)
	db.SetMaxIdleConns(10)
	db.SetConnMaxIdleTime(5 * time.Minute)
	return &sqlStore{d: postgresDialect, rdb: db, wdb: db, now: time.Now}, nil
}
