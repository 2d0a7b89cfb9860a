package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
)

// clusterQuery reads clusters with their endpoints in one statement, so a reader
// never sees a cluster half-updated.
const clusterQuery = `
	SELECT c.id, c.name, c.token_id, c.token_secret_sealed, c.ca_cert, c.insecure_skip_verify,
		c.created_at, c.updated_at, c.pve_version, e.url, e.node, e.fingerprint
	FROM clusters c LEFT JOIN cluster_endpoints e ON e.cluster_id = c.id`

// readClusters runs clusterQuery with the condition where and folds the rows,
// ordered by cluster and endpoint position, into clusters.
func (s *sqlStore) readClusters(ctx context.Context, where string, args ...any) ([]Cluster, error) {
	rows, err := s.rdb.QueryContext(ctx, clusterQuery+" "+where+" ORDER BY c.id, e.position", args...)
	if err != nil {
		return nil, fmt.Errorf("read clusters: %w", err)
	}
	defer rows.Close()
	out := []Cluster{}
	for rows.Next() {
		var (
			c              Cluster
			url, node, fpr sql.NullString
		)
		if err := rows.Scan(&c.ID, &c.Name, &c.TokenID, &c.TokenSecretSealed, &c.CACert, &c.InsecureSkipVerify,
			timeCol{&c.CreatedAt}, timeCol{&c.UpdatedAt}, &c.PVEVersion, &url, &node, &fpr); err != nil {
			return nil, fmt.Errorf("read clusters: %w", err)
		}
		if n := len(out); n == 0 || out[n-1].ID != c.ID {
			c.Endpoints = []Endpoint{}
			out = append(out, c)
		}
		if url.Valid {
			last := &out[len(out)-1]
			last.Endpoints = append(last.Endpoints, Endpoint{URL: url.String, Node: node.String, Fingerprint: fpr.String})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read clusters: %w", err)
	}
	return out, nil
}

// CreateCluster implements Store. CreatedAt and UpdatedAt are now.
func (s *sqlStore) CreateCluster(ctx context.Context, c Cluster) (Cluster, error) {
	var id int64
	err := s.inFeedTx(ctx, func(tx *sql.Tx) ([]Change, error) {
		now := s.t(s.nowMS())
		err := tx.QueryRowContext(ctx, `
			INSERT INTO clusters (name, token_id, token_secret_sealed, ca_cert, insecure_skip_verify, created_at, updated_at,
				pve_version)
			VALUES ($1, $2, $3, $4, $5, $6, $6, $7)
			RETURNING id`,
			c.Name, c.TokenID, c.TokenSecretSealed, c.CACert, c.InsecureSkipVerify, now, c.PVEVersion).Scan(&id)
		if err != nil {
			return nil, err
		}
		if err := putEndpoints(ctx, tx, id, c.Endpoints); err != nil {
			return nil, err
		}
		return s.appendChanges(ctx, tx, time.Time{}, clusterChanged(id))
	})
	if err != nil {
		return Cluster{}, s.fail(err, "create cluster", fmt.Sprintf("a cluster named %q already exists", c.Name))
	}
	return s.ClusterByID(ctx, id)
}

// putEndpoints replaces the endpoints of cluster id, keeping their order.
func putEndpoints(ctx context.Context, tx *sql.Tx, id int64, eps []Endpoint) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM cluster_endpoints WHERE cluster_id = $1`, id); err != nil {
		return err
	}
	for i, e := range eps {
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO cluster_endpoints (cluster_id, position, url, node, fingerprint) VALUES ($1, $2, $3, $4, $5)`,
			id, i, e.URL, e.Node, e.Fingerprint); err != nil {
			return err
		}
	}
	return nil
}

// ClusterByID implements Store.
func (s *sqlStore) ClusterByID(ctx context.Context, id int64) (Cluster, error) {
	cs, err := s.readClusters(ctx, "WHERE c.id = $1", id)
	if err != nil {
		return Cluster{}, err
	}
	if len(cs) == 0 {
		return Cluster{}, errs.E(errs.NotFound, "cluster %d not found", id)
	}
	return cs[0], nil
}

// ListClusters implements Store. Clusters come by ID.
func (s *sqlStore) ListClusters(ctx context.Context) ([]Cluster, error) {
	return s.readClusters(ctx, "")
}

// UpdateCluster implements Store: it writes every field but ID, CreatedAt and
// PVEVersion, and replaces the endpoints. UpdatedAt becomes now.
func (s *sqlStore) UpdateCluster(ctx context.Context, c Cluster) (Cluster, error) {
	err := s.inFeedTx(ctx, func(tx *sql.Tx) ([]Change, error) {
		res, err := tx.ExecContext(ctx, `
			UPDATE clusters SET name = $2, token_id = $3, token_secret_sealed = $4, ca_cert = $5,
				insecure_skip_verify = $6, updated_at = $7
			WHERE id = $1`,
			c.ID, c.Name, c.TokenID, c.TokenSecretSealed, c.CACert, c.InsecureSkipVerify, s.t(s.nowMS()))
		if err != nil {
			return nil, err
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, err
		} else if n == 0 {
			return nil, errs.E(errs.NotFound, "cluster %d not found", c.ID)
		}
		if err := putEndpoints(ctx, tx, c.ID, c.Endpoints); err != nil {
			return nil, err
		}
		return s.appendChanges(ctx, tx, time.Time{}, clusterChanged(c.ID))
	})
	if err != nil {
		return Cluster{}, s.fail(err, "update cluster", fmt.Sprintf("a cluster named %q already exists", c.Name))
	}
	return s.ClusterByID(ctx, c.ID)
}

// SetClusterPVEVersion implements Store. It feeds ChangeCluster, so that every
// replica's cached cluster shows the new version; setting the version it has
// changes nothing and feeds nothing.
func (s *sqlStore) SetClusterPVEVersion(ctx context.Context, id int64, version string) error {
	err := s.inFeedTx(ctx, func(tx *sql.Tx) ([]Change, error) {
		var cur string
		if err := tx.QueryRowContext(ctx, `SELECT pve_version FROM clusters WHERE id = $1`, id).Scan(&cur); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return nil, errs.E(errs.NotFound, "cluster %d not found", id)
			}
			return nil, err
		}
		if cur == version {
			return nil, nil
		}
		if _, err := tx.ExecContext(ctx, `UPDATE clusters SET pve_version = $2 WHERE id = $1`, id, version); err != nil {
			return nil, err
		}
		return s.appendChanges(ctx, tx, time.Time{}, clusterChanged(id))
	})
	if err != nil {
		return s.fail(err, "set the PVE version of a cluster", "")
	}
	return nil
}

// DeleteCluster implements Store. Its endpoints and grants go with it (ON DELETE
// CASCADE); tasks and audit records keep its ID. The one feed entry, ChangeCluster,
// stands for the grants too.
func (s *sqlStore) DeleteCluster(ctx context.Context, id int64) error {
	return s.deleteOne(ctx, "delete cluster", errs.E(errs.NotFound, "cluster %d not found", id), clusterChanged(id),
		`DELETE FROM clusters WHERE id = $1`, id)
}

// clusterChanged is the feed entry of a created, updated or deleted cluster.
func clusterChanged(id int64) Change { return Change{Kind: ChangeCluster, ClusterID: id} }
