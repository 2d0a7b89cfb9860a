package store

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"testing/fstest"
	"time"
)

// MigrateUpTo brings the database of dsn to schema version (and no further), as an
// older vmgate left it: upgrade tests put old rows in, then Open migrates the rest.
func MigrateUpTo(ctx context.Context, dsn string, version int64) error {
	var (
		s   *sqlStore
		err error
	)
	o := Options{}.withDefaults()
	if strings.HasPrefix(dsn, "postgres") {
		s, err = openPostgres(dsn, o)
	} else {
		s, err = openSQLite(dsn, o)
	}
	if err != nil {
		return err
	}
	defer s.Close()
	d := s.d
	old := fstest.MapFS{}
	names, err := fs.Glob(d.migrations, "*.sql")
	if err != nil {
		return err
	}
	for _, name := range names {
		n, err := strconv.ParseInt(strings.SplitN(name, "_", 2)[0], 10, 64)
		if err != nil || n > version {
			continue
		}
		body, err := fs.ReadFile(d.migrations, name)
		if err != nil {
			return err
		}
		old[name] = &fstest.MapFile{Data: body}
	}
	d.migrations = old
	return migrate(ctx, s.wdb, d)
}

// WithListenerQuiet returns o with the PostgreSQL listener pinging after d without
// a notification, so a test sees a black-holed listener found out quickly.
func WithListenerQuiet(o Options, d time.Duration) Options {
	o.listenerQuiet = d
	return o
}

// SetQueryOnly makes the SQLite store's one writing connection refuse writes
// (PRAGMA query_only), as a database on a file system mounted read-only does, or
// lifts that.
func SetQueryOnly(s Store, on bool) error {
	v := 0
	if on {
		v = 1
	}
	_, err := s.(*bounded).s.wdb.Exec(fmt.Sprintf("PRAGMA query_only = %d", v))
	return err
}

// PostgresRefusal classifies err as the PostgreSQL store would: what a caller gets.
func PostgresRefusal(err error) error {
	b := &bounded{s: &sqlStore{d: postgresDialect, place: "the PostgreSQL server at db:5432 (database vmgate)"}}
	return b.unavailable(context.Background(), err)
}
