package store

import (
	"context"
	"database/sql"
)

// PoolConn takes a connection of st's pool for the caller alone, so that a test
// can make the pool open new ones.
func PoolConn(ctx context.Context, st Store) (*sql.Conn, error) {
	return st.(*bounded).s.wdb.Conn(ctx)
}
