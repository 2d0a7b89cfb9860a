package store

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"
)

const signingKeysQuery = `SELECT id, secret, sealed, created_at FROM signing_keys ORDER BY created_at, id`

func scanSigningKey(sc scanner) (SigningKey, error) {
	var k SigningKey
	err := sc.Scan(&k.ID, &k.Secret, &k.Sealed, timeCol{&k.CreatedAt})
	return k, err
}

// signingKeyChanged is the feed entry of an added or deleted signing key.
func signingKeyChanged() Change { return Change{Kind: ChangeSigningKey} }

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
			if err := insertSigningKey(ctx, s, tx, k); err != nil {
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

func insertSigningKey(ctx context.Context, s *sqlStore, tx *sql.Tx, k SigningKey) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO signing_keys (id, secret, sealed, created_at) VALUES ($1, $2, $3, $4)`,
		k.ID, k.Secret, k.Sealed, s.t(s.stamp(k.CreatedAt)))
	return err
}

// AddSigningKey implements Store.
func (s *sqlStore) AddSigningKey(ctx context.Context, k SigningKey) error {
	err := s.inFeedTx(ctx, func(tx *sql.Tx) ([]Change, error) {
		if err := insertSigningKey(ctx, s, tx, k); err != nil {
			return nil, err
		}
		return s.appendChanges(ctx, tx, time.Time{}, signingKeyChanged())
	})
	return s.fail(err, "add signing key", fmt.Sprintf("signing key %q exists", k.ID))
}

// DeleteSupersededSigningKeys implements Store.
func (s *sqlStore) DeleteSupersededSigningKeys(ctx context.Context, cutoff time.Time) (int, error) {
	var n int64
	err := s.inFeedTx(ctx, func(tx *sql.Tx) ([]Change, error) {
		if err := s.lock(ctx, tx, "signing_keys"); err != nil {
			return nil, err
		}
		res, err := tx.ExecContext(ctx, `
			DELETE FROM signing_keys WHERE EXISTS (
				SELECT 1 FROM signing_keys n
				WHERE n.created_at < $1
				  AND (n.created_at > signing_keys.created_at OR (n.created_at = signing_keys.created_at AND n.id > signing_keys.id)))`,
			s.t(ms(cutoff)))
		if err != nil {
			return nil, err
		}
		if n, err = res.RowsAffected(); err != nil || n == 0 {
			return nil, err
		}
		return s.appendChanges(ctx, tx, time.Time{}, signingKeyChanged())
	})
	if err != nil {
		return 0, fmt.Errorf("delete superseded signing keys: %w", err)
	}
	return int(n), nil
}

// ResealSecrets implements Store. It reads every value first and writes after, so
// that no statement is left open on SQLite's one write connection.
func (s *sqlStore) ResealSecrets(ctx context.Context, fn func(SealedSecret) ([]byte, error)) (int, error) {
	replaced := 0
	err := s.inFeedTx(ctx, func(tx *sql.Tx) ([]Change, error) {
		replaced = 0
		for _, table := range []string{"signing_keys", "clusters", "notify_targets"} {
			if err := s.lock(ctx, tx, table); err != nil {
				return nil, err
			}
		}
		chain, err := s.lockAuditChain(ctx, tx)
		if err != nil {
			return nil, err
		}
		keys, err := queryAll(ctx, tx, "read signing keys", scanSigningKey, signingKeysQuery)
		if err != nil {
			return nil, err
		}
		clusters, err := queryAll(ctx, tx, "read cluster secrets", func(sc scanner) (SealedSecret, error) {
			var (
				id  int64
				sec = SealedSecret{Kind: SealedClusterToken}
			)
			err := sc.Scan(&id, &sec.Name, &sec.Value)
			sec.Row = strconv.FormatInt(id, 10)
			return sec, err
		}, `SELECT id, token_id, token_secret_sealed FROM clusters WHERE token_secret_sealed IS NOT NULL ORDER BY id`)
		if err != nil {
			return nil, err
		}
		targets, err := queryAll(ctx, tx, "read notification target secrets", func(sc scanner) (SealedSecret, error) {
			sec := SealedSecret{Kind: SealedNotifySecret}
			err := sc.Scan(&sec.Row, &sec.Value)
			sec.Name = sec.Row
			return sec, err
		}, `SELECT id, secret_sealed FROM notify_targets WHERE secret_sealed IS NOT NULL ORDER BY id`)
		if err != nil {
			return nil, err
		}
		var fed []Change
		for _, k := range keys {
			v, err := fn(SealedSecret{Kind: SealedSigningKey, Row: k.ID, Name: k.ID, Value: k.Secret, Clear: !k.Sealed})
			if err != nil {
				return nil, fmt.Errorf("signing key %s: %w", k.ID, err)
			}
			if v == nil {
				continue
			}
			if _, err := tx.ExecContext(ctx, `UPDATE signing_keys SET secret = $2, sealed = $3 WHERE id = $1`, k.ID, v, true); err != nil {
				return nil, err
			}
			replaced++
			if len(fed) == 0 || fed[0].Kind != ChangeSigningKey {
				fed = append([]Change{signingKeyChanged()}, fed...)
			}
		}
		for _, c := range clusters {
			v, err := fn(c)
			if err != nil {
				return nil, fmt.Errorf("cluster %s: %w", c.Row, err)
			}
			if v == nil {
				continue
			}
			id, _ := strconv.ParseInt(c.Row, 10, 64) // formatted above
			if _, err := tx.ExecContext(ctx, `UPDATE clusters SET token_secret_sealed = $2 WHERE id = $1`, id, v); err != nil {
				return nil, err
			}
			replaced++
			fed = append(fed, clusterChanged(id))
		}
		for _, nt := range targets {
			v, err := fn(nt)
			if err != nil {
				return nil, fmt.Errorf("notification target %s: %w", nt.Row, err)
			}
			if v == nil {
				continue
			}
			if _, err := tx.ExecContext(ctx, `UPDATE notify_targets SET secret_sealed = $2 WHERE id = $1`, nt.Row, v); err != nil {
				return nil, err
			}
			replaced++
		}
		if chain.KeySealed != nil {
			v, err := fn(SealedSecret{Kind: SealedAuditKey, Row: "1", Name: strconv.FormatInt(chain.KeyedFrom, 10),
				Value: chain.KeySealed})
			if err != nil {
				return nil, fmt.Errorf("the audit chain's key: %w", err)
			}
			if v != nil {
				if _, err := tx.ExecContext(ctx, `UPDATE audit_chain SET key_sealed = $1 WHERE id = 1`, v); err != nil {
					return nil, err
				}
				replaced++
			}
		}
		return s.appendChanges(ctx, tx, time.Time{}, fed...)
	})
	if err != nil {
		return 0, fmt.Errorf("reseal secrets: %w", err)
	}
	return replaced, nil
}
