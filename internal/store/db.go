package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/seal"
)

// Open is OpenWith with the default Options.
func Open(ctx context.Context, dsn string) (Store, error) {
	return OpenWith(ctx, dsn, Options{})
}

// DefaultTimeout is Options.Timeout's default.
const DefaultTimeout = 5 * time.Second

// Options tune a store. The zero value is ready to use.
type Options struct {
	// Timeout bounds every call of the store: connecting, waiting for a pooled
	// connection or SQLite's write lock, and the statements themselves (default
	// DefaultTimeout). A call that runs out of it fails as errs.Unavailable with
	// reason errs.ReasonStoreUnavailable; a deadline of the caller's own that
	// comes sooner wins.
	Timeout time.Duration
	// PollInterval is how often the change feed is read when nothing pushes it
	// (default DefaultPollInterval): on PostgreSQL the fallback while the listener
	// is lost, on SQLite what carries the writes of other processes.
	PollInterval time.Duration
	// Logger receives the change feed's events (listening, listener lost, feed
	// unreadable) and the database refusing writes (full, read-only: at most once a
	// minute each); nil discards them.
	Logger *slog.Logger
	// SQLiteMaxPages caps a SQLite database at that many pages of 4 KiB (PRAGMA
	// max_page_count on every connection): a write that would grow it further
	// fails as on a full disk (store_full). 0: no cap, the disk is the limit,
	// which is what vmgate's server uses. It keeps a database from filling a disk
	// it shares, and lets tests fill one without filling a disk.
	SQLiteMaxPages int64
	// Sealer is the key file's (internal/seal). With it the store keys the audit
	// chain — at the first open, once, and from then on appends with the key it
	// unseals (docs/decisions/0042); without it the store appends only to a chain
	// that is not keyed yet. The server always gives it.
	Sealer *seal.Sealer
	// Now is the clock of the times the store sets itself (a task's CreatedAt
	// and UpdatedAt, ...) [time.Now]; tests that run vmgate on a clock of
	// their own give it here too.
	Now func() time.Time

	// listenerQuiet is how long the PostgreSQL listener waits for a notification
	// before it pings (listenerQuiet by default; tests shorten it).
	listenerQuiet time.Duration
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.listenerQuiet <= 0 {
		o.listenerQuiet = listenerQuiet
	}
	return o
}

// OpenWith connects to the database named by dsn, brings its schema up to date and
// returns the store. The forms are:
//
//	sqlite:///abs/path/vmgate.db   SQLite file at an absolute path
//	sqlite://relative/vmgate.db    SQLite file relative to the working directory
//	sqlite:vmgate.db               the same
//	vmgate.db, /abs/vmgate.db      a plain path is SQLite too
//	sqlite::memory:                a private in-memory SQLite database (tests; one connection)
//	postgres://user@host:5432/db?sslmode=disable   (or postgresql://...)
//
// SQLite paths take no query parameters: the store sets WAL, foreign keys, a busy
// timeout of o.Timeout and immediate write transactions itself. A new SQLite file is
// created with mode 0600 because it holds password hashes and sealed PVE token secrets.
// PostgreSQL DSNs are passed to pgx, so every pgx parameter works (for example
// search_path to keep vmgate in its own schema); a DSN without connect_timeout gets
// o.Timeout as its connect timeout.
func OpenWith(ctx context.Context, dsn string, o Options) (Store, error) {
	o = o.withDefaults()
	var (
		s   *sqlStore
		err error
	)
	switch scheme, _, _ := strings.Cut(dsn, "://"); {
	case scheme == "postgres" || scheme == "postgresql":
		s, err = openPostgres(dsn, o)
	case strings.HasPrefix(dsn, "sqlite:") || !strings.Contains(dsn, "://"):
		s, err = openSQLite(dsn, o)
	default:
		// The DSN may hold a password: name only its scheme.
		return nil, fmt.Errorf("open store: unsupported database scheme %q (want sqlite: or postgres://)", scheme)
	}
	if err != nil {
		return nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, o.Timeout)
	err = s.firstConnect(pingCtx)
	cancel()
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("open %s store: %w", s.d.name, err)
	}
	if err := migrate(ctx, s.wdb, s.d); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.adoptAuditChain(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("open %s store: chain the audit records: %w", s.d.name, err)
	}
	if o.Sealer != nil {
		if err := s.keyAuditChain(ctx, o.Sealer); err != nil {
			s.Close()
			return nil, fmt.Errorf("open %s store: key the audit chain: %w", s.d.name, err)
		}
	}
	s.feed = newChangeFeed(s, o)
	if s.pgConfig != nil {
		if err := s.listenPostgres(ctx, o); err != nil {
			s.Close()
			return nil, err
		}
	}
	s.probeOwner = probeOwner()
	return &bounded{s: s, timeout: o.Timeout, log: o.Logger}, nil
}

