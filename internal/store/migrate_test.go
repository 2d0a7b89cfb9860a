package store

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

// TestMigrate drives the runner with made-up migrations: pending ones apply in
// order, applied ones never again, a failing one leaves nothing behind, and a
// database newer than the binary is refused.
func TestMigrate(t *testing.T) {
	t.Parallel()
	s, err := openSQLite("sqlite://"+filepath.Join(t.TempDir(), "m.db"), Options{}.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	run := func(files map[string]string) error {
		fsys := fstest.MapFS{}
		for name, body := range files {
			fsys[name] = &fstest.MapFile{Data: []byte(body)}
		}
		d := sqliteDialect
		d.migrations = fsys
		return migrate(ctx, s.wdb, d)
	}
	tables := func() string {
		var names string
		err := s.wdb.QueryRowContext(ctx, `SELECT group_concat(name, ',') FROM (
			SELECT name FROM sqlite_schema WHERE type = 'table' AND name LIKE 't_' ORDER BY name)`).Scan(&names)
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	versions := func() string {
		var vs sql.NullString
		err := s.wdb.QueryRowContext(ctx, `SELECT group_concat(version, ',') FROM (
			SELECT version FROM schema_migrations ORDER BY version)`).Scan(&vs)
		if err != nil {
			t.Fatal(err)
		}
		return vs.String
	}

	one := map[string]string{"0001_a.sql": `CREATE TABLE ta (x INTEGER);`}
	if err := run(one); err != nil {
		t.Fatalf("first run: %v", err)
	}
	if err := run(one); err != nil {
		t.Fatalf("second run: %v", err)
	}
	three := map[string]string{
		"0001_a.sql": one["0001_a.sql"],
		"0003_c.sql": `CREATE TABLE tc (x INTEGER); INSERT INTO tc VALUES (1);`,
		"0002_b.sql": `CREATE TABLE tb (x INTEGER);`,
	}
	if err := run(three); err != nil {
		t.Fatalf("later migrations: %v", err)
	}
	if got := tables() + " " + versions(); got != "ta,tb,tc 1,2,3" {
		t.Fatalf("tables and versions: %s", got)
	}

	broken := map[string]string{"0004_d.sql": `CREATE TABLE td (x INTEGER); SELECT nonsense FROM nowhere;`}
	for k, v := range three {
		broken[k] = v
	}
	if err := run(broken); err == nil || !strings.Contains(err.Error(), "0004_d") {
		t.Fatalf("broken migration: %v", err)
	}
	if got := tables() + " " + versions(); got != "ta,tb,tc 1,2,3" {
		t.Fatalf("a failed migration left %s", got)
	}

	if err := run(one); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("older binary on a newer database: %v", err)
	}
	if err := run(map[string]string{"01_x.sql": "", "1_y.sql": ""}); err == nil {
		t.Fatal("two migrations with one version: no error")
	}
	if err := run(map[string]string{"first.sql": ""}); err == nil {
		t.Fatal("a migration without a version: no error")
	}
}
