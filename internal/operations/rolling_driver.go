package operations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/notify"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/vmops"
)

// The driver of a rolling maintenance: one step at a time, its progress
// written to the store after each, so that whoever drives it next (a restart, a
// replica that took the lease over) resumes at the step it stopped at.
//
// Each step either completes (the node moves to its next step), waits (a child
// operation, the node's way back, a gate: looked at again after a poll
// interval), or fails (pauses the operation with pauseOnFailure, else ends it
// failed). A failure's words are PVE's where PVE said something.

// stepFailure is a step that failed: the operation pauses or fails with msg.
type stepFailure struct{ msg string }

func (f *stepFailure) Error() string { return f.msg }

func failed(format string, args ...any) error { return &stepFailure{msg: fmt.Sprintf(format, args...)} }

// errWait says a step is not done yet: look again after a poll interval.
var errWait = errors.New("waiting")

// errLost says the driver lost the operation (its lease, or the store).
var errLost = errors.New("lost the operation")

// roller drives one rolling maintenance.
type roller struct {
	o      *Service
	op     store.Operation
	params rollingParams
	prog   rollingProgress
	log    *slog.Logger
	d      *driver
	// resumed is set when a person resumed the operation: the current step
	// accepts what stopped it (a drain that left guests) or starts its bound
	// again (a gate, the wait).
	resumed bool
}

// driveRolling runs a rolling maintenance to its end, or until its lease is
// lost or the service closes.
func (o *Service) driveRolling(held store.Operation, d *driver) {
	ctx, cancel := context.WithCancel(o.bgCtx)
	defer cancel()
	log := o.log.With(slog.Int64("operation", held.ID), slog.String("kind", KindRolling))
	lost := make(chan struct{})
	go o.heartbeat(ctx, held.ID, held.LeaseExpiresAt, lost)
	go func() {
		select {
		case <-lost:
			log.Warn("the operation's lease is lost; leaving it to its new holder")
			cancel()
		case <-ctx.Done():
		}
	}()
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
	r := &roller{o: o, op: op, log: log, d: d}
	if err := json.Unmarshal([]byte(op.Params), &r.params); err != nil {
		log.Error("a rolling maintenance's request cannot be read", slog.String("error", err.Error()))
		return
	}
	if err := json.Unmarshal([]byte(op.Progress), &r.prog); err != nil {
		log.Error("a rolling maintenance's progress cannot be read", slog.String("error", err.Error()))
		return
	}
	// Each driver names itself: a take-over shows in the log.
	r.note("", "driven by "+o.owner)
	r.run(ctx)
}

// run is the driver's loop.
func (r *roller) run(ctx context.Context) {
	o := r.o
	for ctx.Err() == nil {
		cur, err := o.st.OperationByID(ctx, r.op.ID)
		if err != nil {
			if r.pause(ctx) != nil {
				return
			}
			continue
		}
		if !cur.CancelRequestedAt.IsZero() {
			r.note("", "cancelled on request; the node in maintenance stays in it")
			r.end(ctx, StatusCancelled)
			return
		}
		if cur.PauseRequested {
			if r.prog.Paused == "" {
				r.prog.Paused = "paused on request"
				r.note("", "paused on request")
				if r.save(ctx) != nil {
					return
				}
			}
			if r.pause(ctx) != nil {
				return
			}
			continue
		}
		if r.prog.Paused != "" {
			r.prog.Paused, r.resumed = "", true
			if n := r.current(); n != nil {
				n.StepSince, n.Error = o.svc.Now(), ""
			}
			r.note("", "resumed")
			if r.save(ctx) != nil {
				return
			}
		}
		n := r.current()
		if n == nil {
			r.finishAll(ctx)
			return
		}
		err = r.step(ctx, n)
		var f *stepFailure
		switch {
		case err == nil:
		case errors.Is(err, errWait):
			if r.pause(ctx) != nil {
				return
			}
		case errors.As(err, &f):
			n.Error = f.msg
			r.note(n.Node, "step "+n.Step+" failed: "+f.msg)
			if !r.params.PauseOnFailure {
				if r.save(ctx) == nil {
					r.end(ctx, StatusFailed)
				}
				return
			}
			r.prog.Paused = "node " + n.Node + ", step " + n.Step + ": " + f.msg
			// operation.paused is written with the progress that says so (issue 24).
			now := o.svc.Now()
			if r.save(store.WithOutbox(ctx, notify.OperationPaused(r.op, r.prog.Paused, now))) != nil {
				return
			}
			o.trail.Append(ctx, store.AuditRecord{At: now, UserID: r.op.UserID, UserEmail: r.op.UserEmail,
				Action: "operation.paused", ClusterID: r.op.ClusterID, Node: n.Node,
				Target: "operation:" + strconv.FormatInt(r.op.ID, 10),
				Params: jsonText(map[string]any{"kind": KindRolling, "step": n.Step, "error": f.msg}), Result: "paused"})
			if _, err := o.st.SetOperationPause(ctx, r.op.ID, true, o.svc.Now()); err != nil && ctx.Err() == nil {
				r.log.Warn("pausing the operation failed", slog.String("error", err.Error()))
			}
		default:
			if ctx.Err() != nil || errors.Is(err, errLost) {
				return
			}
			r.log.Warn("a step of the rolling maintenance failed to run; trying again", slog.String("node", n.Node),
				slog.String("step", n.Step), slog.String("error", err.Error()))
			if r.pause(ctx) != nil {
				return
			}
		}
	}
}

