package store

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
)

// Writes the database refuses (issue 17 (docs/history.md)): a full disk or a read-only database
// answers reads and refuses every write. Such a refusal is not the database
// being away (store_unavailable, which a retry a few seconds later may cure):
// nothing changes until an operator frees space or makes the database writable,
// and the answer says so, the same words in the log with where the database is.

// Retry-After of a refused write, in seconds: long enough that clients do not
// hammer a store an operator has to repair, short enough that they notice soon.
const (
	fullRetryAfter     = 30
	readOnlyRetryAfter = 10
)

// refusalLogEvery is how often the log repeats that the database refuses writes.
const refusalLogEvery = time.Minute

// refusalLog remembers when each kind of refusal was last logged.
type refusalLog struct {
	mu     sync.Mutex
	logged map[string]time.Time
	quiet  map[string]int // refusals not logged since
}

// due reports whether a refusal of reason is to be logged now, and how many were
// not logged since the last one.
func (l *refusalLog) due(reason string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.logged == nil {
		l.logged, l.quiet = map[string]time.Time{}, map[string]int{}
	}
	if last, ok := l.logged[reason]; ok && now.Sub(last) < refusalLogEvery {
		l.quiet[reason]++
		return false, 0
	}
	n := l.quiet[reason]
	l.logged[reason], l.quiet[reason] = now, 0
	return true, n
}

// refused is the error of a write the database refused for reason
// (errs.ReasonStoreFull or errs.ReasonStoreReadOnly), logged as such.
func (b *bounded) refused(reason string, err error) error {
	var e *errs.Error
	var logMsg string
	switch reason {
	case errs.ReasonStoreFull:
		e = &errs.Error{Kind: errs.Unavailable, Reason: reason, Err: err, RetryAfter: fullRetryAfter,
			Message: "vmgate's database disk is full: an operator must free space on the disk that holds vmgate's database, then retry"}
		logMsg = "vmgate's database disk is full: free space on the disk holding " + b.s.place + ", then retry"
	default:
		e = &errs.Error{Kind: errs.Unavailable, Reason: reason, Err: err, RetryAfter: readOnlyRetryAfter,
			Message: "vmgate's database is read-only: an operator must make it writable again (a file system mounted read-only, a PostgreSQL standby or read-only setting), then retry"}
		logMsg = "vmgate's database is read-only: make " + b.s.place + " writable again (a file system mounted read-only, a PostgreSQL standby or read-only setting), then retry"
	}
	if log, n := b.refusal.due(reason, time.Now()); log && b.log != nil {
		b.log.Error(logMsg, slog.String("reason", reason), slog.Int("refused_since_last_said", n),
			slog.String("error", err.Error()))
	}
	return e
}

// probePad is the write probe's payload: more than two SQLite pages, so that its
// row needs pages of overflow that only free or new pages can give.
var probePad = make([]byte, 8<<10)

// ProbeWrite implements Store.
func (s *sqlStore) ProbeWrite(ctx context.Context) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		var id int64
		err := tx.QueryRowContext(ctx, `INSERT INTO write_probe (owner, at, pad) VALUES ($1, $2, $3) RETURNING id`,
			s.probeOwner, s.t(s.nowMS()), probePad).Scan(&id)
		if err != nil {
			return fmt.Errorf("write probe: %w", err)
		}
		// The rows before go after the new one is in: freeing them first would
		// hand the insert their pages, and a full database would pass.
		if _, err := tx.ExecContext(ctx, `DELETE FROM write_probe WHERE id < $1`, id); err != nil {
			return fmt.Errorf("write probe: %w", err)
		}
		return nil
	})
}

// probeOwner names this process in the write probe's rows.
func probeOwner() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}
