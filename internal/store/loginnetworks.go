package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// NoteLoginNetwork implements Store.
func (s *sqlStore) NoteLoginNetwork(ctx context.Context, account, network string, at time.Time) error {
	if _, err := s.wdb.ExecContext(ctx, `
		INSERT INTO login_networks (account, network, last_login_at) VALUES ($1, $2, $3)
		ON CONFLICT (account, network) DO UPDATE SET last_login_at = excluded.last_login_at
		WHERE login_networks.last_login_at < excluded.last_login_at`, account, network, s.t(s.stamp(at))); err != nil {
		return fmt.Errorf("note a login network: %w", err)
	}
	return nil
}

// LoginNetworkSeen implements Store.
func (s *sqlStore) LoginNetworkSeen(ctx context.Context, account, network string) (time.Time, error) {
	var at time.Time
	err := s.rdb.QueryRowContext(ctx, `SELECT last_login_at FROM login_networks WHERE account = $1 AND network = $2`,
		account, network).Scan(timeCol{&at})
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("read a login network: %w", err)
	}
	return at, nil
}

// pruneLoginNetworks deletes the networks not logged in from since cutoff: they
// exempt nobody any more.
func (s *sqlStore) pruneLoginNetworks(ctx context.Context, cutoff time.Time, batch int) (int64, error) {
	return s.pruneBatches(ctx, "login networks", `
		DELETE FROM login_networks
		WHERE last_login_at < $1 AND (account, network) IN (
			SELECT account, network FROM login_networks WHERE last_login_at < $1 LIMIT $2)`,
		s.t(cutoff), batch)
}
