package storetest

import (
	"testing"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// testNotifyTargets: targets are created, read, changed and deleted; a name is
// unique; a secret is kept as given (sealed by the caller) and nil stays nil.
func testNotifyTargets(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, err := s.CreateNotifyTarget(ctx, store.NotifyTarget{ID: "nt_a", Name: "ops", Kind: "webhook",
		Endpoint: "https://hooks.example/x", SecretSealed: []byte{1, 2, 3}, Filters: `{"severity":"error"}`, RatePerMinute: 10})
	ok(t, err, "create target")
	fresh(t, a.CreatedAt, "CreatedAt")
	_, err = s.CreateNotifyTarget(ctx, store.NotifyTarget{ID: "nt_b", Name: "ops", Kind: "slack", Endpoint: "https://x"})
	wantKind(t, err, errs.Conflict, "a second target named ops")
	b, err := s.CreateNotifyTarget(ctx, store.NotifyTarget{ID: "nt_b", Name: "mail", Kind: "smtp", Endpoint: "smtp://h?from=a@b&to=c@d"})
	ok(t, err, "create a target without a secret")
	same(t, b.SecretSealed, []byte(nil), "no secret")
	got, err := s.NotifyTargetByID(ctx, "nt_a")
	ok(t, err, "read target")
	same(t, got, a, "read target")
	_, err = s.NotifyTargetByID(ctx, "nt_zz")
	wantKind(t, err, errs.NotFound, "a missing target")
	a.Name, a.RatePerMinute = "ops-2", 0
	up, err := s.UpdateNotifyTarget(ctx, a)
	ok(t, err, "update target")
	same(t, [2]any{up.Name, up.RatePerMinute}, [2]any{"ops-2", 0}, "updated target")
	all, err := s.NotifyTargets(ctx)
	ok(t, err, "list targets")
	same(t, len(all), 2, "targets")
	same(t, all[0].Name, "mail", "first by name")
	ok(t, s.DeleteNotifyTarget(ctx, "nt_b"), "delete target")
	wantKind(t, s.DeleteNotifyTarget(ctx, "nt_b"), errs.NotFound, "delete it again")
}

// testNotifyOutbox: the events a change carries (WithOutbox) are written in its
// transaction: with a task's end, an operation's end and an audit record, and
// not when the change fails.
func testNotifyOutbox(t *testing.T, s store.Store) {
	ctx := t.Context()
	ev := func(subject string) store.NotifyEvent {
		return store.NotifyEvent{Kind: "task.failed", Severity: "warning", ClusterID: 7, Subject: subject, At: at(0)}
	}
	task, err := s.CreateTask(ctx, store.Task{ClusterID: 7, UserID: 3, Op: "start", VMID: 101})
	ok(t, err, "create task")
	task.Status, task.ExitStatus, task.EndedAt = store.TaskLost, "", at(1)
	_, err = s.UpdateTask(store.WithOutbox(ctx, ev("with the task")), task)
	ok(t, err, "end the task with an event")
	_, err = s.UpdateTask(store.WithOutbox(ctx, ev("with a refused change")), task)
	wantKind(t, err, errs.Conflict, "change a finished task")
	op := mkOperation(t, s, 7, "me", at(60e9), 1)
	ok(t, s.SetOperationStatus(store.WithOutbox(ctx, ev("with the operation")), op.ID, "me", store.OperationDone, at(2)), "end the operation")
	_, err = s.AppendAudit(store.WithOutbox(ctx, ev("with the audit")), store.AuditRecord{Action: "auth.lockout", Result: "locked"})
	ok(t, err, "audit with an event")
	ok(t, s.EnqueueNotifications(ctx, []store.NotifyEvent{ev("alone")}), "enqueue")
	evs, err := s.UnfannedNotifications(ctx, 0)
	ok(t, err, "read the outbox")
	var subjects []string
	for _, e := range evs {
		subjects = append(subjects, e.Subject)
	}
	same(t, subjects, []string{"with the task", "with the operation", "with the audit", "alone"}, "the outbox")
	same(t, evs[0].At, at(0), "an event's time")
}

// testNotifyDeliveries: fan-out writes each delivery once; a target's head is
// its first pending delivery in event order; a claim is all or none and
// exclusive until its lease runs out; an attempt is written only by the holder.
func testNotifyDeliveries(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, id := range []string{"nt_a", "nt_b"} {
		_, err := s.CreateNotifyTarget(ctx, store.NotifyTarget{ID: id, Name: id, Kind: "webhook", Endpoint: "https://x"})
		ok(t, err, "create target")
	}
	var evs []store.NotifyEvent
	for i := range 3 {
		evs = append(evs, store.NotifyEvent{Kind: "node.offline", Severity: "error", Subject: "n", At: at(0)})
		_ = i
	}
	ok(t, s.EnqueueNotifications(ctx, evs), "enqueue")
	out, err := s.UnfannedNotifications(ctx, 0)
	ok(t, err, "outbox")
	ids := []int64{out[0].ID, out[1].ID, out[2].ID}
	var ds []store.NotifyDelivery
	for _, id := range ids {
		ds = append(ds, store.NotifyDelivery{TargetID: "nt_a", EventID: id}, store.NotifyDelivery{TargetID: "nt_b", EventID: id})
	}
	ok(t, s.FanOutNotifications(ctx, ids, ds, at(0)), "fan out")
	ok(t, s.FanOutNotifications(ctx, ids, ds, at(0)), "fan out again (another replica)")
	left, err := s.UnfannedNotifications(ctx, 0)
	ok(t, err, "outbox")
	same(t, len(left), 0, "events left to fan out")
	heads, err := s.NotifyHeads(ctx, at(0), 0)
	ok(t, err, "heads")
	same(t, len(heads), 2, "a head per target")
	for _, h := range heads {
		same(t, h.EventID, ids[0], "a head is its target's first event")
	}
	pend, err := s.PendingNotifyDeliveries(ctx, "nt_a", 0)
	ok(t, err, "pending")
	same(t, len(pend), 3, "pending of nt_a")
	h := pend[0]
	won, err := s.ClaimNotifyDeliveries(ctx, []int64{h.ID}, "r1", at(0), at(60e9))
	ok(t, err, "claim")
	same(t, won, true, "first claim")
	won, err = s.ClaimNotifyDeliveries(ctx, []int64{h.ID, pend[1].ID}, "r2", at(1e9), at(61e9))
	ok(t, err, "claim held")
	same(t, won, false, "a claim of a held delivery (all or none)")
	heads, err = s.NotifyHeads(ctx, at(1e9), 0)
	ok(t, err, "heads")
	same(t, len(heads), 1, "a held head is not offered")
	wantKind(t, s.RecordNotifyAttempt(ctx, []int64{h.ID}, "r2", store.NotifyAttempt{State: store.DeliveryDelivered, At: at(2e9)}),
		errs.Conflict, "an attempt by who does not hold it")
	ok(t, s.RecordNotifyAttempt(ctx, []int64{h.ID}, "r1", store.NotifyAttempt{State: store.DeliveryPending, At: at(2e9),
		NextAt: at(30e9), Error: "down", Status: 503}), "a failed attempt")
	heads, err = s.NotifyHeads(ctx, at(3e9), 0)
	ok(t, err, "heads")
	same(t, len(heads), 1, "a head waiting for its retry holds its target's line")
	heads, err = s.NotifyHeads(ctx, at(30e9), 0)
	ok(t, err, "heads")
	same(t, len(heads), 2, "heads at the retry")
	// The lease ran out: another takes it over.
	won, err = s.ClaimNotifyDeliveries(ctx, []int64{h.ID}, "r2", at(30e9), at(90e9))
	ok(t, err, "claim")
	same(t, won, true, "claim of a free delivery")
	won, err = s.ClaimNotifyDeliveries(ctx, []int64{h.ID}, "r1", at(91e9), at(150e9))
	ok(t, err, "claim after the lease")
	same(t, won, true, "a claim after the lease ran out")
	ok(t, s.RecordNotifyAttempt(ctx, []int64{h.ID}, "r1", store.NotifyAttempt{State: store.DeliveryDelivered, At: at(92e9),
		MessageID: h.ID, Status: 200}), "delivered")
	n, err := s.NotifyMessagesSince(ctx, "nt_a", at(91e9))
	ok(t, err, "messages")
	same(t, n, 1, "messages sent")
	dead := pend[1]
	won, err = s.ClaimNotifyDeliveries(ctx, []int64{dead.ID}, "r1", at(93e9), at(150e9))
	ok(t, err, "claim")
	same(t, won, true, "claim")
	ok(t, s.RecordNotifyAttempt(ctx, []int64{dead.ID}, "r1", store.NotifyAttempt{State: store.DeliveryDead, At: at(94e9),
		Error: "not retried: 404", Status: 404}), "dead")
	dl, err := s.NotifyDeliveries(ctx, store.NotifyDeliveryFilter{State: store.DeliveryDead})
	ok(t, err, "dead letters")
	same(t, len(dl), 1, "dead letters")
	same(t, [2]any{dl[0].LastError, dl[0].LastStatus}, [2]any{"not retried: 404", 404}, "why")
	_, err = s.RetryNotifyDelivery(ctx, h.ID, at(95e9))
	wantKind(t, err, errs.Conflict, "retry a delivered one")
	r, err := s.RetryNotifyDelivery(ctx, dead.ID, at(95e9))
	ok(t, err, "retry")
	same(t, [2]any{r.State, r.Attempts}, [2]any{store.DeliveryPending, 0}, "retried")
	ok(t, s.DeleteNotifyTarget(ctx, "nt_a"), "delete a target with deliveries")
}

// testNotifyLeases: one holder at a time; the state goes with the lease.
func testNotifyLeases(t *testing.T, s store.Store) {
	ctx := t.Context()
	st, mine, err := s.TakeNotifyLease(ctx, "health:1", "r1", at(0), at(45e9))
	ok(t, err, "take")
	same(t, [2]any{st, mine}, [2]any{"", true}, "a new lease")
	ok(t, s.SetNotifyLeaseState(ctx, "health:1", "r1", `{"x":1}`), "state")
	_, mine, err = s.TakeNotifyLease(ctx, "health:1", "r2", at(10e9), at(55e9))
	ok(t, err, "take held")
	same(t, mine, false, "another's live lease")
	wantKind(t, s.SetNotifyLeaseState(ctx, "health:1", "r2", "y"), errs.Conflict, "state by who does not hold it")
	st, mine, err = s.TakeNotifyLease(ctx, "health:1", "r2", at(45e9), at(90e9))
	ok(t, err, "take after")
	same(t, [2]any{st, mine}, [2]any{`{"x":1}`, true}, "taken over with its state")
}

// testNotifyReseal: a rotation of the key file reseals the targets' secrets
// too, each named by its target (its additional data), and leaves a target
// without a secret alone.
func testNotifyReseal(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.CreateNotifyTarget(ctx, store.NotifyTarget{ID: "nt_a", Name: "a", Kind: "webhook", Endpoint: "https://x", SecretSealed: []byte("sa")})
	ok(t, err, "target a")
	_, err = s.CreateNotifyTarget(ctx, store.NotifyTarget{ID: "nt_b", Name: "b", Kind: "slack", Endpoint: "https://y"})
	ok(t, err, "target b")
	var seen []store.SealedSecret
	n, err := s.ResealSecrets(ctx, func(sec store.SealedSecret) ([]byte, error) {
		seen = append(seen, sec)
		return append([]byte("new-"), sec.Value...), nil
	})
	ok(t, err, "reseal")
	same(t, n, 1, "values replaced")
	same(t, seen, []store.SealedSecret{{Kind: store.SealedNotifySecret, Row: "nt_a", Name: "nt_a", Value: []byte("sa")}}, "secrets handed over")
	a, err := s.NotifyTargetByID(ctx, "nt_a")
	ok(t, err, "read a")
	same(t, a.SecretSealed, []byte("new-sa"), "resealed")
}
