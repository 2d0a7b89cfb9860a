package operations

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
)

// What the Idempotency-Key of an evacuation or a bulk action needs: the
// operation its request created, as that request answered (202 with the
// operation's id and its plan). The operation names the key in the write that
// creates it (launch), so a key whose holder died before it kept the answer is
// finished from the operation instead of letting a retry start a second one
// (docs/decisions/0085).

// claimSlack is how much older than its key's claim an operation may look and
// still be the request's: the claim and the row take their times from two
// clocks of the same process, a second apart at most.
const claimSlack = time.Second

// ByKey is the operation (an evacuation, a bulk action) that userID's request
// made under Idempotency-Key key, claimed at since, created, as its request
// answered it: its id and plan (Launched.Operation is zero). ok is false when
// the request created none since its claim. The operation itself goes on under
// its own lease (run.go); the key's holder, finishing the key for a request
// that died, answers with it.
func (o *Service) ByKey(ctx context.Context, userID int64, key string, since time.Time) (l Launched, ok bool, err error) {
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