// pause waits a poll interval, or until kicked (a pause, resume or cancel).
func (r *roller) pause(ctx context.Context) error {
	t := time.NewTimer(r.o.svc.PollInterval())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	case <-r.d.kick:
	}
	return nil
}

// current is the first node that is not done; nil when all are.
func (r *roller) current() *rollingNode {
	for _, n := range r.prog.Nodes {
		if n.Step != stepDone {
			return n
		}
	}
	return nil
}

// note adds a line to the operation's log (saved with the next save).
func (r *roller) note(node, text string) {
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		r.prog.Log = append(r.prog.Log, logLine{At: r.o.svc.Now(), Node: node, Text: truncateText(line, 500)})
	}
	if extra := len(r.prog.Log) - maxLogLines; extra > 0 {
		r.prog.Log = append(r.prog.Log[:0], r.prog.Log[extra:]...)
	}
}

// save writes the progress; a Conflict means another process holds the
// operation now (errLost).
func (r *roller) save(ctx context.Context) error {
	err := r.o.st.SetOperationProgress(ctx, r.op.ID, r.o.owner, jsonText(r.prog))
	if err == nil {
		return nil
	}
	if errs.KindOf(err) == errs.Conflict || errs.KindOf(err) == errs.NotFound {
		return errLost
	}
	return err
}

// advance moves n to step, saved.
func (r *roller) advance(ctx context.Context, n *rollingNode, step string) error {
	n.Step, n.StepSince, n.Error, r.resumed = step, r.o.svc.Now(), "", false
	if step == stepDone {
		n.EndedAt = n.StepSince
		r.note(n.Node, "done")
	}
	return r.save(ctx)
}

// actor is the operation's creator, as its children act for them, under the
// Idempotency-Key key of the child (so that a driver that died after creating
// it finds it instead of creating a second one).
func (r *roller) actor(key string) vmops.Actor {
	return vmops.Actor{UserID: r.op.UserID, Email: r.op.UserEmail, Key: key}
}

// childKey is the Idempotency-Key of node's child operation of kind.
func (r *roller) childKey(node, kind string) string {
	return "rolling-" + strconv.FormatInt(r.op.ID, 10) + "-" + node + "-" + kind
}

// child finds the child operation key names, 0 when none exists.
func (r *roller) child(ctx context.Context, key string) (int64, error) {
	op, err := r.o.st.OperationByIdempotencyKey(ctx, r.op.UserID, key)
	switch {
	case errs.KindOf(err) == errs.NotFound:
		return 0, nil
	case err != nil:
		return 0, err
	}
	return op.ID, nil
}

