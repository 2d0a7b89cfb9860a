package store

import (
	"embed"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib" // also registers the "pgx" database/sql driver the tests use

	"github.com/vmgate/vmgate/internal/errs"
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
	forUpdate: ` FOR UPDATE`,
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
	refusal: func(err error) string {
		var e *pgconn.PgError
		if !errors.As(err, &e) {
			return ""
		}
		switch e.Code {
		case "53100": // disk_full
			return errs.ReasonStoreFull
		case "25006": // read_only_sql_transaction: a standby, default_transaction_read_only
			return errs.ReasonStoreReadOnly
		}
		return ""
	},
	unavailable: func(err error) bool {
		var e *pgconn.PgError
		if errors.As(err, &e) {
			switch {
			case strings.HasPrefix(e.Code, "08"), // connection_exception
				strings.HasPrefix(e.Code, "53"), // insufficient_resources: too_many_connections, disk_full, ...
				strings.HasPrefix(e.Code, "58"), // system_error: I/O errors
				e.Code == "57P01",               // admin_shutdown
				e.Code == "57P02",               // crash_shutdown
				e.Code == "57P03",               // cannot_connect_now (starting up, recovering)
				e.Code == "57014",               // query_canceled
				e.Code == "40001",               // serialization_failure
				e.Code == "40P01",               // deadlock_detected
				e.Code == "55P03",               // lock_not_available
				e.Code == "25006":               // read_only_sql_transaction: a standby after a failover
				return true
			}
			return false
		}
		var connectErr *pgconn.ConnectError
		// SafeToRetry: pgx never sent the statement (the connection was closed or busy).
		return errors.As(err, &connectErr) || pgconn.Timeout(err) || pgconn.SafeToRetry(err)
	},
}

// Pool limits on PostgreSQL. A connection lives at most poolMaxLifetime, so the pool
// renews itself after a failover or a partition even when every connection still
// looks alive; an idle one goes after poolMaxIdleTime.
const (
	poolMaxOpen     = 20
	poolMaxIdle     = 10
	poolMaxLifetime = 30 * time.Minute
	poolMaxIdleTime = 2 * time.Minute
)

// keepAlive probes an idle connection after 15 s of silence and gives up after three
// unanswered probes 5 s apart, so a connection into a partition is closed within
// about 30 s by the kernel even when nobody uses it (Go's default takes 2.5 min).
var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3}

// postgresConfig parses dsn for pgx and adds vmgate's connection settings: a connect
// timeout (unless the DSN has one) and TCP keep-alive.
func postgresConfig(dsn string, o Options) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx redacts passwords only from DSNs that parse as URLs, and this one
		// may not: say nothing of it.
		return nil, errors.New("open postgres store: the DSN does not parse")
	}
	if cfg.ConnectTimeout <= 0 {
		// Each host gets its share of the deadline, so that with the first host
		// black-holed (a dead primary) the last is still tried in time.
		cfg.ConnectTimeout = max(o.Timeout/time.Duration(len(hostsOf(&cfg.Config))), minConnectTimeout)
	}
	d := &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAliveConfig: keepAlive}
	cfg.DialFunc = d.DialContext
	// pgx's default on a cancelled context is to set a deadline on the socket,
	// which fails the statement at once, and to close the connection then, so a
	// connection stuck in a black hole never goes back to the pool. (The
	// alternative, a cancel request, would need a second connection through the
	// same black hole.)
	return cfg, nil
}

// minConnectTimeout is the least time a host of a multi-host DSN gets to connect.
const minConnectTimeout = 500 * time.Millisecond

// openPostgres opens a pool on dsn, a postgres:// or postgresql:// URL for pgx.
func openPostgres(dsn string, o Options) (*sqlStore, error) {
	cfg, err := postgresConfig(dsn, o)
	if err != nil {
		return nil, err
	}
	w := &pgWriter{log: o.Logger, multi: len(hostsOf(&cfg.Config)) > 1 || cfg.ValidateConnect != nil}
	db := stdlib.OpenDB(*cfg, stdlib.OptionBeforeConnect(w.preferWriter), stdlib.OptionAfterConnect(w.connected),
		stdlib.OptionResetSession(w.reuse))
	w.db = db
	db.SetMaxOpenConns(poolMaxOpen)
	db.SetMaxIdleConns(poolMaxIdle)
	db.SetConnMaxLifetime(poolMaxLifetime)
	db.SetConnMaxIdleTime(poolMaxIdleTime)
	place := fmt.Sprintf("the PostgreSQL server at %s (database %s)", strings.Join(hostsOf(&cfg.Config), ","), cfg.Database)
	return &sqlStore{d: postgresDialect, rdb: db, wdb: db, now: o.Now, timeout: o.Timeout, pgConfig: cfg, place: place,
		writer: w}, nil
}
