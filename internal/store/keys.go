package store

import (
	"context"
	"database/sql"
	"fmt"
)

const signingKeysQuery = `SELECT id, secret, created_at FROM signing_keys ORDER BY created_at, id`

func scanSigningKey(sc scanner) (SigningKey, error) {
	var k SigningKey
	err := sc.Scan(&k.ID, &k.Secret, timeCol{&k.CreatedAt})
	return k, err
}

// SigningKeys implements Store.
func (s *sqlStore) SigningKeys(ctx context.Context) ([]SigningKey, error) {
	return queryAll(ctx, s.rdb, "read signing keys", scanSigningKey, signingKeysQuery)
}

// CreateSigningKey implements Store. The table lock (SQLite: the write transaction)
// makes the check and the insert one step, so of two replicas starting together one
// inserts and the other reads the first one's key. A zero CreatedAt is now.
func (s *sqlStore) CreateSigningKey(ctx context.Context, k SigningKey) ([]SigningKey, error) {
	var keys []SigningKey
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.lock(ctx, tx, "signing_keys"); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM signing_keys)`).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			if _, err := tx.ExecContext(ctx, `INSERT INTO signing_keys (id, secret, created_at) VALUES ($1, $2, $3)`,
				k.ID, k.Secret, s.t(s.stamp(k.CreatedAt))); err != nil {
				return err
			}
		}
		var err error
		keys, err = queryAll(ctx, tx, "read signing keys", scanSigningKey, signingKeysQuery)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create signing key: %w", err)
	}
	return keys, nil
}