// step runs n's current step once.
func (r *roller) step(ctx context.Context, n *rollingNode) error {
	o := r.o
	switch n.Step {
	case stepPending:
		n.StartedAt = o.svc.Now()
		r.note(n.Node, "maintenance begins")
		return r.advance(ctx, n, stepDrain)
	case stepDrain:
		return r.drain(ctx, n)
	case stepHook:
		return r.hook(ctx, n)
	case stepReboot:
		return r.reboot(ctx, n)
	case stepWait:
		return r.waitBack(ctx, n)
	case stepGates:
		why, err := r.gates(ctx, "")
		if err != nil {
			return err
		}
		if why != "" {
			return r.bounded(n, o.gateTimeout, "the health gates did not pass within %s: %s", why)
		}
		r.note(n.Node, "health gates passed")
		return r.advance(ctx, n, stepRestore)
	case stepRestore:
		return r.restore(ctx, n)
	}
	return failed("unknown step %q", n.Step)
}

// bounded fails the step once it has taken longer than bound, else waits.
func (r *roller) bounded(n *rollingNode, bound time.Duration, format, why string) error {
	if r.o.svc.Now().Sub(n.StepSince) > bound {
		return failed(format, bound, why)
	}
	return errWait
}

// drain empties n's node through a maintenance_enter operation of its own.
func (r *roller) drain(ctx context.Context, n *rollingNode) error {
	o := r.o
	if n.EnterOp == 0 {
		key := r.childKey(n.Node, "enter")
		id, err := r.child(ctx, key)
		if err != nil {
			return err
		}
		if id == 0 {
			l, err := o.enterMaintenance(ctx, r.actor(key), r.op.ClusterID, n.Node, MaintenanceRequest{
				MaxParallel: r.op.MaxParallel, WithLocalDisks: r.params.WithLocalDisks})
			if err != nil {
				if vmops.Transient(err) {
					return err
				}
				return failed("entering maintenance was refused: %s", errMessage(err))
			}
			id = l.OperationID
			r.note(n.Node, fmt.Sprintf("draining: operation %d, %d guests to move", id, pendingCount(l.Plan)))
		}
		n.EnterOp = id
		if err := r.save(ctx); err != nil {
			return err
		}
	}
	child, err := o.st.OperationByID(ctx, n.EnterOp)
	if err != nil {
		return err
	}
	if !child.Finished() {
		return errWait
	}
	v := o.view(child)
	switch {
	case child.Status == StatusDone, child.Status == StatusDoneWithSkips && !hasFailed(v), r.resumed:
		for _, g := range v.Left {
			r.note(n.Node, fmt.Sprintf("left on the node: %s %d: %s", g.Kind.Noun(), g.VMID, g.Why))
		}
		r.note(n.Node, fmt.Sprintf("drained (operation %d %s: %d moved)", child.ID, child.Status, v.Counts.OK))
		return r.advance(ctx, n, stepHook)
	}
	return failed("the drain (operation %d) ended %s: %d failed, %d left; resume to go on with what is left on the node",
		child.ID, child.Status, v.Counts.Failed, len(v.Left))
}

// hasFailed reports whether an operation has a failed item.
func hasFailed(v View) bool { return v.Counts.Failed > 0 }

// pendingCount counts a plan's pending items.
func pendingCount(p Plan) int {
	n := 0
	for _, it := range p.Items {
		if it.State == ItemPending {
			n++
		}
	}
	return n
}

// hook runs the configured hook for n's node (hooks.go).
func (r *roller) hook(ctx context.Context, n *rollingNode) error {
	if r.params.Hook == "" {
		return r.advance(ctx, n, stepReboot)
	}
	command, ok := r.o.hook(r.params.Hook)
	if !ok {
		return failed("hook %q is not configured on this vmgate (%s); every replica needs the same hooks", r.params.Hook, r.o.owner)
	}
	api, err := r.o.maintAPI(ctx, r.op.ClusterID)
	if err != nil {
		return err
	}
	addr := ""
	if cs, err := api.ClusterStatus(ctx); err == nil {
		for _, e := range cs {
			if e.Type == "node" && e.Name == n.Node {
				addr = e.IP
			}
		}
	}
	r.note(n.Node, "hook "+r.params.Hook+" runs")
	if err := r.save(ctx); err != nil {
		return err
	}
	env := map[string]string{"VMGATE_CLUSTER": strconv.FormatInt(r.op.ClusterID, 10), "VMGATE_NODE": n.Node,
		"VMGATE_NODE_ADDRESS": addr, "VMGATE_OPERATION": strconv.FormatInt(r.op.ID, 10)}
	last, err := runHook(ctx, command, env, r.o.hookTimeout, func(line string) { r.note(n.Node, "hook: "+line) })
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		if serr := r.save(ctx); serr != nil {
			return serr
		}
		return failed("hook %s: %v", r.params.Hook, err)
	}
	n.HookSaidReboot = strings.TrimSpace(last) == "reboot-required"
	r.note(n.Node, "hook "+r.params.Hook+" ended ok")
	return r.advance(ctx, n, stepReboot)
}

