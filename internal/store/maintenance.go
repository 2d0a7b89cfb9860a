package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
)

// Node maintenance (issue 20 (docs/history.md)): a node vmgate keeps out of
// every placement while it is drained, patched and rebooted. The mark is a row
// of node_maintenance whose primary key (cluster, node) makes a second mark fail
// on every replica. It is set in the transaction that creates the operation
// entering maintenance and names it (leaving reads from its items which guests
// it moved out), and cleared in the transaction that creates the operation
// leaving it: a node is never marked without the operation that empties it, nor
// cleared without the one that restores it.

// NodeMaintenance is a node vmgate keeps in maintenance.
type NodeMaintenance struct {
	ClusterID int64
	Node      string
	// OperationID is the operation that entered maintenance (its items say
	// which guests it moved out or shut down).
	OperationID int64
	UserID      int64
	UserEmail   string // who put the node in maintenance
	Since       time.Time
}

// ErrInMaintenance is the cause of EnterMaintenance's Conflict when the node is
// in maintenance already.
var ErrInMaintenance = errors.New("the node is in maintenance already")

// ErrNotInMaintenance is the cause of LeaveMaintenance's Conflict when the node
// is not in maintenance.
var ErrNotInMaintenance = errors.New("the node is not in maintenance")

// MaintenanceStore is what the store keeps of nodes in maintenance; Store has it.
type MaintenanceStore interface {
	// EnterMaintenance creates o as CreateOperation does (its holds checked the
	// same way) and marks o.Node in maintenance, naming o, in one transaction.
	// Conflict wrapping ErrInMaintenance, and nothing written, when the node is
	// marked already.
	EnterMaintenance(ctx context.Context, o Operation) (Operation, error)
	// LeaveMaintenance creates o as CreateOperation does and clears o.Node's
	// mark in one transaction; it returns the mark as it was. Conflict wrapping
	// ErrNotInMaintenance, and nothing written, when the node is not marked.
	LeaveMaintenance(ctx context.Context, o Operation) (Operation, NodeMaintenance, error)
	// NodeMaintenances lists the nodes in maintenance of a cluster (0: of every
	// cluster), by cluster and node.
	NodeMaintenances(ctx context.Context, clusterID int64) ([]NodeMaintenance, error)
	// SetNodeMaintenance marks a node in maintenance for an operation that
	// already exists (a rolling maintenance, node after node); a node marked
	// already keeps its mark (ok is false then, with the mark there is).
	SetNodeMaintenance(ctx context.Context, m NodeMaintenance) (cur NodeMaintenance, ok bool, err error)
	// ClearNodeMaintenance removes a node's mark when operationID set it (0:
	// whoever did); it reports whether a mark was removed.
	ClearNodeMaintenance(ctx context.Context, clusterID int64, node string, operationID int64) (bool, error)
}

const maintenanceColumns = `cluster_id, node, operation_id, user_id, user_email, since`

func scanMaintenance(sc scanner) (NodeMaintenance, error) {
	var m NodeMaintenance
	err := sc.Scan(&m.ClusterID, &m.Node, &m.OperationID, &m.UserID, &m.UserEmail, timeCol{&m.Since})
	return m, err
}

// operationDefaults fills what CreateOperation fills before its transaction.
func (s *sqlStore) operationDefaults(o Operation) Operation {
	o.CreatedAt = s.stamp(o.CreatedAt)
	if o.Status == "" {
		o.Status = OperationPlanned
	}
	return o
}

// EnterMaintenance implements Store.
func (s *sqlStore) EnterMaintenance(ctx context.Context, o Operation) (Operation, error) {
	o = s.operationDefaults(o)
	var created Operation
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		// A mark there is refuses the enter before the node's hold does, so
		// that the refusal says what a person needs to know; the insert below
		// refuses a racing one.
		var marked int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM node_maintenance WHERE cluster_id = $1 AND node = $2`,
			o.ClusterID, o.Node).Scan(&marked); err != nil {
			return fmt.Errorf("read the maintenance of node %s: %w", o.Node, err)
		}
		if marked > 0 {
			return errs.Wrap(errs.Conflict, ErrInMaintenance, "node %s is in maintenance already", o.Node)
		}
		var err error
		if created, err = s.createOperationIn(ctx, tx, o); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO node_maintenance (`+maintenanceColumns+`)
			VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (cluster_id, node) DO NOTHING`,
			o.ClusterID, o.Node, created.ID, o.UserID, o.UserEmail, s.t(o.CreatedAt))
		if err != nil {
			return fmt.Errorf("mark node %s in maintenance: %w", o.Node, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("mark node %s in maintenance: %w", o.Node, err)
		} else if n == 0 {
			return errs.Wrap(errs.Conflict, ErrInMaintenance, "node %s is in maintenance already", o.Node)
		}
		return nil
	})
	if err != nil {
		return Operation{}, s.fail(err, "enter maintenance", "enter maintenance")
	}
	if created.Items == nil {
		created.Items = []OperationItem{}
	}
	return created, nil
}

