package operations

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/notify"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/vmops"
)

// The scheduler: one driver per operation this process holds. A driver starts
// pending items in order while fewer than MaxParallel of the operation's items
// are at PVE (started and not yet seen ended: the bound holds at PVE, since a
// task ends there before vmgate sees it end), writes each item's end, and ends
// the operation. It renews the operation's lease every third of its length; a
// driver that cannot (the store is gone, or another process took the operation
// over) stops at once, leaving its items' tasks to run on in PVE and to be
// followed by whoever drives the operation next, from their task rows.

// driver is one operation driven by this process.
type driver struct {
	kick chan struct{} // something changed: cancel requested
}

// Run drives operations until ctx ends: every Scan it looks for unfinished
// operations that nobody holds (their lease ran out: their process died or
// stopped) and takes them over. Operations this process creates are driven at
// once, without waiting for it. Run returns when ctx ends or Close is called.
func (o *Service) Run(ctx context.Context) error {
	t := time.NewTicker(o.scan)
	defer t.Stop()
	for {
		o.pickUp(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-o.bgCtx.Done():
			return nil
		case <-t.C:
		case <-o.wake:
		}
	}
}

// pickUp takes over every unfinished operation whose lease ran out, and those
// this process holds but no longer drives (its driver gave up on a store failure).
func (o *Service) pickUp(ctx context.Context) {
	ops, err := o.st.UnfinishedOperations(ctx)
	if err != nil {
		if ctx.Err() == nil {
			o.log.Warn("reading unfinished operations failed", slog.String("error", err.Error()))
		}
		return
	}
	now := o.svc.Now()
	for _, op := range ops {
		if o.isDriving(op.ID) || op.Owner != o.owner && now.Before(op.LeaseExpiresAt) {
			continue
		}
		taken, ok, err := o.st.TakeOverOperation(ctx, op.ID, o.owner, now, now.Add(o.lease))
		if err != nil {
			o.log.Warn("taking over an operation failed", slog.Int64("operation", op.ID), slog.String("error", err.Error()))
			continue
		}
		if !ok {
			continue
		}
		if op.Owner != o.owner {
			o.log.Info("took over an operation whose lease ran out", slog.Int64("operation", op.ID),
				slog.String("from", op.Owner))
		}
		o.startDriver(taken)
	}
}

func (o *Service) isDriving(id int64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.driving[id] != nil
}

// startDriver drives op in the background, unless this process drives it already.
func (o *Service) startDriver(op store.Operation) {
	o.mu.Lock()
	if o.driving[op.ID] != nil || o.bgCtx.Err() != nil {
		o.mu.Unlock()
		return
	}
	d := &driver{kick: make(chan struct{}, 1)}
	o.driving[op.ID] = d
	o.bg.Add(1)
	o.mu.Unlock()
	go func() {
		defer o.bg.Done()
		defer func() {
			o.mu.Lock()
			delete(o.driving, op.ID)
			o.mu.Unlock()
		}()
		if op.Kind == KindRolling {
			o.driveRolling(op, d)
			return
		}
		o.drive(op, d)
	}()
}