// reboot decides whether n's node reboots and, if so, passes the gates, sets
// Ceph's noout and asks PVE — recording when before asking, and asking a node
// at most once unless its uptime proves the first request never reached it.
func (r *roller) reboot(ctx context.Context, n *rollingNode) error {
	o := r.o
	api, err := o.maintAPI(ctx, r.op.ClusterID)
	if err != nil {
		return err
	}
	if n.Reboot == nil {
		yes, why := o.rebootDecision(ctx, api, n.Node, r.params.Reboot, false, n.HookSaidReboot)
		n.Reboot, n.RebootWhy = &yes, why
		r.note(n.Node, map[bool]string{true: "reboots: ", false: "does not reboot: "}[yes]+why)
		if err := r.save(ctx); err != nil {
			return err
		}
	}
	if !*n.Reboot {
		return r.advance(ctx, n, stepGates)
	}
	if !n.RebootSentAt.IsZero() {
		return r.advance(ctx, n, stepWait)
	}
	if !n.RebootAskedAt.IsZero() {
		// A driver asked and died before it knew PVE took it: the node's
		// uptime says whether it rebooted since.
		st, err := api.NodeStatus(ctx, n.Node)
		since := o.svc.Now().Sub(n.RebootAskedAt)
		if err != nil || rebootedSince(n, st, since) {
			n.RebootSentAt = n.RebootAskedAt
			r.note(n.Node, "the reboot asked before this driver took over is under way; not asked again")
			return r.advance(ctx, n, stepWait)
		}
		if since < o.bootTimeout {
			return errWait // PVE may still be stopping what is left on it
		}
		r.note(n.Node, fmt.Sprintf("the node has not rebooted %s after the request; asking once more", since.Round(time.Second)))
	}
	why, err := r.gates(ctx, "")
	if err != nil {
		return err
	}
	if why != "" {
		return r.bounded(n, o.gateTimeout, "the health gates before the reboot did not pass within %s: %s", why)
	}
	if !r.prog.NooutSet {
		flags, err := api.CephFlags(ctx)
		switch {
		case errors.Is(err, pve.ErrNoCeph):
		case err != nil:
			return err
		case !contains(flags, "noout"):
			if err := api.SetCephFlag(ctx, "noout", true); err != nil {
				return failed("setting Ceph's noout failed: %v", err)
			}
			r.prog.NooutSet = true
			r.note("", "Ceph's noout set for the reboots")
		}
	}
	st, err := api.NodeStatus(ctx, n.Node)
	if err != nil {
		return failed("the node's status could not be read before its reboot: %v", err)
	}
	n.UptimeBefore, n.RebootAskedAt = st.Uptime, o.svc.Now()
	if err := r.save(ctx); err != nil {
		return err
	}
	err = api.RebootNode(ctx, n.Node)
	var amb *pve.AmbiguousError
	switch {
	case errors.As(err, &amb):
		r.note(n.Node, "PVE's answer to the reboot was lost; its uptime will tell")
		return errWait
	case err != nil:
		n.RebootAskedAt = time.Time{}
		if serr := r.save(ctx); serr != nil {
			return serr
		}
		return failed("PVE refused the reboot: %v", err)
	}
	n.RebootSentAt = o.svc.Now()
	r.note(n.Node, "reboot asked (uptime was "+(time.Duration(st.Uptime)*time.Second).String()+")")
	return r.advance(ctx, n, stepWait)
}

// rebootedSince reports whether n's node booted after its reboot was asked,
// since ago: its uptime is shorter than that, or than it was just before the
// request (PVE counts uptime on the node's clock, which need not run at
// vmgate's pace: an emulator's runs faster).
func rebootedSince(n *rollingNode, st pve.NodeStatus, since time.Duration) bool {
	up := time.Duration(st.Uptime) * time.Second
	return up < since || st.Uptime < n.UptimeBefore
}

