package operations

import (
	"context"
	"encoding/json"
)

// What the Idempotency-Key of an evacuation or a bulk action needs: the
// operation its request created, as that request answered (202 with the
// operation's id and its plan). The operation names the key in the write that
// creates it (launch), so a key whose holder died before it kept the answer is
// finished from the operation instead of letting a retry start a second one.

// ByKey returns the operation a request of userID under the Idempotency-Key
// key created, as that request answered it; NotFound when none did.
func (o *Service) ByKey(ctx context.Context, userID int64, key string) (Launched, error) {
	op, err := o.st.OperationByIdempotencyKey(ctx, userID, key)
	if err != nil {
		return Launched{}, err
	}
	return Relaunched(op.ID, []byte(op.Plan)), nil
}

// Relaunched is the answer of the request that created operation id with the
// plan it kept (vmops.KeyOutcome's OperationID and Plan). An unreadable plan
// (none was kept) still names the operation.
func Relaunched(id int64, plan []byte) Launched {
	l := Launched{OperationID: id}
	_ = json.Unmarshal(plan, &l.Plan) // written by launch with the key
	return l
}
