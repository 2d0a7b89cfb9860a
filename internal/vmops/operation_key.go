package vmops

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
)

// OperationByKey is the operation on many VMs (an evacuation, a bulk action)
// that userID's request made under Idempotency-Key key, claimed at since,
// created, as its request answered it: its id and plan (Launched.Operation is
// zero). ok is false when the request created none since its claim. The
// operation itself goes on under its own lease (operations_run.go); the key's
// holder, finishing the key for a request that died, answers with it.
func (o *OperationService) OperationByKey(ctx context.Context, userID int64, key string, since time.Time) (l Launched, ok bool, err error) {
	op, err := o.st.OperationByIdempotencyKey(ctx, userID, key)
	switch {
	case errs.KindOf(err) == errs.NotFound:
		return Launched{}, false, nil
	case err != nil:
		return Launched{}, false, err
	case op.CreatedAt.Before(since.Add(-claimSlack)):
		return Launched{}, false, nil // an earlier request's
	}
	l = Launched{OperationID: op.ID}
	if err := json.Unmarshal([]byte(op.Plan), &l.Plan); err != nil {
		// Written by launch with the key; an unreadable plan still names the operation.
		o.log.Warn("an operation's plan could not be read", slog.Int64("operation", op.ID), slog.String("error", err.Error()))
	}
	return l, true, nil
}