// contains reports whether list has s.
func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// waitBack waits until n's node is back: online in /cluster/status, its own
// endpoint answering, its uptime begun after the reboot was asked.
func (r *roller) waitBack(ctx context.Context, n *rollingNode) error {
	o := r.o
	api, err := o.maintAPI(ctx, r.op.ClusterID)
	if err != nil {
		return err
	}
	since := o.svc.Now().Sub(n.RebootAskedAt)
	why := ""
	online := false
	if cs, err := api.ClusterStatus(ctx); err != nil {
		why = "PVE's cluster status could not be read: " + err.Error()
	} else {
		for _, e := range cs {
			if e.Type == "node" && e.Name == n.Node {
				online = e.Online
			}
		}
		if !online {
			why = "node " + n.Node + " is not online in PVE's cluster status"
		}
	}
	if online {
		st, err := api.NodeStatus(ctx, n.Node)
		switch {
		case err != nil:
			why = "the node does not answer: " + err.Error()
		case !rebootedSince(n, st, since):
			why = fmt.Sprintf("the node has been up %s: it has not rebooted yet", time.Duration(st.Uptime)*time.Second)
		default:
			n.BackAt = o.svc.Now()
			r.note(n.Node, fmt.Sprintf("back after %s (uptime %s)", since.Round(time.Second), time.Duration(st.Uptime)*time.Second))
			return r.advance(ctx, n, stepGates)
		}
	}
	if o.svc.Now().Sub(n.StepSince) > o.bootTimeout {
		return failed("node %s did not come back within %s (--node-boot-timeout): %s", n.Node, o.bootTimeout, why)
	}
	return errWait
}

// gates checks the cluster's health: quorate and every node online; PVE's HA
// manager active and no HA resource in error or fence; where the cluster runs
// Ceph, its health OK apart from the noout flag. It returns "" when every gate
// passes, else which did not, in PVE's words; err only when PVE could not be
// asked at all.
func (r *roller) gates(ctx context.Context, _ string) (string, error) {
	api, err := r.o.maintAPI(ctx, r.op.ClusterID)
	if err != nil {
		return "", err
	}
	cs, err := api.ClusterStatus(ctx)
	if err != nil {
		return "quorum: PVE's cluster status could not be read: " + err.Error(), nil
	}
	var problems []string
	for _, e := range cs {
		switch {
		case e.Type == "cluster" && !e.Quorate:
			problems = append(problems, "quorum: the cluster is not quorate (PVE's /cluster/status: quorate 0)")
		case e.Type == "node" && !e.Online:
			problems = append(problems, "nodes: node "+e.Name+" is offline (PVE's /cluster/status)")
		}
	}
	ha, err := api.HAStatus(ctx)
	if err != nil {
		problems = append(problems, "HA: PVE's HA status could not be read: "+err.Error())
	}
	for _, e := range ha {
		switch {
		case e.Type == "quorum" && !e.Quorate:
			problems = append(problems, "HA: "+e.Status)
		case e.Type == "master" && !strings.Contains(e.Status, "(active") && !strings.Contains(e.Status, "(idle"):
			problems = append(problems, "HA: the manager is not active: "+e.Status)
		case e.Type == "service" && (e.State == "error" || e.State == "fence"):
			problems = append(problems, "HA: resource "+e.SID+" is in "+e.State+": "+e.Status)
		}
	}
	h, err := api.CephStatus(ctx)
	switch {
	case errors.Is(err, pve.ErrNoCeph):
	case err != nil:
		problems = append(problems, "Ceph: its status could not be read: "+err.Error())
	case h.Status != "HEALTH_OK":
		for name, msg := range h.Checks {
			if name == "OSDMAP_FLAGS" && strings.HasPrefix(msg, "noout flag") {
				continue // the flag maintenance sets
			}
			problems = append(problems, "Ceph "+h.Status+": "+name+": "+msg)
		}
	}
	sortStrings(problems)
	return strings.Join(problems, "; "), nil
}

