package store

import (
	"context"
	"database/sql"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
)

const grantColumns = `user_id, cluster_id, role, created_at, scope`

func scanGrant(sc scanner) (Grant, error) {
	var g Grant
	err := sc.Scan(&g.UserID, &g.ClusterID, &g.Role, timeCol{&g.CreatedAt}, scopeCol{&g.Scope})
	return g, err
}

// PutGrant implements Store. A new grant's zero CreatedAt is now; changing the role
// or scope of an existing grant keeps its CreatedAt. A missing user or cluster is
// NotFound.
func (s *sqlStore) PutGrant(ctx context.Context, g Grant) (Grant, error) {
	scope, err := encodeScope(g.Scope)
	if err != nil {
		return Grant{}, err
	}
	var put Grant
	err = s.inFeedTx(ctx, func(tx *sql.Tx) ([]Change, error) {
		var err error
		put, err = scanGrant(tx.QueryRowContext(ctx, `
			INSERT INTO grants (user_id, cluster_id, role, created_at, scope) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (user_id, cluster_id) DO UPDATE SET role = excluded.role, scope = excluded.scope
			RETURNING `+grantColumns,
			g.UserID, g.ClusterID, g.Role, s.t(s.stamp(g.CreatedAt)), scope))
		if err != nil {
			return nil, err
		}
		return s.appendChanges(ctx, tx, time.Time{}, grantChanged(g.UserID, g.ClusterID))
	})
	if err != nil {
		return Grant{}, s.fail(err, "put grant", "put grant")
	}
	return put, nil
}

// DeleteGrant implements Store. A missing grant is NotFound.
func (s *sqlStore) DeleteGrant(ctx context.Context, userID, clusterID int64) error {
	return s.deleteOne(ctx, "delete grant", grantMissing(userID, clusterID), grantChanged(userID, clusterID),
		`DELETE FROM grants WHERE user_id = $1 AND cluster_id = $2`, userID, clusterID)
}

// GrantFor implements Store.
func (s *sqlStore) GrantFor(ctx context.Context, userID, clusterID int64) (Grant, error) {
	g, err := scanGrant(s.rdb.QueryRowContext(ctx,
		`SELECT `+grantColumns+` FROM grants WHERE user_id = $1 AND cluster_id = $2`, userID, clusterID))
	if err != nil {
		return Grant{}, s.failRow(err, "read grant", grantMissing(userID, clusterID))
	}
	return g, nil
}

// UserGrants implements Store.
func (s *sqlStore) UserGrants(ctx context.Context, userID int64) ([]Grant, error) {
	return queryAll(ctx, s.rdb, "read grants", scanGrant,
		`SELECT `+grantColumns+` FROM grants WHERE user_id = $1 ORDER BY cluster_id`, userID)
}

// grantChanged is the feed entry of a put or deleted grant.
func grantChanged(userID, clusterID int64) Change {
	return Change{Kind: ChangeGrant, UserID: userID, ClusterID: clusterID}
}

func grantMissing(userID, clusterID int64) error {
	return errs.E(errs.NotFound, "user %d has no grant on cluster %d", userID, clusterID)
}
