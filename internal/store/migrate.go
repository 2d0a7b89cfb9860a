package store

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// migration is one embedded schema change, NNNN_name.sql.
type migration struct {
	version int64
	name    string
	sql     string
}

// loadMigrations reads the migrations of fsys in version order.
func loadMigrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, name := range names {
		num, _, ok := strings.Cut(name, "_")
		version, err := strconv.ParseInt(num, 10, 64)
		if !ok || err != nil || version <= 0 {
			return nil, fmt.Errorf("migration %s: name is not NNNN_name.sql", name)
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: version, name: strings.TrimSuffix(path.Base(name), ".sql"), sql: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i := 1; i < len(out); i++ {
		if out[i].version == out[i-1].version {
			return nil, fmt.Errorf("migrations %s and %s share a version", out[i-1].name, out[i].name)
		}
	}
	return out, nil
}

// migrate applies the dialect's pending migrations in order, each in a transaction
// of its own that also records it in schema_migrations. Every transaction first takes
// the migration lock (SQLite: BEGIN IMMEDIATE), then rereads what is applied, so two
// processes starting at once both succeed and apply each migration once.
func migrate(ctx context.Context, db *sql.DB, d dialect) error {
	all, err := loadMigrations(d.migrations)
	if err != nil {
		return fmt.Errorf("load %s migrations: %w", d.name, err)
	}
	if upToDate(ctx, db, all) {
		return nil
	}
	start := time.Now()
	retry := busyRetry{max: 100 * time.Millisecond}
	for {
		done, err := migrateOne(ctx, db, d, all)
		// Another process holding the write lock, most likely migrating the same
		// file (replicas starting together), may win it again with each of its
		// many short transactions before this one's busy timeout retries: a busy
		// lock is waited for here, not reported.
		if err != nil && d.isBusy(err) && time.Since(start) < migrateWait && retry.wait(ctx) {
			continue
		}
		if err != nil {
			return fmt.Errorf("migrate %s store: %w", d.name, err)
		}
		if done {
			return nil
		}
	}
}

// migrateWait bounds how long migrate waits for another process's write lock
// (SQLite): far longer than any migration takes, short enough that a file held
// by a stuck process fails the start with a reason.
const migrateWait = 2 * time.Minute

// upToDate reports, reading only, whether every migration of all is applied and
// none newer: then migrate writes nothing, so that a process starts on a database
// that takes no writes (a full disk, a standby) and says so in /readyz, instead of
// failing to start. Anything else, errors included, is left to migrateOne.
func upToDate(ctx context.Context, db *sql.DB, all []migration) bool {
	rows, err := db.QueryContext(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return false
	}
	defer rows.Close()
	applied := map[int64]bool{}
	for rows.Next() {
		var v int64
		if rows.Scan(&v) != nil {
			return false
		}
		applied[v] = true
	}
	if rows.Err() != nil || len(applied) != len(all) {
		return false
	}
	for _, m := range all {
		if !applied[m.version] {
			return false
		}
	}
	return true
}

// migrateOne applies the first pending migration and reports whether none was left.
func migrateOne(ctx context.Context, db *sql.DB, d dialect, all []migration) (done bool, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if d.migrationLock != "" {
		if _, err := tx.ExecContext(ctx, d.migrationLock); err != nil {
			return false, fmt.Errorf("take the migration lock: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, d.migrationsTable); err != nil {
		return false, fmt.Errorf("create schema_migrations: %w", err)
	}
	applied := map[int64]bool{}
	var newest int64
	rows, err := tx.QueryContext(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return false, err
	}
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return false, err
		}
		applied[v] = true
		newest = max(newest, v)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, err
	}
	if len(all) > 0 && newest > all[len(all)-1].version {
		return false, fmt.Errorf("the database is at schema version %d, newer than this vmgate knows (%d): run a newer vmgate",
			newest, all[len(all)-1].version)
	}
	for _, m := range all {
		if applied[m.version] {
			continue
		}
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return false, fmt.Errorf("apply %s: %w", m.name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`,
			m.version, m.name, d.timeArg(time.Now())); err != nil {
			return false, fmt.Errorf("record %s: %w", m.name, err)
		}
		return false, tx.Commit()
	}
	return true, tx.Commit()
}