// dialect is what differs between the engines. The SQL in this package is otherwise
// shared: plain $n placeholders, RETURNING and ON CONFLICT, which both accept.
// firstConnect opens the writer's first connection. On SQLite that connection
// switches a new file to WAL, which needs the file to itself: SQLite answers
// SQLITE_BUSY at once, without waiting the busy timeout, while another process
// (vmgate starting beside it, an admin command) writes to a file still in
// rollback mode. So a busy first connection is retried, with a growing pause,
// until ctx ends (the store's Timeout): replicas that start together both open.
func (s *sqlStore) firstConnect(ctx context.Context) error {
	retry := busyRetry{max: 200 * time.Millisecond}
	for {
		err := s.wdb.PingContext(ctx)
		if err == nil || !s.d.isBusy(err) || !retry.wait(ctx) {
			return err
		}
	}
}

// busyRetry paces the waits for another process's lock (SQLite's SQLITE_BUSY
// that its busy timeout does not cover): 5 ms, doubling up to max.
type busyRetry struct {
	pause, max time.Duration
}

// wait sleeps the next pause and reports true, or false when ctx ends first.
func (b *busyRetry) wait(ctx context.Context) bool {
	if b.pause == 0 {
		b.pause = 5 * time.Millisecond
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(b.pause):
	}
	b.pause = min(2*b.pause, b.max)
	return true
}

// isBusy reports whether err is the dialect's busy lock (never, without d.busy).
func (d dialect) isBusy(err error) bool { return d.busy != nil && d.busy(err) }

type dialect struct {
	name string
	// busy reports the error of a lock another process holds (SQLite's
	// SQLITE_BUSY): met by a new connection's switch to WAL and by a migration
	// while another process migrates; both are waited for. nil where none is.
	busy func(error) bool
	// migrations holds NNNN_name.sql files, applied in order of NNNN.
	migrations fs.FS
	// migrationsTable is the DDL of schema_migrations(version, name, applied_at).
	migrationsTable string
	// migrationLock, when set, runs first in every migration transaction so that two
	// processes starting together migrate one after the other. SQLite needs none:
	// its write transactions begin IMMEDIATE and so already exclude each other.
	migrationLock string
	// lockTable, when set, is a format for taking a table's write lock inside a
	// transaction (%s is the table). SQLite needs none for the same reason.
	lockTable string
	// forUpdate is appended to a SELECT of one row to lock it until the end of
	// the transaction; SQLite needs none (its write transactions exclude each other).
	forUpdate string
	// timeArg turns a time into the engine's column value; zero is NULL.
	timeArg func(time.Time) any
	// constraint classifies a constraint violation; any other error is noViolation.
	constraint func(err error) constraintKind
	// refusal names what kind of write refusal err is: errs.ReasonStoreFull (no
	// room for the write), errs.ReasonStoreReadOnly (the database refuses
	// writes), or "" for anything else.
	refusal func(err error) string
	// unavailable reports whether err is the engine saying it cannot serve now
	// (too many connections, shutting down, busy, a statement cancelled by the
	// deadline, ...), as opposed to a bug in a statement. Connection failures that
	// look the same on both engines are connectionFailed's.
	unavailable func(err error) bool
}

// constraintKind is the class of a constraint violation.
type constraintKind int

const (
	noViolation constraintKind = iota
	uniqueViolation
	foreignKeyViolation
	checkViolation
)

// sqlStore implements Store on database/sql for both engines.
type sqlStore struct {
	d dialect
	// rdb serves reads. wdb serves writes and every transaction. They are one pool
	// on PostgreSQL; on SQLite wdb has a single connection, so writers queue in Go
	// instead of spinning on SQLITE_BUSY, while readers proceed in parallel (WAL).
	// Never use wdb inside a transaction on it: with one connection that deadlocks.
	rdb, wdb *sql.DB
	now      func() time.Time
	// timeout bounds each statement of the calls that run many (Prune); bounded
	// bounds every other call as a whole.
	timeout time.Duration
	// feed hands the change feed to subscribers; nil only in this package's tests.
	feed *changeFeed
	// channel is the PostgreSQL NOTIFY channel of the change feed: one per schema,
	// so that stores in different schemas of one database never hear each other.
	// Empty on SQLite.
	channel string
	// pgConfig is what the change feed's listener connects with (PostgreSQL only).
	pgConfig *pgx.ConnConfig
	// writer follows the PostgreSQL host written to, and drops the pool's
	// connections on a failover (failover.go); nil on SQLite.
	writer *pgWriter
	// place says where the database is, for the log of a refused write: the
	// SQLite file, or the PostgreSQL server and database.
	place string
	// probeOwner names this store in the write probe's rows (host and pid).
	probeOwner string
	// auditKey keys the audit chain from auditKeyedFrom on (keyAuditChain); nil
	// when the store was opened without the key file (Options.Sealer).
	auditKey       []byte
	auditKeyedFrom int64
}

// Ping implements Store.
func (s *sqlStore) Ping(ctx context.Context) error {
	if err := s.rdb.PingContext(ctx); err != nil {
		return fmt.Errorf("ping %s store: %w", s.d.name, err)
	}
	return nil
}

