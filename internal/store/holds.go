package store

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
)

// Holds (issue 17 (docs/history.md)): an unfinished operation holds what it acts on, so that two
// operations never act on one node or one guest at once.
//
//   - A node: an operation with a Node (an evacuation; a maintenance later) holds
//     it from the transaction that creates it to the one that ends it. The hold
//     is a row of operation_holds, whose primary key (cluster, node) makes a
//     second hold fail on every replica: it is inserted, never checked first.
//     The row names the operation, whose owner and lease say who drives it, so a
//     take-over of the operation takes the hold along.
//   - A guest: an item of an unfinished operation that is pending or running
//     holds its VM. Guests are not rows of their own: CreateOperation reads them
//     under the holds table's write lock (SQLite: the write transaction), so an
//     operation is never created with a pending item on a guest, or on a node,
//     that another unfinished operation holds.

// Holder is an unfinished operation as a refusal or a skipped item names it.
type Holder struct {
	OperationID int64
	Kind        string // evacuate, bulk.start, ...
	Node        string // the node the operation holds; "" for a bulk action
	UserID      int64
	UserEmail   string // who started it
	CreatedAt   time.Time
}

// Holds is what a cluster's unfinished operations hold.
type Holds struct {
	Nodes  map[string]Holder // by node name
	Guests map[int64]Holder  // by VMID: an item pending or running (the oldest operation's, should two have one)
}

// HeldError is CreateOperation's error (inside an *errs.Error of kind Conflict)
// when another unfinished operation holds what the new one would act on: the
// node it would hold (Node), or guests of its pending items (Items, by the
// item's index: its VM is another operation's pending or running item, or is on
// a node another operation holds). Nothing was written.
type HeldError struct {
	Node  *Holder
	Items map[int]Holder
}

// Error implements error.
func (e *HeldError) Error() string {
	if e.Node != nil {
		return fmt.Sprintf("node %s is held by operation %d (%s)", e.Node.Node, e.Node.OperationID, e.Node.Kind)
	}
	idx := make([]int, 0, len(e.Items))
	for i := range e.Items {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	parts := make([]string, 0, len(idx))
	for _, i := range idx {
		parts = append(parts, fmt.Sprintf("item %d by operation %d", i, e.Items[i].OperationID))
	}
	return "guests are held: " + strings.Join(parts, ", ")
}

const holderColumns = `o.id, o.kind, o.node, o.user_id, o.user_email, o.created_at`

func scanHolder(sc scanner, key any) (Holder, error) {
	var h Holder
	err := sc.Scan(key, &h.OperationID, &h.Kind, &h.Node, &h.UserID, &h.UserEmail, timeCol{&h.CreatedAt})
	return h, err
}

// OperationHolds implements Store.
func (s *sqlStore) OperationHolds(ctx context.Context, clusterID int64) (Holds, error) {
	h, err := s.holdsIn(ctx, s.rdb, clusterID, 0)
	if err != nil {
		return Holds{}, fmt.Errorf("read operation holds: %w", err)
	}
	return h, nil
}

// holdsIn reads the holds of a cluster's unfinished operations other than
// except (0: none) through q (the read pool, or a transaction).
func (s *sqlStore) holdsIn(ctx context.Context, q querier, clusterID, except int64) (Holds, error) {
	h := Holds{Nodes: map[string]Holder{}, Guests: map[int64]Holder{}}
	rows, err := q.QueryContext(ctx, `SELECT h.node, `+holderColumns+`
		FROM operation_holds h JOIN operations o ON o.id = h.operation_id
		WHERE h.cluster_id = $1 AND o.id <> $2`, clusterID, except)
	if err != nil {
		return Holds{}, err
	}
	defer rows.Close()
	for rows.Next() {
		var node string
		holder, err := scanHolder(rows, &node)
		if err != nil {
			return Holds{}, err
		}
		h.Nodes[node] = holder
	}
	if err := rows.Err(); err != nil {
		return Holds{}, err
	}
	rows.Close()
	rows, err = q.QueryContext(ctx, `SELECT i.vmid, `+holderColumns+`
		FROM operations o JOIN operation_items i ON i.operation_id = o.id
		WHERE o.cluster_id = $1 AND o.id <> $2 AND o.status IN ('planned', 'running') AND i.state IN ('pending', 'running')
		ORDER BY o.id`, clusterID, except)
	if err != nil {
		return Holds{}, err
	}
	defer rows.Close()
	for rows.Next() {
		var vmid int64
		holder, err := scanHolder(rows, &vmid)
		if err != nil {
			return Holds{}, err
		}
		if _, seen := h.Guests[vmid]; !seen {
			h.Guests[vmid] = holder
		}
	}
	return h, rows.Err()
}

// takeHolds is CreateOperation's part in tx, after the operation's row (created)
// is written: the hold of its node, inserted (the primary key refuses a second
// one), then the check of its pending items against the other operations'
// holds, read under the holds table's write lock.
func (s *sqlStore) takeHolds(ctx context.Context, tx *sql.Tx, created Operation, items []OperationItem) error {
	if err := s.lock(ctx, tx, "operation_holds"); err != nil {
		return err
	}
	if created.Node != "" {
		res, err := tx.ExecContext(ctx, `INSERT INTO operation_holds (cluster_id, node, operation_id, created_at)
			VALUES ($1, $2, $3, $4) ON CONFLICT (cluster_id, node) DO NOTHING`,
			created.ClusterID, created.Node, created.ID, s.t(created.CreatedAt))
		if err != nil {
			return fmt.Errorf("hold node %s: %w", created.Node, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("hold node %s: %w", created.Node, err)
		} else if n == 0 {
			var node string
			holder, err := scanHolder(tx.QueryRowContext(ctx, `SELECT h.node, `+holderColumns+`
				FROM operation_holds h JOIN operations o ON o.id = h.operation_id
				WHERE h.cluster_id = $1 AND h.node = $2`, created.ClusterID, created.Node), &node)
			if err != nil {
				return fmt.Errorf("read the hold of node %s: %w", created.Node, err)
			}
			return errs.Wrap(errs.Conflict, &HeldError{Node: &holder},
				"node %s is held by operation %d (%s)", created.Node, holder.OperationID, holder.Kind)
		}
	}
	holds, err := s.holdsIn(ctx, tx, created.ClusterID, created.ID)
	if err != nil {
		return fmt.Errorf("read operation holds: %w", err)
	}
	held := map[int]Holder{}
	for i, it := range items {
		if it.State != "" && it.State != ItemPending {
			continue
		}
		if h, ok := holds.Guests[it.VMID]; ok {
			held[i] = h
		} else if h, ok := holds.Nodes[it.Node]; ok && it.Node != created.Node {
			held[i] = h
		}
	}
	if len(held) > 0 {
		return errs.Wrap(errs.Conflict, &HeldError{Items: held}, "%d VMs of the operation are held by other operations", len(held))
	}
	return nil
}
