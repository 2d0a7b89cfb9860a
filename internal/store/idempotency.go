package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
)

// IdempotencyTTL is how long a claimed key lives when the caller sets no ExpiresAt.
const IdempotencyTTL = 24 * time.Hour

// IdempotencyLease is how long a claim holds an in-progress key when the caller sets
// no LeaseExpiresAt: a holder extends it every third of that (a third of the time
// for two heartbeats to fail before the lease is lost), and a key whose holder died
// can be taken over this long after its last heartbeat. Two thirds of it (40 s)
// outlast a PostgreSQL failover of 30 s plus the store's deadline and a retry
// (docs/decisions/0118).
const IdempotencyLease = 60 * time.Second

// LeaseRetry is how soon a holder tries again to renew a lease (an
// Idempotency-Key's, an operation's) after a renewal failed because the store
// was away: the lease is renewed within this long of the store's return.
const LeaseRetry = time.Second

// NewOwner names a process as the holder of leases (an Idempotency-Key's, an
// operation's): host, pid and a random part, so that a restarted process on the
// same host is another owner.
func NewOwner() string {
	host, _ := os.Hostname()
	var b [6]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

const idemColumns = `user_id, idem_key, request_hash, state, status_code, headers, body, created_at, expires_at,
	owner, lease_expires_at`

func scanIdem(sc scanner) (IdempotencyRecord, error) {
	var r IdempotencyRecord
	err := sc.Scan(&r.UserID, &r.Key, &r.RequestHash, &r.State, &r.StatusCode, &r.Headers, &r.Body,
		timeCol{&r.CreatedAt}, timeCol{&r.ExpiresAt}, &r.Owner, timeCol{&r.LeaseExpiresAt})
	return r, err
}

// ClaimIdempotencyKey implements Store in one statement: the insert either adds the
// row, replaces an expired one (the DO UPDATE's WHERE), or does nothing and returns
// no row, in which case the unexpired holder is read. A zero CreatedAt is now and
// is also the instant expiry is judged at; a zero ExpiresAt is CreatedAt plus
// IdempotencyTTL; a zero LeaseExpiresAt is CreatedAt plus IdempotencyLease; an
// empty State is IdemInProgress.
func (s *sqlStore) ClaimIdempotencyKey(ctx context.Context, r IdempotencyRecord) (IdempotencyRecord, bool, error) {
	r.CreatedAt = s.stamp(r.CreatedAt)
	if r.ExpiresAt.IsZero() {
		r.ExpiresAt = r.CreatedAt.Add(IdempotencyTTL)
	}
	if r.LeaseExpiresAt.IsZero() {
		r.LeaseExpiresAt = r.CreatedAt.Add(IdempotencyLease)
	}
	if r.State == "" {
		r.State = IdemInProgress
	}
	// The holder read after a lost claim may be released before the read; then the
	// claim is tried again. Three rounds is plenty: each needs a whole request's
	// claim and release to slip in between two statements.
	for range 3 {
		claimed, err := scanIdem(s.wdb.QueryRowContext(ctx, `
			INSERT INTO idempotency_keys (`+idemColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
			ON CONFLICT (user_id, idem_key) DO UPDATE SET
				request_hash = excluded.request_hash, state = excluded.state, status_code = excluded.status_code,
				headers = excluded.headers, body = excluded.body, created_at = excluded.created_at,
				expires_at = excluded.expires_at, owner = excluded.owner, lease_expires_at = excluded.lease_expires_at
			WHERE idempotency_keys.expires_at <= excluded.created_at
			RETURNING `+idemColumns,
			r.UserID, r.Key, r.RequestHash, r.State, r.StatusCode, r.Headers, r.Body, s.t(r.CreatedAt), s.t(r.ExpiresAt),
			r.Owner, s.t(r.LeaseExpiresAt)))
		if err == nil {
			return claimed, true, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return IdempotencyRecord{}, false, s.fail(err, "claim idempotency key", "claim idempotency key")
		}
		held, err := scanIdem(s.rdb.QueryRowContext(ctx,
			`SELECT `+idemColumns+` FROM idempotency_keys WHERE user_id = $1 AND idem_key = $2`, r.UserID, r.Key))
		if err == nil {
			return held, false, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return IdempotencyRecord{}, false, fmt.Errorf("claim idempotency key: %w", err)
		}
	}
	return IdempotencyRecord{}, false, errs.E(errs.Conflict, "idempotency key is being claimed and released concurrently")
}

// CompleteIdempotencyKey implements Store. A missing key is NotFound; a key already
// done, or held by another owner, is Conflict.
func (s *sqlStore) CompleteIdempotencyKey(ctx context.Context, r IdempotencyRecord) error {
	res, err := s.wdb.ExecContext(ctx, `
		UPDATE idempotency_keys SET state = 'done', status_code = $4, headers = $5, body = $6
		WHERE user_id = $1 AND idem_key = $2 AND owner = $3 AND state = 'in_progress'`,
		r.UserID, r.Key, r.Owner, r.StatusCode, r.Headers, r.Body)
	return s.idemChanged(ctx, res, err, "complete", r.UserID, r.Key)
}

// ReleaseIdempotencyKey implements Store. A missing key is NotFound; a key already
// done (its answer stands), or held by another owner, is Conflict.
func (s *sqlStore) ReleaseIdempotencyKey(ctx context.Context, userID int64, key, owner string) error {
	res, err := s.wdb.ExecContext(ctx,
		`DELETE FROM idempotency_keys WHERE user_id = $1 AND idem_key = $2 AND owner = $3 AND state = 'in_progress'`,
		userID, key, owner)
	return s.idemChanged(ctx, res, err, "release", userID, key)
}

// HeartbeatIdempotencyKey implements Store. The lease only ever grows, so a late
// heartbeat cannot shorten one a newer heartbeat set.
func (s *sqlStore) HeartbeatIdempotencyKey(ctx context.Context, userID int64, key, owner string, until time.Time) error {
	until = ms(until)
	res, err := s.wdb.ExecContext(ctx, `
		UPDATE idempotency_keys SET lease_expires_at = CASE WHEN lease_expires_at < $4 THEN $4 ELSE lease_expires_at END
		WHERE user_id = $1 AND idem_key = $2 AND owner = $3 AND state = 'in_progress'`,
		userID, key, owner, s.t(until))
	return s.idemChanged(ctx, res, err, "extend the lease of", userID, key)
}

// TakeOverIdempotencyKey implements Store in one conditional UPDATE: on PostgreSQL a
// second taker waits for the first's row lock and then finds the lease live again,
// on SQLite writers are serial, so exactly one wins.
func (s *sqlStore) TakeOverIdempotencyKey(ctx context.Context, userID int64, key, owner string, now, until time.Time) (IdempotencyRecord, bool, error) {
	now, until = s.stamp(now), ms(until)
	taken, err := scanIdem(s.wdb.QueryRowContext(ctx, `
		UPDATE idempotency_keys SET owner = $3, lease_expires_at = $5
		WHERE user_id = $1 AND idem_key = $2 AND state = 'in_progress' AND lease_expires_at <= $4
		RETURNING `+idemColumns,
		userID, key, owner, s.t(now), s.t(until)))
	if err == nil {
		return taken, true, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return IdempotencyRecord{}, false, fmt.Errorf("take over idempotency key: %w", err)
	}
	held, err := scanIdem(s.rdb.QueryRowContext(ctx,
		`SELECT `+idemColumns+` FROM idempotency_keys WHERE user_id = $1 AND idem_key = $2`, userID, key))
	if err != nil {
		return IdempotencyRecord{}, false, s.failRow(err, "take over idempotency key", errs.E(errs.NotFound, "idempotency key not found"))
	}
	return held, false, nil
}

// ExpiredIdempotencyLeases implements Store.
func (s *sqlStore) ExpiredIdempotencyLeases(ctx context.Context, now time.Time, limit int) ([]IdempotencyRecord, error) {
	return queryAll(ctx, s.rdb, "list expired idempotency leases", scanIdem, `
		SELECT `+idemColumns+` FROM idempotency_keys
		WHERE state = 'in_progress' AND lease_expires_at <= $1
		ORDER BY lease_expires_at, user_id, idem_key LIMIT $2`,
		s.t(s.stamp(now)), clampLimit(limit, 100, 1000))
}

// idemChanged checks that a statement on an in-progress key changed it, and says
// why not otherwise.
func (s *sqlStore) idemChanged(ctx context.Context, res sql.Result, err error, verb string, userID int64, key string) error {
	if err != nil {
		return fmt.Errorf("%s idempotency key: %w", verb, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s idempotency key: %w", verb, err)
	}
	if n == 1 {
		return nil
	}
	var state string
	err = s.rdb.QueryRowContext(ctx, `SELECT state FROM idempotency_keys WHERE user_id = $1 AND idem_key = $2`,
		userID, key).Scan(&state)
	if err != nil {
		return s.failRow(err, verb+" idempotency key", errs.E(errs.NotFound, "idempotency key not found"))
	}
	if state == IdemInProgress {
		return errs.E(errs.Conflict, "idempotency key is held by another owner: its lease was taken over")
	}
	return errs.E(errs.Conflict, "idempotency key is %s already", state)
}
