package store_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/store/storetest"
)

// openSQLite opens a store on a fresh file in t's temporary directory.
func openSQLite(t *testing.T) store.Store {
	return openDSN(t, "sqlite://"+filepath.Join(t.TempDir(), "vmgate.db"))
}

func TestSQLite(t *testing.T) {
	t.Parallel()
	storetest.Run(t, openSQLite)
}

// TestSQLiteMemory runs the suite on the one-connection memory database, which
// also proves that no method holds a connection while asking for another.
func TestSQLiteMemory(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store { return openDSN(t, "sqlite::memory:") })
}

func TestSQLiteMigrations(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "vmgate.db")
	dsn := "sqlite://" + path

	openTogether(t, dsn, 4)

	// Opening again changes nothing and keeps the data.
	s, err := store.Open(t.Context(), dsn)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if _, err := s.CreateUser(t.Context(), store.User{Email: "kept@example.com", Role: store.RoleUser}); err != nil {
		t.Fatalf("create user: %v", err)
	}
	s.Close()
	s, err = store.Open(t.Context(), path) // a plain path is SQLite too
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if _, err := s.UserByEmail(t.Context(), "kept@example.com"); err != nil {
		t.Fatalf("user after reopening: %v", err)
	}

	if v, want := appliedVersions(t, "sqlite", path), shippedVersions(t, "sqlite"); v != want {
		t.Errorf("applied migrations %q, want each once: %s", v, want)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var mode string
	if err := db.QueryRowContext(t.Context(), `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal mode %q (%v), want wal", mode, err)
	}
	if fi, err := os.Stat(path); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("database file mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestOpenDSN(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, dsn := range []string{"sqlite://relative.db", "sqlite:other.db", "plain.db", "sqlite::memory:"} {
		s, err := store.Open(t.Context(), dsn)
		if err != nil {
			t.Errorf("open %q: %v", dsn, err)
			continue
		}
		if err := s.Ping(t.Context()); err != nil {
			t.Errorf("ping %q: %v", dsn, err)
		}
		s.Close()
	}
	for _, name := range []string{"relative.db", "other.db", "plain.db"} {
		if _, err := os.Stat(name); err != nil {
			t.Errorf("expected %s in the working directory: %v", name, err)
		}
	}
	for _, dsn := range []string{"mysql://user:secret@host/db", "sqlite://x.db?_pragma=foo", "sqlite:"} {
		_, err := store.Open(t.Context(), dsn)
		if err == nil {
			t.Errorf("open %q: no error", dsn)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("open %q: error shows the password: %v", dsn, err)
		}
	}
}