// LeaveMaintenance implements Store.
func (s *sqlStore) LeaveMaintenance(ctx context.Context, o Operation) (Operation, NodeMaintenance, error) {
	o = s.operationDefaults(o)
	var (
		created Operation
		was     NodeMaintenance
	)
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		was, err = scanMaintenance(tx.QueryRowContext(ctx, `DELETE FROM node_maintenance
			WHERE cluster_id = $1 AND node = $2 RETURNING `+maintenanceColumns, o.ClusterID, o.Node))
		if errors.Is(err, sql.ErrNoRows) {
			return errs.Wrap(errs.Conflict, ErrNotInMaintenance, "node %s is not in maintenance", o.Node)
		}
		if err != nil {
			return fmt.Errorf("clear the maintenance of node %s: %w", o.Node, err)
		}
		created, err = s.createOperationIn(ctx, tx, o)
		return err
	})
	if err != nil {
		return Operation{}, NodeMaintenance{}, s.fail(err, "leave maintenance", "leave maintenance")
	}
	if created.Items == nil {
		created.Items = []OperationItem{}
	}
	return created, was, nil
}

// NodeMaintenances implements Store.
func (s *sqlStore) NodeMaintenances(ctx context.Context, clusterID int64) ([]NodeMaintenance, error) {
	q, args := `SELECT `+maintenanceColumns+` FROM node_maintenance`, []any{}
	if clusterID != 0 {
		q, args = q+` WHERE cluster_id = $1`, append(args, clusterID)
	}
	return queryAll(ctx, s.rdb, "list nodes in maintenance", scanMaintenance, q+` ORDER BY cluster_id, node`, args...)
}

// SetNodeMaintenance implements Store.
func (s *sqlStore) SetNodeMaintenance(ctx context.Context, m NodeMaintenance) (NodeMaintenance, bool, error) {
	m.Since = s.stamp(m.Since)
	res, err := s.wdb.ExecContext(ctx, `INSERT INTO node_maintenance (`+maintenanceColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (cluster_id, node) DO NOTHING`,
		m.ClusterID, m.Node, m.OperationID, m.UserID, m.UserEmail, s.t(m.Since))
	if err != nil {
		return NodeMaintenance{}, false, fmt.Errorf("mark node %s in maintenance: %w", m.Node, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return NodeMaintenance{}, false, fmt.Errorf("mark node %s in maintenance: %w", m.Node, err)
	} else if n == 1 {
		return m, true, nil
	}
	cur, err := scanMaintenance(s.rdb.QueryRowContext(ctx, `SELECT `+maintenanceColumns+` FROM node_maintenance
		WHERE cluster_id = $1 AND node = $2`, m.ClusterID, m.Node))
	if err != nil {
		return NodeMaintenance{}, false, s.failRow(err, "read the maintenance of a node",
			errs.E(errs.Conflict, "node %s changed while it was marked; try again", m.Node))
	}
	return cur, false, nil
}

// ClearNodeMaintenance implements Store.
func (s *sqlStore) ClearNodeMaintenance(ctx context.Context, clusterID int64, node string, operationID int64) (bool, error) {
	q, args := `DELETE FROM node_maintenance WHERE cluster_id = $1 AND node = $2`, []any{clusterID, node}
	if operationID != 0 {
		q, args = q+` AND operation_id = $3`, append(args, operationID)
	}
	res, err := s.wdb.ExecContext(ctx, q, args...)
	if err != nil {
		return false, fmt.Errorf("clear the maintenance of node %s: %w", node, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("clear the maintenance of node %s: %w", node, err)
	}
	return n > 0, nil
}

// The maintenance methods of bounded (bounded.go).

// EnterMaintenance implements Store.
func (b *bounded) EnterMaintenance(ctx context.Context, o Operation) (Operation, error) {
	return call(b, ctx, func(ctx context.Context) (Operation, error) { return b.s.EnterMaintenance(ctx, o) })
}

// LeaveMaintenance implements Store.
func (b *bounded) LeaveMaintenance(ctx context.Context, o Operation) (Operation, NodeMaintenance, error) {
	return call2(b, ctx, func(ctx context.Context) (Operation, NodeMaintenance, error) { return b.s.LeaveMaintenance(ctx, o) })
}

// NodeMaintenances implements Store.
func (b *bounded) NodeMaintenances(ctx context.Context, clusterID int64) ([]NodeMaintenance, error) {
	return call(b, ctx, func(ctx context.Context) ([]NodeMaintenance, error) { return b.s.NodeMaintenances(ctx, clusterID) })
}

// SetNodeMaintenance implements Store.
func (b *bounded) SetNodeMaintenance(ctx context.Context, m NodeMaintenance) (NodeMaintenance, bool, error) {
	return call2(b, ctx, func(ctx context.Context) (NodeMaintenance, bool, error) { return b.s.SetNodeMaintenance(ctx, m) })
}

// ClearNodeMaintenance implements Store.
func (b *bounded) ClearNodeMaintenance(ctx context.Context, clusterID int64, node string, operationID int64) (bool, error) {
	return call(b, ctx, func(ctx context.Context) (bool, error) {
		return b.s.ClearNodeMaintenance(ctx, clusterID, node, operationID)
	})
}
