package store

import (
	"context"
	"fmt"
	"time"
)

// Prune implements Store. Every batch is one DELETE ... WHERE key IN (SELECT key ...
// LIMIT n), which both engines accept (DELETE ... LIMIT is SQLite's alone), and
// commits on its own. The outer WHERE repeats the condition of the inner SELECT so
// that on PostgreSQL a row changed by a concurrent writer between the two (an
// expired idempotency key claimed afresh) is rechecked against its new version and
// kept.
func (s *sqlStore) Prune(ctx context.Context, now time.Time, p PruneOptions) (PruneResult, error) {
	now = s.stamp(now)
	if p.ChangesOlderThan <= 0 {
		p.ChangesOlderThan = DefaultPruneChanges
	}
	if p.SessionsEndedBefore <= 0 {
		p.SessionsEndedBefore = DefaultPruneSessions
	}
	if p.Batch <= 0 {
		p.Batch = DefaultPruneBatch
	}
	if p.AuditOlderThan <= 0 {
		p.AuditOlderThan = DefaultPruneAudit
	}
	if p.LoginNetworksOlderThan <= 0 {
		p.LoginNetworksOlderThan = DefaultPruneLoginNetworks
	}
	var (
		res PruneResult
		err error
	)
	// The feed is walked by seq, its primary key, and loses only its head: every
	// entry before the first one still fresh, and never the newest. changed_at comes
	// from the clocks of several replicas and so need not grow with seq.
	res.Changes, err = s.pruneBatches(ctx, "change feed", `
		DELETE FROM changes WHERE seq IN (
			SELECT seq FROM changes
			WHERE seq < COALESCE(
				(SELECT seq FROM changes WHERE changed_at >= $1 ORDER BY seq LIMIT 1),
				(SELECT max(seq) FROM changes))
			ORDER BY seq LIMIT $2)`,
		s.t(now.Add(-p.ChangesOlderThan)), p.Batch)
	if err != nil {
		return res, err
	}
	res.Sessions, err = s.pruneBatches(ctx, "sessions", `
		DELETE FROM sessions
		WHERE (expires_at < $1 OR revoked_at < $1) AND id IN (
			SELECT id FROM sessions WHERE expires_at < $1 OR revoked_at < $1 LIMIT $2)`,
		s.t(now.Add(-p.SessionsEndedBefore)), p.Batch)
	if err != nil {
		return res, err
	}
	// expires_at <= now: ClaimIdempotencyKey takes a key at its ExpiresAt as expired.
	res.IdempotencyKeys, err = s.pruneBatches(ctx, "idempotency keys", `
		DELETE FROM idempotency_keys
		WHERE expires_at <= $1 AND (user_id, idem_key) IN (
			SELECT user_id, idem_key FROM idempotency_keys WHERE expires_at <= $1 LIMIT $2)`,
		s.t(now), p.Batch)
	if err != nil {
		return res, err
	}
	res.Audit, err = s.pruneAudit(ctx, now.Add(-p.AuditOlderThan), now, p.Batch)
	if err != nil {
		return res, err
	}
	res.APITokens, err = s.pruneAPITokens(ctx, now.Add(-p.SessionsEndedBefore), p.Batch)
	if err != nil {
		return res, err
	}
	res.LoginNetworks, err = s.pruneLoginNetworks(ctx, now.Add(-p.LoginNetworksOlderThan), p.Batch)
	return res, err
}

// pruneBatches runs the batch DELETE query (arguments: a cut-off, then the batch
// size) until a batch deletes less than a full batch, and returns how many rows went.
// Each batch has the store's timeout of its own.
func (s *sqlStore) pruneBatches(ctx context.Context, what, query string, cutoff any, batch int) (int64, error) {
	var total int64
	for {
		bctx, cancel := context.WithTimeout(ctx, s.timeout)
		res, err := s.wdb.ExecContext(bctx, query, cutoff, batch)
		cancel()
		if err != nil {
			return total, fmt.Errorf("prune %s: %w", what, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("prune %s: %w", what, err)
		}
		total += n
		if n < int64(batch) {
			return total, nil
		}
	}
}
