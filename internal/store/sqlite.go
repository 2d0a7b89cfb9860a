package store

import (
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/vmgate/vmgate/internal/errs"
)

//go:embed migrations/sqlite/*.sql
var sqliteFiles embed.FS

// sqliteDialect stores times as integer unix milliseconds (UTC by definition),
// booleans as 0/1 and uses STRICT tables so a wrongly typed value fails loudly.
var sqliteDialect = dialect{
	name:       "sqlite",
	migrations: mustSub(sqliteFiles, "migrations/sqlite"),
	migrationsTable: `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL
	) STRICT`,
	timeArg: func(v time.Time) any {
		if v.IsZero() {
			return nil
		}
		return v.UnixMilli()
	},
	constraint: func(err error) constraintKind {
		var e *sqlite.Error
		if !errors.As(err, &e) {
			return noViolation
		}
		switch e.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return uniqueViolation
		case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
			return foreignKeyViolation
		case sqlite3.SQLITE_CONSTRAINT_CHECK:
			return checkViolation
		}
		return noViolation
	},
	refusal: func(err error) string {
		var e *sqlite.Error
		if !errors.As(err, &e) {
			return ""
		}
		switch e.Code() & 0xff {
		case sqlite3.SQLITE_FULL: // the disk, or the page limit (Options.SQLiteMaxPages)
			return errs.ReasonStoreFull
		case sqlite3.SQLITE_READONLY: // a read-only file or file system, the file moved, ...
			return errs.ReasonStoreReadOnly
		}
		return ""
	},
	busy: func(err error) bool {
		var e *sqlite.Error
		return errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_BUSY
	},
	unavailable: func(err error) bool {
		var e *sqlite.Error
		if !errors.As(err, &e) {
			return false
		}
		// The busy timeout ran out, the deadline interrupted the statement, or the
		// disk failed or is full. Code is the extended code; its low byte the primary.
		switch e.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_INTERRUPT,
			sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN:
			return true
		}
		return false
	},
}

// sqlitePragmas apply to every pooled connection (%d is the busy timeout in
// milliseconds, the store's Timeout). busy_timeout makes a writer of another process
// wait instead of failing; _txlock=immediate takes the write lock at BEGIN, so two
// transactions never both read and then deadlock upgrading to write. synchronous
// stays at its default, FULL: a logout or revocation that was answered must survive
// a power cut, and vmgate writes far too little for the fsync to matter.
const sqlitePragmas = "_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)&_txlock=immediate"

// openSQLite opens the file (or memory database) named by dsn; see Open.
func openSQLite(dsn string, o Options) (*sqlStore, error) {
	pragmas := fmt.Sprintf(sqlitePragmas, o.Timeout.Milliseconds())
	if o.SQLiteMaxPages < 0 {
		return nil, errors.New("open sqlite store: SQLiteMaxPages must not be negative")
	}
	if o.SQLiteMaxPages > 0 {
		pragmas += fmt.Sprintf("&_pragma=max_page_count(%d)", o.SQLiteMaxPages)
	}
	path := dsn
	if rest, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		path = strings.TrimPrefix(rest, "//")
	}
	switch {
	case path == "":
		return nil, errors.New("open sqlite store: empty path")
	case strings.Contains(path, "?"):
		return nil, fmt.Errorf("open sqlite store %q: SQLite paths take no query parameters", path)
	case path == ":memory:":
		// Every connection to :memory: is a database of its own, so the store
		// keeps exactly one, forever, for reads and writes alike.
		db, err := sql.Open("sqlite", ":memory:?"+pragmas)
		if err != nil {
			return nil, fmt.Errorf("open sqlite store: %w", err)
		}
		db.SetMaxOpenConns(1)
		db.SetMaxIdleConns(1)
		db.SetConnMaxLifetime(0)
		db.SetConnMaxIdleTime(0)
		return &sqlStore{d: sqliteDialect, rdb: db, wdb: db, now: o.Now, timeout: o.Timeout, place: "in memory"}, nil
	}
	if err := createPrivate(path); err != nil {
		return nil, err
	}
	wdb, err := sql.Open("sqlite", path+"?"+pragmas+"&_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %q: %w", path, err)
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	// query_only guards against a write slipping onto the read pool, where it
	// would compete for the lock with the writer instead of queueing behind it.
	rdb, err := sql.Open("sqlite", path+"?"+pragmas+"&_pragma=query_only(1)")
	if err != nil {
		wdb.Close()
		return nil, fmt.Errorf("open sqlite store %q: %w", path, err)
	}
	readers := max(4, runtime.GOMAXPROCS(0))
	rdb.SetMaxOpenConns(readers)
	rdb.SetMaxIdleConns(readers)
	place := path
	if abs, err := filepath.Abs(path); err == nil {
		place = abs
	}
	return &sqlStore{d: sqliteDialect, rdb: rdb, wdb: wdb, now: o.Now, timeout: o.Timeout, place: place}, nil
}

// createPrivate creates the database file with mode 0600 if it does not exist yet;
// SQLite would create it with the umask's default, typically world-readable.
func createPrivate(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case err == nil:
		return f.Close()
	case errors.Is(err, fs.ErrExist):
		return nil
	}
	return fmt.Errorf("open sqlite store: %w", err)
}

// mustSub returns the subtree dir of an embedded file system.
func mustSub(fsys fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(err)
	}
	return sub
}