// restore brings n's node out of maintenance: its guests back through a
// maintenance_leave operation of its own, or only the mark cleared.
func (r *roller) restore(ctx context.Context, n *rollingNode) error {
	o := r.o
	if !r.params.Restore {
		if _, err := o.st.ClearNodeMaintenance(ctx, r.op.ClusterID, n.Node, n.EnterOp); err != nil {
			return err
		}
		r.note(n.Node, "out of maintenance; its guests stay where they are (restore off)")
		return r.advance(ctx, n, stepDone)
	}
	if n.LeaveOp == 0 {
		key := r.childKey(n.Node, "leave")
		id, err := r.child(ctx, key)
		if err != nil {
			return err
		}
		if id == 0 {
			l, err := o.leaveMaintenance(ctx, r.actor(key), r.op.ClusterID, n.Node, LeaveRequest{MaxParallel: r.op.MaxParallel})
			if err != nil {
				if vmops.Transient(err) {
					return err
				}
				return failed("leaving maintenance was refused: %s", errMessage(err))
			}
			id = l.OperationID
			r.note(n.Node, fmt.Sprintf("restoring: operation %d, %d guests to bring back", id, pendingCount(l.Plan)))
		}
		n.LeaveOp = id
		if err := r.save(ctx); err != nil {
			return err
		}
	}
	child, err := o.st.OperationByID(ctx, n.LeaveOp)
	if err != nil {
		return err
	}
	if !child.Finished() {
		return errWait
	}
	v := o.view(child)
	if hasFailed(v) && !r.resumed {
		return failed("the restore (operation %d) ended %s: %d failed; resume to go on", child.ID, child.Status, v.Counts.Failed)
	}
	for _, it := range v.Items {
		if it.State == ItemSkipped {
			r.note(n.Node, fmt.Sprintf("not restored: %s %d: %s", it.Kind.Noun(), it.VMID, it.Error))
		}
	}
	r.note(n.Node, fmt.Sprintf("restored (operation %d %s: %d back)", child.ID, child.Status, v.Counts.OK))
	return r.advance(ctx, n, stepDone)
}

// finishAll clears Ceph's noout if this operation set it, and ends the
// operation done.
func (r *roller) finishAll(ctx context.Context) {
	if r.prog.NooutSet {
		api, err := r.o.maintAPI(ctx, r.op.ClusterID)
		if err == nil {
			err = api.SetCephFlag(ctx, "noout", false)
		}
		if err != nil {
			r.note("", "clearing Ceph's noout failed (clear it by hand): "+err.Error())
		} else {
			r.prog.NooutSet = false
			r.note("", "Ceph's noout cleared")
		}
	}
	r.note("", "every node done")
	if r.save(ctx) != nil {
		return
	}
	r.end(ctx, StatusDone)
}

// end gives the operation its final status and audits it.
func (r *roller) end(ctx context.Context, status string) {
	o := r.o
	now := o.svc.Now()
	done, failed := 0, 0
	for _, n := range r.prog.Nodes {
		switch {
		case n.Step == stepDone:
			done++
		case n.Error != "":
			failed++
		}
	}
	// operation.finished is written with the end (issue 24), counted in nodes.
	ended := store.WithOutbox(ctx, notify.OperationFinished(r.op, status, len(r.prog.Nodes), done, failed,
		len(r.prog.Nodes)-done-failed, now))
	if err := o.st.SetOperationStatus(ended, r.op.ID, o.owner, status, now); err != nil {
		r.log.Warn("ending the operation failed", slog.String("error", err.Error()))
		return
	}
	o.mu.Lock()
	o.ended[[2]string{KindRolling, status}]++
	o.mu.Unlock()
	o.trail.Append(ctx, store.AuditRecord{At: now, UserID: r.op.UserID, UserEmail: r.op.UserEmail,
		Action: "operation.finished", ClusterID: r.op.ClusterID, Target: "operation:" + strconv.FormatInt(r.op.ID, 10),
		Params: jsonText(map[string]any{"kind": KindRolling, "nodes": len(r.prog.Nodes), "done": done}), Result: status})
	r.log.Info("operation ended", slog.String("status", status), slog.Int("nodes", len(r.prog.Nodes)), slog.Int("done", done))
}

// sortStrings sorts s in place.
func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
