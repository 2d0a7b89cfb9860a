package operations

import (
	"context"
	"strconv"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/vmops"
)

// requireOperation checks a's grant on an operation's cluster (vmops' grant
// check: a refusal audited with the request as made). An operation on a
// cluster a holds no grant on answers like one that does not exist (the
// cluster's name stays unsaid).
func (o *Service) requireOperation(ctx context.Context, a vmops.Actor, id int64, need string) error {
	clusterID, err := o.OperationCluster(ctx, id)
	if err != nil {
		return err
	}
	if err := o.svc.Require(ctx, a, clusterID, need, "operation:"+strconv.FormatInt(id, 10)); err != nil {
		if errs.KindOf(err) == errs.NotFound {
			return vmops.Denied(opNotFound(id))
		}
		return err
	}
	if err := o.requireOperationScope(ctx, a, id, clusterID, need); err != nil {
		return vmops.Denied(err)
	}
	return nil
}
