package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Timing of the PostgreSQL change feed listener.
const (
	// listenerQuiet is how long the listener waits for a notification before it
	// pings its connection: a black-holed connection is as quiet as an idle one,
	// and the kernel's keep-alive would take longer to tell them apart.
	listenerQuiet = 10 * time.Second
	// The listener reconnects after listenerBackoffMin, doubling up to
	// listenerBackoffMax while it keeps failing.
	listenerBackoffMin = 100 * time.Millisecond
	listenerBackoffMax = 5 * time.Second
)

// maxChannel is the longest identifier PostgreSQL keeps (NAMEDATALEN - 1 bytes).
const maxChannel = 63

// feedChannel is the NOTIFY channel of the change feed in schema: its name when it
// fits, a hash of it otherwise. NOTIFY is database-wide, so the schema must be in
// it: stores in two schemas of one database (parallel tests, two vmgate
// installations) must not wake each other.
func feedChannel(schema string) string {
	const prefix = "vmgate_changes_"
	if len(prefix)+len(schema) <= maxChannel {
		return prefix + schema
	}
	sum := sha256.Sum256([]byte(schema))
	return prefix + hex.EncodeToString(sum[:16])
}

// listenPostgres names the schema's channel, so that writes notify it, and gives
// the feed a listener on it.
func (s *sqlStore) listenPostgres(ctx context.Context, o Options) error {
	var schema sql.NullString
	if err := s.rdb.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return fmt.Errorf("open postgres store: read the current schema: %w", err)
	}
	if !schema.Valid {
		return errors.New("open postgres store: no current schema (check search_path)")
	}
	s.channel = feedChannel(schema.String)
	l := &pgListener{cfg: s.pgConfig.Copy(), channel: s.channel, timeout: o.Timeout, quiet: o.listenerQuiet, log: o.Logger,
		writer: s.writer}
	s.feed.listen = l.run
	return nil
}

// pgListener follows the feed's NOTIFY channel over a connection of its own, outside
// the database/sql pool: LISTEN belongs to one session, and a pooled connection
// would be handed to other statements between notifications.
type pgListener struct {
	cfg     *pgx.ConnConfig
	channel string
	timeout time.Duration // bounds connecting, LISTEN and each ping
	quiet   time.Duration // ping after this long without a notification
	log     *slog.Logger
	// writer, when set, orders the hosts of a multi-host DSN: after a failover
	// the listener follows the new primary, tried first (failover.go).
	writer *pgWriter
	// host is the address of the current connection, for the log.
	host string
}

// run listens until ctx ends. It calls wake for every notification, and once the
// LISTEN is in place (what committed before it is read from the feed). A lost
// connection is reopened with backoff; every LISTEN after the first calls resync
// too, since notifications sent while nobody listened are gone. Meanwhile the
// feed's poll goes on, so changes still arrive, only later.
func (l *pgListener) run(ctx context.Context, wake, resync func()) {
	backoff := listenerBackoffMin
	listened := false
	for {
		err := l.listen(ctx, func() {
			if listened {
				resync()
				l.log.Info("change feed: listening again", "channel", l.channel, "host", l.host)
			} else {
				l.log.Info("change feed: listening", "channel", l.channel, "host", l.host)
			}
			listened = true
			backoff = listenerBackoffMin
			wake()
		}, wake)
		if ctx.Err() != nil {
			return
		}
		l.log.Warn("change feed: listener lost; polling until it reconnects", "channel", l.channel, "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, listenerBackoffMax)
	}
}

// listen opens a connection, LISTENs, calls listening, and then wake for each
// notification until the connection fails or ctx ends.
func (l *pgListener) listen(ctx context.Context, listening, wake func()) error {
	cctx, cancel := context.WithTimeout(ctx, l.timeout)
	cfg := *l.cfg // a shallow copy, as database/sql's connector makes
	if l.writer != nil {
		l.writer.preferWriter(cctx, &cfg)
	}
	conn, err := pgx.ConnectConfig(cctx, &cfg)
	if err != nil {
		cancel()
		return err
	}
	l.host = remoteAddr(conn.PgConn())
	defer func() {
		// Close sends a goodbye; bound it, the network may be what failed.
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn.Close(closeCtx)
		cancel()
	}()
	_, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize())
	cancel()
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	listening()
	for {
		wctx, cancel := context.WithTimeout(ctx, l.quiet)
		_, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			wake()
			continue
		case ctx.Err() != nil:
			return ctx.Err()
		case !pgconn.Timeout(err) && !errors.Is(err, context.DeadlineExceeded):
			return err
		}
		// Quiet for a while: a timed-out wait leaves the connection usable, and a
		// ping tells an idle connection from one into a black hole.
		pctx, cancel := context.WithTimeout(ctx, l.timeout)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			return fmt.Errorf("ping: %w", err)
		}
	}
}