// ClockOffset implements Store.
func (s *sqlStore) ClockOffset(ctx context.Context) (time.Duration, error) {
	if s.pgConfig == nil {
		return 0, nil // SQLite: this process's own clock
	}
	var db time.Time
	sent := time.Now()
	if err := s.rdb.QueryRowContext(ctx, `SELECT clock_timestamp()`).Scan(&db); err != nil {
		return 0, fmt.Errorf("read the %s clock: %w", s.d.name, err)
	}
	recv := time.Now()
	return db.Sub(sent.Add(recv.Sub(sent) / 2)), nil
}

// Close implements Store. It stops the change feed first.
func (s *sqlStore) Close() error {
	s.feed.close()
	err := s.wdb.Close()
	if s.rdb != s.wdb {
		err = errors.Join(err, s.rdb.Close())
	}
	return err
}

// inTx runs fn in a write transaction and commits it when fn returns nil.
func (s *sqlStore) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// lock takes the write lock of table until the end of tx, where the engine needs it.
func (s *sqlStore) lock(ctx context.Context, tx *sql.Tx, table string) error {
	if s.d.lockTable == "" {
		return nil
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(s.d.lockTable, table)); err != nil {
		return fmt.Errorf("lock %s: %w", table, err)
	}
	return nil
}

// t is a time parameter: UTC, truncated to the millisecond both engines keep.
func (s *sqlStore) t(v time.Time) any { return s.d.timeArg(v) }

// stamp returns v, or the store's now when v is zero, at stored precision.
func (s *sqlStore) stamp(v time.Time) time.Time {
	if v.IsZero() {
		v = s.now()
	}
	return ms(v)
}

// nowMS is the store's now at stored precision.
func (s *sqlStore) nowMS() time.Time { return ms(s.now()) }

// ms returns v in UTC at millisecond precision, as the store gives times back.
func ms(v time.Time) time.Time {
	if v.IsZero() {
		return time.Time{}
	}
	return v.UTC().Truncate(time.Millisecond)
}

// fail turns a database error into the error the contract promises: a unique
// violation becomes Conflict with the client message conflict, a missing referenced
// row NotFound, a failed check Invalid; anything else is wrapped with what as context
// and stays Internal. A nil err stays nil.
func (s *sqlStore) fail(err error, what string, conflict string) error {
	if err == nil {
		return nil
	}
	switch s.d.constraint(err) {
	case uniqueViolation:
		return errs.Wrap(errs.Conflict, err, "%s", conflict)
	case foreignKeyViolation:
		return errs.Wrap(errs.NotFound, err, "%s: a referenced record does not exist", what)
	case checkViolation:
		return errs.Wrap(errs.Invalid, err, "%s: a value is out of range", what)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// failRow is fail for a query of one row: sql.ErrNoRows becomes missing.
func (s *sqlStore) failRow(err error, what string, missing error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return missing
	}
	return s.fail(err, what, what+": already exists")
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// timeCol scans a time column: NULL is the zero time, SQLite gives integer unix
// milliseconds, PostgreSQL a timestamptz.
type timeCol struct{ p *time.Time }

// Scan implements sql.Scanner.
func (c timeCol) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*c.p = time.Time{}
	case int64:
		*c.p = time.UnixMilli(v).UTC()
	case time.Time:
		*c.p = ms(v)
	default:
		return fmt.Errorf("scan time: unexpected %T", src)
	}
	return nil
}

// textCol scans a nullable text column: NULL is "".
type textCol struct{ p *string }

// Scan implements sql.Scanner.
func (c textCol) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*c.p = ""
	case string:
		*c.p = v
	case []byte:
		*c.p = string(v)
	default:
		return fmt.Errorf("scan text: unexpected %T", src)
	}
	return nil
}

// nullText is the parameter for a nullable text column: "" is NULL.
func nullText(v string) any {
	if v == "" {
		return nil
	}
	return v
}

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// queryAll runs a query and scans every row with scan.
func queryAll[T any](ctx context.Context, db querier, what string, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// clampLimit returns limit within 1..max, or def when limit is not positive.
func clampLimit(limit, def, max int) int {
	switch {
	case limit <= 0:
		return def
	case limit > max:
		return max
	}
	return limit
}

// listQuery gathers the conditions of a list's WHERE clause and their $n
// parameters, which both SQLite and PostgreSQL accept.
type listQuery struct {
	where []string
	args  []any
}

// param adds v as the next parameter and returns its placeholder.
func (q *listQuery) param(v any) string {
	q.args = append(q.args, v)
	return fmt.Sprintf("$%d", len(q.args))
}

// in adds "col IN (...)" over ids, which must not be empty: an empty list matches
// nothing, and the list methods answer that without asking the database.
func (q *listQuery) in(col string, ids []int64) {
	ps := make([]string, len(ids))
	for i, id := range ids {
		ps[i] = q.param(id)
	}
	q.where = append(q.where, col+" IN ("+strings.Join(ps, ", ")+")")
}

// clause is " WHERE" and the conditions joined by AND, or "" when there are none.
func (q *listQuery) clause() string {
	if len(q.where) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(q.where, " AND ")
}
