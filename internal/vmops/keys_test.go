package vmops

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/idempotency"
)

// keysFor is a keeper of Idempotency-Keys for svc's process, wired as vmgate
// wires it (cmd/vmgate): settled from what svc says a request came to,
// rendered by testSettle, and told by svc when an outcome became known. Call it before svc runs anything in the background.
func keysFor(t *testing.T, svc *Service, tweak func(*idempotency.Config)) *idempotency.Keeper {
	t.Helper()
	cfg := idempotency.Config{Store: svc.store, Now: svc.now, Settle: testSettle(svc), Sweep: 10 * time.Millisecond}
	if tweak != nil {
		tweak(&cfg)
	}
	k := idempotency.New(cfg)
	t.Cleanup(k.Close)
	svc.onKeySettled = func(ctx context.Context, userID int64, key string) {
		k.Settle(ctx, idempotency.Key{UserID: userID, Name: key})
	}
	return k
}

// testSettle settles a key as the HTTP layer does (httpapi.KeyOutcomes), with
// answers a test can read: the status the HTTP layer would give and the task id
// (internal/operations' tests settle an operation's key too).
func testSettle(svc *Service) idempotency.SettleFunc {
	return func(ctx context.Context, k idempotency.Key, since time.Time) (idempotency.Settlement, error) {
		o, err := svc.KeyOutcome(ctx, k.UserID, k.Name, since)
		if err != nil {
			return idempotency.Settlement{}, err
		}
		switch o.State {
		case KeyStartedNothing:
			return idempotency.Settlement{Verdict: idempotency.StartedNothing}, nil
		case KeyUnknown:
			return idempotency.Settlement{Verdict: idempotency.Unsettled}, nil
		}
		status := 200
		switch {
		case o.Err != nil:
			status = 409
		case o.Outcome.Running && o.Op != OpMigrate:
			status = 202
		}
		body, _ := json.Marshal(map[string]string{"op": o.Op, "taskId": o.Outcome.TaskID})
		return idempotency.Settlement{Verdict: idempotency.Answered, Answer: idempotency.Answer{Status: status,
			Headers: map[string]string{"X-Task-Id": o.Outcome.TaskID}, Body: body}}, nil
	}
}