// kick tells the driver of operation id, if this process has it, to look at it
// now (a cancel).
func (o *Service) kick(id int64) {
	o.mu.Lock()
	d := o.driving[id]
	o.mu.Unlock()
	if d == nil {
		return
	}
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// itemResult is an item's end as its goroutine saw it.
type itemResult struct {
	index int
	from  string // ItemRunning, or ItemPending for an item refused before it started
	state string // ItemOK or ItemFailed
	err   string
	upid  string
}

// drive runs one operation to its end, or until its lease is lost or the
// service closes.
func (o *Service) drive(held store.Operation, d *driver) {
	ctx, cancel := context.WithCancel(o.bgCtx)
	defer cancel()
	log := o.log.With(slog.Int64("operation", held.ID))
	lost := make(chan struct{})
	go o.heartbeat(ctx, held.ID, held.LeaseExpiresAt, lost)

	op, err := o.st.OperationByID(ctx, held.ID)
	if err != nil {
		log.Warn("reading the operation failed", slog.String("error", err.Error()))
		return
	}
	if op.Status == StatusPlanned {
		if err := o.st.SetOperationStatus(ctx, op.ID, o.owner, StatusRunning, o.svc.Now()); err != nil {
			log.Warn("starting the operation failed", slog.String("error", err.Error()))
			return
		}
	}
	params := paramsOf(op)
	results := make(chan itemResult, len(op.Items))
	inflight := 0
	launch := func(run func(context.Context) itemResult) {
		inflight++
		o.addInFlight(1)
		go func() {
			r := run(ctx)
			o.addInFlight(-1)
			results <- r
		}()
	}
	var pending []int
	for _, it := range op.Items {
		switch it.State {
		case ItemRunning:
			// Started by this or an earlier driver: follow its task row, never
			// start it again.
			launch(func(ctx context.Context) itemResult { return o.followItem(ctx, op, it, params) })
		case ItemPending:
			pending = append(pending, it.Index)
		}
	}
	stopping := ""
	aborted := map[int]bool{}
	// look reads the operation again for a cancel (a passing store failure: the
	// next tick looks again). op itself stays as read: the items' goroutines share it.
	look := func() {
		cur, err := o.st.OperationByID(ctx, op.ID)
		if err != nil || cur.CancelRequestedAt.IsZero() {
			return
		}
		if stopping == "" {
			stopping = "not started: the operation was cancelled"
		}
		if cur.Abort {
			o.abortRunning(ctx, cur, aborted)
		}
	}
	look()
	next := 0
	tick := time.NewTicker(o.svc.PollInterval())
	defer tick.Stop()
	for {
		for stopping == "" && next < len(pending) && inflight < op.MaxParallel {
			it := op.Items[pending[next]]
			next++
			launch(func(ctx context.Context) itemResult { return o.runItem(ctx, op, it, params) })
		}
		if inflight == 0 && (stopping != "" || next == len(pending)) {
			break
		}
		select {
		case r := <-results:
			inflight--
			it := op.Items[r.index]
			if aborted[r.index] && r.state == ItemFailed {
				r.err = "aborted on request: " + r.err
			}
			if r.from == "" {
				r.from = ItemRunning
			}
			err := o.st.UpdateOperationItems(ctx, op.ID, o.owner, []store.ItemChange{{Index: r.index, From: r.from,
				State: r.state, Error: truncateText(r.err, 1000), EndedAt: o.svc.Now()}})
			if err != nil {
				// Lost the lease, or the store failed: whoever drives the
				// operation next reads the item's end from its task.
				log.Warn("recording an item's end failed; leaving the operation", slog.String("error", err.Error()))
				return
			}
			it.State, it.Error = r.state, r.err
			o.auditItem(ctx, op, it, r.upid)
			if r.state == ItemFailed && params.StopOnError && stopping == "" {
				stopping = "not started: an earlier item failed (stopOnError)"
			}
		case <-tick.C:
			look()
		case <-d.kick:
			look()
		case <-lost:
			log.Warn("the operation's lease is lost; leaving it to its new holder")
			return
		case <-ctx.Done():
			return
		}
	}
	o.finish(ctx, op, pending[next:], stopping, log)
}

// finish skips the items that never started and gives the operation its final
// status.
func (o *Service) finish(ctx context.Context, op store.Operation, left []int, why string, log *slog.Logger) {
	now := o.svc.Now()
	if len(left) > 0 {
		changes := make([]store.ItemChange, 0, len(left))
		for _, i := range left {
			changes = append(changes, store.ItemChange{Index: i, From: ItemPending, State: ItemSkipped, Error: why, EndedAt: now})
		}
		if err := o.st.UpdateOperationItems(ctx, op.ID, o.owner, changes); err != nil {
			log.Warn("skipping the items left failed", slog.String("error", err.Error()))
			return
		}
		for _, i := range left {
			it := op.Items[i]
			it.State, it.Error = ItemSkipped, why
			o.auditItem(ctx, op, it, "")
		}
	}
	cur, err := o.st.OperationByID(ctx, op.ID)
	if err != nil {
		log.Warn("reading the operation failed", slog.String("error", err.Error()))
		return
	}
	var c Counts
	for _, it := range cur.Items {
		c.add(it.State)
	}
	status := StatusDone
	switch {
	case !cur.CancelRequestedAt.IsZero():
		status = StatusCancelled
	case c.Failed > 0 && c.OK > 0:
		status = StatusPartial
	case c.Failed > 0:
		status = StatusFailed
	case c.Skipped > 0 && (op.Kind == KindEvacuate || op.Kind == KindMaintenanceEnter || op.Kind == KindMaintenanceLeave):
		// Guests are left on the node: "done" would say it is empty.
		status = StatusDoneWithSkips
	}
	// The notification is written with the operation's end (issue 24).
	ended := store.WithOutbox(ctx, notify.OperationFinished(op, status, c.Total, c.OK, c.Failed, c.Skipped, now))
	if err := o.st.SetOperationStatus(ended, op.ID, o.owner, status, now); err != nil {
		log.Warn("ending the operation failed", slog.String("error", err.Error()))
		return
	}
	o.mu.Lock()
	o.ended[[2]string{op.Kind, status}]++
	o.mu.Unlock()
	o.trail.Append(ctx, store.AuditRecord{At: now, UserID: op.UserID, UserEmail: op.UserEmail,
		Action: "operation.finished", ClusterID: op.ClusterID, Node: op.Node, Target: "operation:" + strconv.FormatInt(op.ID, 10),
		Params: jsonText(map[string]any{"kind": op.Kind, "total": c.Total, "ok": c.OK, "failed": c.Failed,
			"skipped": c.Skipped}), Result: status})
	log.Info("operation ended", slog.String("status", status), slog.Int("ok", c.OK), slog.Int("failed", c.Failed),
		slog.Int("skipped", c.Skipped))
}

func (o *Service) addInFlight(n int) {
	o.mu.Lock()
	o.inFlight += n
	o.mu.Unlock()
}

// heartbeat renews the lease every third of its length until ctx ends; when it
// cannot (another process holds the operation, or the store failed until the
// lease ran out) it closes lost.
// After a failed renewal (the store away, a failover) it tries again every
// store.LeaseRetry, so that a lease outlasts an outage shorter than two thirds of
// it (docs/decisions/0118).
func (o *Service) heartbeat(ctx context.Context, id int64, until time.Time, lost chan<- struct{}) {
	every := o.lease / 3
	wait := every
	for {
		if sleep(ctx, wait) != nil {
			return
		}
		wait = every
		next := o.svc.Now().Add(o.lease)
		err := o.st.RenewOperationLease(ctx, id, o.owner, next)
		switch {
		case err == nil:
			until = next
		case ctx.Err() != nil:
			return
		case errs.KindOf(err) == errs.Conflict || errs.KindOf(err) == errs.NotFound || !o.svc.Now().Before(until):
			close(lost)
			return
		default:
			wait = min(every, store.LeaseRetry)
		}
	}
}

// runItem starts one item through the use case a single request would use —
// Migrate or a power operation, with all their checks, as the operation's
// creator — and follows its task to the end. The item's task row is written by
// StartOperationItem (createTaskRow) before PVE is called.
func (o *Service) runItem(ctx context.Context, op store.Operation, it store.OperationItem, p opParams) itemResult {
	b := &vmops.Item{OperationID: op.ID, Owner: o.owner, Index: it.Index}
	err := o.startItem(ctx, op, it, p, b)
	row, started := b.Row()
	if !started {
		if err == nil {
			err = errors.New("it was not started")
		}
		// Refused before its task row was written (the VM's state, the target,
		// PVE's pre-check): the item never started. A Conflict from the store
		// means another driver has it; then this one stops anyway.
		return itemResult{index: it.Index, from: ItemPending, state: ItemFailed, err: errMessage(err).Error()}
	}
	it.TaskID = row.ID
	return o.afterStart(ctx, op, it, p, err)
}

// startItem runs the item's use case once, its task row bound to the item by b.
func (o *Service) startItem(ctx context.Context, op store.Operation, it store.OperationItem, p opParams, b *vmops.Item) error {
	a := vmops.Actor{UserID: op.UserID, Email: op.UserEmail, Item: b}
	ref := vmops.GuestRef{ClusterID: op.ClusterID, Node: it.Node, Kind: vmops.GuestKind(it.GuestKind), VMID: it.VMID}
	act := vmops.Action{Op: it.Action, Target: it.Target, Online: it.Online, WithLocalDisks: p.WithLocalDisks}
	if ref.Kind == vmops.GuestCT {
		// A running container moves by a restart migration, never live.
		act.Online, act.Restart, act.Timeout, act.WithLocalDisks = false, it.Online, p.Timeout, false
	}
	return o.svc.Act(ctx, a, ref, act)
}

// afterStart follows an item whose task row was written: when the call failed
// and the row is lost it ends here (or is retried), otherwise its task is
// followed (an unknown outcome's row is searched for meanwhile).
func (o *Service) afterStart(ctx context.Context, op store.Operation, it store.OperationItem, p opParams, err error) itemResult {
	if err != nil {
		if row, rerr := o.st.TaskByID(context.WithoutCancel(ctx), it.TaskID); rerr == nil && row.Status == store.TaskLost {
			if retryable(row) && it.Retries == 0 {
				return o.retryItem(ctx, op, it, p, row)
			}
			return itemResult{index: it.Index, state: ItemFailed, err: retried(it, errMessage(err).Error())}
		}
	}
	return o.followItem(ctx, op, it, p)
}

// retried says why an item failed, and that it was made twice when it was.
func retried(it store.OperationItem, msg string) string {
	if it.Retries > 0 {
		return "retried once: " + msg
	}
	return msg
}

// retryable reports whether a lost row proves that its request started no task:
// its POST never reached PVE, or PVE's task list, read after the search window,
// has none that can be it. Only then may an operation make the request again.
func retryable(row store.Task) bool {
	return row.Status == store.TaskLost && row.UPID == "" &&
		(row.LostReason == store.LostNotSent || row.LostReason == store.LostNoTask)
}

// retryItem makes an item's request again, once, after its first task row was
// proven never to have started a task (retryable): a new request through the
// same use case and checks, its task row written by RetryOperationItem in place
// of the lost one; audited as operation.retry. It keeps the item's parallel
// slot, as the first attempt did.
func (o *Service) retryItem(ctx context.Context, op store.Operation, it store.OperationItem, p opParams, lost store.Task) itemResult {
	o.log.Info("an item's request provably started nothing; making it again", slog.Int64("operation", op.ID),
		slog.Int("item", it.Index), slog.Int64("lost", lost.ID), slog.String("reason", lost.LostReason))
	b := &vmops.Item{OperationID: op.ID, Owner: o.owner, Index: it.Index, RetryOf: lost.ID}
	err := o.startItem(ctx, op, it, p, b)
	row, started := b.Row()
	rec := store.AuditRecord{At: o.svc.Now(), UserID: op.UserID, UserEmail: op.UserEmail, Action: "operation.retry",
		ClusterID: op.ClusterID, Node: it.Node, VMID: it.VMID, Target: it.Target,
		Params: jsonText(map[string]any{"operationId": op.ID, "action": it.Action, "lostTaskRef": lost.ID,
			"lostReason": lost.LostReason}), Result: audit.Result(err)}
	if started {
		rec.Params = jsonText(map[string]any{"operationId": op.ID, "action": it.Action, "lostTaskRef": lost.ID,
			"lostReason": lost.LostReason, "taskRef": row.ID})
	}
	o.trail.Append(ctx, rec)
	if !started {
		if err == nil {
			err = errors.New("it was not started again")
		}
		// Refused before a new row (the VM's state now, the store): the item's
		// first request started nothing, and neither did this one.
		it.Retries++
		return itemResult{index: it.Index, state: ItemFailed, err: retried(it, errMessage(err).Error())}
	}
	it.TaskID, it.Retries = row.ID, it.Retries+1
	return o.afterStart(ctx, op, it, p, err)
}

// followItem follows a started item's task row to its end: the UPID once it is
// recorded (by the call, or by the search that looks for it in PVE's task list),
// then the task itself, an HA stand-in to the HA stack's real task. A row left
// pending by a process that died is searched for at once; a row lost without a
// task that provably never started one is retried once (retryItem).
func (o *Service) followItem(ctx context.Context, op store.Operation, it store.OperationItem, p opParams) itemResult {
	var row store.Task
	first := true
	for {
		if row.UPID == "" {
			r, err := o.st.TaskByID(ctx, it.TaskID)
			switch {
			case err != nil:
			case r.Finished() && r.UPID == "":
				if retryable(r) && it.Retries == 0 {
					return o.retryItem(ctx, op, it, p, r)
				}
				msg := r.Error
				if msg == "" {
					msg = "PVE has no task for it: the call did not reach PVE"
				}
				return itemResult{index: it.Index, state: ItemFailed, err: retried(it, msg)}
			case r.UPID == "":
				if first {
					// Its writer is gone (this driver took the operation over) or
					// its outcome is unknown: look for it now, not at the next sweep.
					o.svc.SearchItemTask(ctx, r)
				}
			default:
				row = r
			}
			first = false
		}
		if row.UPID != "" {
			v, ok, err := o.svc.ItemTask(ctx, row)
			if err == nil && ok && v.Finished() {
				r := itemResult{index: it.Index, state: ItemOK, upid: v.TaskID}
				if v.Result == vmops.ResultFailed {
					r.state, r.err = ItemFailed, itemError(v)
				}
				return r
			}
		}
		if sleep(ctx, o.svc.PollInterval()) != nil {
			return itemResult{index: it.Index, state: ItemFailed, err: "vmgate stopped following it"}
		}
	}
}

// itemError says why an item's task failed.
func itemError(v vmops.TaskView) string {
	msg := "PVE task failed: " + v.ExitStatus
	if v.Error != "" && v.Error != v.ExitStatus {
		msg += " (" + v.Error + ")"
	}
	return msg
}

// abortRunning stops the running migrations of op through PVE (DELETE on the
// task: PVE's worker gets SIGTERM and aborts the migration, or, once the VM has
// moved, finishes it), once each. An HA migration is stopped through the HA
// stack's task once it is known.
func (o *Service) abortRunning(ctx context.Context, op store.Operation, done map[int]bool) {
	var api vmops.PVE
	for _, it := range op.Items {
		if it.State != ItemRunning || it.Action != vmops.OpMigrate || done[it.Index] || it.UPID == "" {
			continue
		}
		target := it.UPID
		if u, err := pve.ParseUPID(it.UPID); err == nil && u.Type == "hamigrate" {
			if it.FollowUPID == "" {
				continue // the HA stack has not started it yet; look again
			}
			target = it.FollowUPID
		}
		u, err := pve.ParseUPID(target)
		if err != nil {
			continue
		}
		if api == nil {
			if api, err = o.svc.Connect(ctx, op.ClusterID); err != nil {
				return
			}
		}
		err = api.StopTask(ctx, u)
		if err != nil && !errors.Is(err, context.Canceled) {
			o.log.Warn("stopping a migration failed", slog.Int64("operation", op.ID), slog.String("upid", target),
				slog.String("error", err.Error()))
			continue
		}
		done[it.Index] = true
		o.trail.Append(ctx, store.AuditRecord{At: o.svc.Now(), UserID: op.UserID, UserEmail: op.UserEmail,
			Action: "operation.abort", ClusterID: op.ClusterID, Node: it.Node, VMID: it.VMID, Target: it.Target,
			Params: jsonText(map[string]any{"operationId": op.ID}), Result: "ok", UPID: target})
	}
}
