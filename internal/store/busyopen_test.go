package store_test

import (
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/store"
)

// TestSQLiteOpenWaitsForAWriterOfANewFile: while another connection writes to a
// file still in rollback mode, SQLite refuses the switch to WAL at once (not
// after the busy timeout); Open waits for the writer instead of failing. It is
// the cause of "concurrent open: database is locked" when replicas start
// together on a new file (TestSQLiteMigrations, once in about 100 runs).
func TestSQLiteOpenWaitsForAWriterOfANewFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "vmgate.db")
	// The other writer waits for locks too: its commit needs the file to
	// itself, and Open's retried switch to WAL holds a shared lock for moments
	// (without a busy timeout the commit failed SQLITE_BUSY once, under load).
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(60000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec("CREATE TABLE other_writer (a INTEGER)"); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO other_writer VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		s, err := store.OpenWith(t.Context(), path, store.Options{Timeout: time.Minute})
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	// While the writer holds the file, Open must not have given up. (200 ms is
	// not a goal: a slow machine only makes this check see less, never fail.)
	select {
	case err := <-done:
		t.Fatalf("Open ended while another connection wrote the file: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Open after the writer committed: %v", err)
	}
}

// TestSQLiteMigrationWaitsForAnotherWriter: a store opening a file whose write
// lock another process holds (as a replica migrating the same new file does, a
// short transaction after another) waits for it, whatever the store's busy
// timeout, instead of failing "migrate: database is locked".
func TestSQLiteMigrationWaitsForAnotherWriter(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "vmgate.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec("PRAGMA journal_mode=WAL"); err != nil { // as an opened store leaves it
		t.Fatal(err)
	}
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		// A busy timeout far shorter than the other writer's hold.
		s, err := store.OpenWith(t.Context(), path, store.Options{Timeout: 20 * time.Millisecond})
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Open ended while another process held the write lock: %v", err)
	case <-time.After(300 * time.Millisecond): // not a goal: a slow machine only sees less
	}
	if _, err := conn.ExecContext(t.Context(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Open after the other writer let go: %v", err)
	}
}
