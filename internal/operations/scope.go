package operations

import (
	"context"
	"strconv"

	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/vmops"
)

// Grants scoped to pools and tags (issue 23 section 3, docs/decisions/0120).
// To a caller whose grant on its cluster is scoped, an operation is theirs to
// see only when it is a bulk action whose every guest is in the scope: an
// evacuation or a maintenance is about a whole node, and a bulk action over
// guests outside the scope would tell of them. Any other operation answers as
// one that does not exist (docs/security.md item 42). A bulk action a scoped
// caller asks for acts only on guests in scope (Bulk); an evacuation or a
// maintenance needs a cluster-wide operator grant (vmops.RequireWide).

// visible reports whether a caller with scope filter in (nil: cluster-wide)
// may see op.
func visible(op store.Operation, in fleet.InScope) bool {
	if in == nil {
		return true
	}
	if op.Node != "" || len(op.Items) == 0 {
		return false
	}
	for _, it := range op.Items {
		if !in(it.VMID) {
			return false
		}
	}
	return true
}

// requireOperationScope checks, once a's grant on the operation's cluster is
// checked, that a scoped grant covers the operation (visible).
func (o *Service) requireOperationScope(ctx context.Context, a vmops.Actor, id, clusterID int64, need string) error {
	in, err := o.svc.ScopeFilter(ctx, a, clusterID)
	if err != nil || in == nil {
		return err
	}
	op, err := o.st.OperationByID(ctx, id)
	if err != nil {
		return err
	}
	if visible(op, in) {
		return nil
	}
	return o.svc.OutOfScope(ctx, a, clusterID, need, "operation:"+strconv.FormatInt(id, 10), opNotFound(id))
}

// maxOperationScan bounds the operations one scoped list reads looking for the
// ones the caller may see.
const maxOperationScan = 2000

// listScoped is ListOperations' reading when some of the clusters listed are
// seen through a scoped grant: it reads on past the operations it leaves out,
// at most maxOperationScan of them, so that a page is full when it can be.
func (o *Service) listScoped(ctx context.Context, f store.OperationFilter, scopes map[int64]fleet.InScope) ([]View, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, 200)
	f.Limit = 200
	out := make([]View, 0, limit)
	for scanned := 0; scanned < maxOperationScan; {
		ops, err := o.st.ListOperations(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, op := range ops {
			f.BeforeID = op.ID
			scanned++
			if in, scoped := scopes[op.ClusterID]; scoped && !visible(op, in) {
				continue
			}
			out = append(out, o.view(op))
			if len(out) == limit {
				return out, nil
			}
		}
		if len(ops) < f.Limit {
			break
		}
	}
	return out, nil
}
