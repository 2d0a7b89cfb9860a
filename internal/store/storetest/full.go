package storetest

import (
	"context"
	"database/sql"
	"testing"

	"github.com/vmgate/vmgate/internal/store"
)

// Ballast fills a SQLite database from a connection of its own, the way another
// process filling the disk would, and empties it again: with the store opened
// capped (OpenFullableSQLite), the store's writes that need a page fail as on a
// full disk (SQLITE_FULL) while the ballast is in, and go through once it is out.
type Ballast struct {
	t   testing.TB
	db  *sql.DB
	cap int64
}

// OpenFullableSQLite opens a SQLite store at path, capped at the pages its
// schema takes plus headroom pages (o.SQLiteMaxPages), closed when t ends, and
// its Ballast.
func OpenFullableSQLite(t testing.TB, path string, headroom int64, o store.Options) (store.Store, *Ballast) {
	t.Helper()
	ctx := context.Background()
	first, err := store.Open(ctx, "sqlite://"+path)
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	if _, err := db.ExecContext(ctx, `CREATE TABLE vmgate_test_ballast (b BLOB NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	b := &Ballast{t: t, db: db}
	b.cap = b.pages() + headroom
	o.SQLiteMaxPages = b.cap
	st, err := store.OpenWith(ctx, "sqlite://"+path, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, b
}

// pages is the database's size in pages.
func (b *Ballast) pages() int64 {
	b.t.Helper()
	var n int64
	if err := b.db.QueryRow(`PRAGMA page_count`).Scan(&n); err != nil {
		b.t.Fatal(err)
	}
	return n
}

// Fill grows the database past the store's cap and takes every free page: the
// store's next write that needs a page fails.
func (b *Ballast) Fill() {
	b.t.Helper()
	chunk := make([]byte, 64<<10)
	for b.pages() <= b.cap+16 {
		if _, err := b.db.Exec(`INSERT INTO vmgate_test_ballast (b) VALUES ($1)`, chunk); err != nil {
			b.t.Fatalf("fill the database: %v", err)
		}
	}
	var free int64
	if err := b.db.QueryRow(`PRAGMA freelist_count`).Scan(&free); err != nil || free != 0 {
		b.t.Fatalf("the filled database has %d free pages (%v)", free, err)
	}
}

// Empty deletes the ballast: its pages are free for the store's writes again.
func (b *Ballast) Empty() {
	b.t.Helper()
	if _, err := b.db.Exec(`DELETE FROM vmgate_test_ballast`); err != nil {
		b.t.Fatalf("empty the database: %v", err)
	}
}
