package webui

import (
	"context"
	"errors"
	"net/http"
	"slices"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/vmops"
)

func validNode(n string) bool { return vmops.ValidNode(n) }

// attempt names what a request tries, for the audit row of a refusal.
func attempt(r *http.Request) string { return "UI " + r.Method + " " + r.URL.Path }

// vmView is a guest's page's data (a VM's or a container's).
type vmView struct {
	VM          vmops.GuestRef
	Noun        string // VM or CT
	Status      fleet.VMStatusView
	ClusterName string
	CanAct      bool // the caller's grant allows power and migration
	Tasks       []vmops.TaskView
	TasksErr    string
	Inline      *inlineTask // the task of ?task=: what a power action started (inline.go)
	// Offer is what the buttons offer: start while stopped; stop, force stop,
	// reboot and migrate while running; a paused VM can only be forced off.
	// Suspend and resume are a VM's only (guestKind.suspend).
	Offer struct{ Start, Stop, ForceStop, Reboot, Migrate, Suspend, Resume, Console bool }
}

// guestPage shows a guest of the kind: its state, the actions the caller's role
// and the guest's state allow, and its recent tasks. A guest that is no longer on
// the node of the address (it migrated) is shown at its new node, and a vmid of
// the other kind at its own kind's page (a task of the HA stack does not say
// which kind it moves).
func (u *UI) guestPage(k guestKind) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		vm, err := pathGuest(r, k.kind)
		if err != nil {
			return err
		}
		canAct := u.canAct(r.Context(), r, vm.ClusterID)
		// The task first: a page that says it ended shows the state after it
		// (liveStatus).
		inline := u.inline(r, vm, r.URL.Query().Get("task"), canAct, r.URL.RequestURI())
		ctx := r.Context()
		if inline != nil && !inline.Running {
			ctx = withTaskEnded(ctx, inline.Task.TaskID)
		}
		st, err := u.fleet.GuestStatus(ctx, actor(r), vm.ClusterID, string(vm.Kind), vm.Node, vm.VMID)
		if err != nil {
			if to := movedTo(vm, err); to != "" {
				u.carryNotice(w, r)
				redirect(w, r, to)
				return nil
			}
			return err
		}
		v := vmView{VM: vm, Noun: noun(vm), Status: st, CanAct: canAct, Inline: inline}
		if v.CanAct {
			running := st.Status == "running"
			paused := running && st.QMPStatus != "" && st.QMPStatus != "running"
			v.Offer.Start = !running
			v.Offer.Stop = running && !paused
			v.Offer.ForceStop = running
			v.Offer.Reboot = running && !paused
			v.Offer.Migrate = true                         // PVE's pre-check says where to; a stopped guest migrates offline
			v.Offer.Console = running && u.consoles != nil // console.go
			if k.suspend {
				v.Offer.Suspend = running && !paused
				v.Offer.Resume = paused || !running && st.Lock == "suspended" // paused, or hibernated
				v.Offer.Start = v.Offer.Start && st.Lock != "suspended"       // a hibernated VM is resumed
			}
		}
		if cs, err := u.fleet.Clusters(r.Context(), actor(r)); err == nil {
			if i := slices.IndexFunc(cs, func(c fleet.ClusterView) bool { return c.ID == vm.ClusterID }); i >= 0 {
				v.ClusterName = cs[i].Name
			}
		}
		if inline != nil && inline.ForceStop {
			v.Offer.ForceStop = false // the task's card offers it: one Force stop on the page
		}
		v.Tasks, err = u.vms.Tasks(r.Context(), vmActor(r), vmops.TaskFilter{ClusterID: vm.ClusterID, VMID: vm.VMID, Limit: 8})
		if err != nil {
			v.TasksErr = errorText(err)
		}
		v.Tasks = u.withOutside(r, v.Tasks, []int64{vm.ClusterID}, vm.VMID, "")
		v.Tasks = v.Tasks[:min(len(v.Tasks), 8)]
		title := guestName(vm)
		if st.Name != "" {
			title += " " + st.Name
		}
		u.render(w, r, http.StatusOK, "vm", u.page(w, r, title, "vms", v))
		return nil
	}
}

// carryNotice keeps a notice for the page a redirect leads to.
func (u *UI) carryNotice(w http.ResponseWriter, r *http.Request) {
	if n := u.takeNotice(w, r); n != nil {
		u.setNotice(w, r, *n)
	}
}

// canAct says whether the caller's grant allows VM actions on the cluster. It only
// asks (fleet.Authorize); a refusal here is no attempt and is not audited.
func (u *UI) canAct(ctx context.Context, r *http.Request, clusterID int64) bool {
	_, err := u.fleet.Authorize(ctx, actor(r), clusterID, fleet.GrantOperator)
	return err == nil
}

// The power actions: each starts the operation through vmops (the operator
// grant, audited when refused; state checks, task, audit) without waiting for
// it, and goes back at once to the guest's page, which follows the task to its
// outcome (inline.go); a refusal is a notice there.

func (u *UI) guestStart(k guestKind) func(w http.ResponseWriter, r *http.Request) error {
	return u.power(k, "start", func(ctx context.Context, a vmops.Actor, vm vmops.GuestRef) (vmops.Outcome, error) {
		return u.vms.Start(ctx, a, vm, vmops.PowerOptions{})
	})
}

func (u *UI) guestStop(k guestKind) func(w http.ResponseWriter, r *http.Request) error {
	return u.power(k, "stop", func(ctx context.Context, a vmops.Actor, vm vmops.GuestRef) (vmops.Outcome, error) {
		return u.vms.Stop(ctx, a, vm, vmops.StopOptions{})
	})
}

func (u *UI) guestForceStop(k guestKind) func(w http.ResponseWriter, r *http.Request) error {
	return u.power(k, "force stop", func(ctx context.Context, a vmops.Actor, vm vmops.GuestRef) (vmops.Outcome, error) {
		return u.vms.Stop(ctx, a, vm, vmops.StopOptions{Force: true})
	})
}

func (u *UI) guestReboot(k guestKind) func(w http.ResponseWriter, r *http.Request) error {
	return u.power(k, "reboot", func(ctx context.Context, a vmops.Actor, vm vmops.GuestRef) (vmops.Outcome, error) {
		return u.vms.Reboot(ctx, a, vm, vmops.PowerOptions{})
	})
}

// done says in words that an action ended well.
var done = map[string]string{"start": "started", "stop": "shut down", "force stop": "powered off", "reboot": "rebooted",
	"suspend": "paused", "resume": "resumed"}

func (u *UI) power(k guestKind, action string,
	op func(context.Context, vmops.Actor, vmops.GuestRef) (vmops.Outcome, error)) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		vm, err := pathGuest(r, k.kind)
		if err != nil {
			return err
		}
		out, err := op(r.Context(), vmActor(r), vm)
		if errors.Is(err, vmops.ErrDenied) {
			return err // the error page's 404 or 403, as for any refused grant
		}
		if err == nil && out.TaskID != "" {
			// Answered at once: the guest's page follows the task (inline.go).
			redirect(w, r, withTask(refURL(vm), out.TaskID))
			return nil
		}
		n := outcomeNotice(action, vm, out, err)
		if n.Kind == "" {
			return err
		}
		u.setNotice(w, r, n)
		redirect(w, r, refURL(vm))
		return nil
	}
}

// outcomeNotice says how a power action ended, from its task: ok, still running
// (with the task), or failed with PVE's reason. An error the page cannot explain
// (a bug) gives no notice: the error page shows it.
func outcomeNotice(action string, vm vmops.GuestRef, out vmops.Outcome, err error) notice {
	what := ucfirst(action) + " of " + guestName(vm)
	switch {
	case err == nil && out.Running:
		return notice{Kind: "info", TaskID: out.TaskID,
			Message: what + " is still running. Its task page follows it to the end."}
	case err == nil:
		return notice{Kind: "ok", TaskID: out.TaskID, Message: guestName(vm) + " " + done[action] + "."}
	}
	e, ok := errs.As(err)
	if !ok || e.Kind == errs.Internal {
		return notice{}
	}
	n := notice{Kind: "error", Reason: e.ReasonOrDefault(), TaskID: out.TaskID, Message: sentence(what + " failed: " + e.Message)}
	if id, _ := e.Details["taskId"].(string); id != "" && n.TaskID == "" {
		n.TaskID = id
	}
	if ref, ok := vmops.TaskRefOf(err); ok && n.TaskID == "" {
		n.TaskID = itoa(ref) // outcome unknown: the task page follows vmgate's task row until PVE's task is found
	}
	switch e.Reason {
	case errs.ReasonShutdownTimeout:
		n.Message = guestName(vm) + " did not shut down in time (shutdown_timeout): the guest ignored the request. " +
			"Force stop powers it off at once."
	case errs.ReasonVMRunning, errs.ReasonVMStopped, errs.ReasonVMPaused, errs.ReasonVMLocked, errs.ReasonCTRunning, errs.ReasonCTStopped:
		n.Message = sentence(what + " was refused (" + e.Reason + "): " + e.Message)
	}
	return n
}

// forceStopPage asks before a forced stop: it powers the guest off like pulling
// the plug. It is offered to whoever may act (vmops.MayAct), as the stop is.
func (u *UI) forceStopPage(k guestKind) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		vm, err := pathGuest(r, k.kind)
		if err != nil {
			return err
		}
		if err := u.vms.MayAct(r.Context(), vmActor(r), vm.ClusterID); err != nil {
			return err
		}
		u.render(w, r, http.StatusOK, "forcestop", u.page(w, r, "Force stop "+guestName(vm), "vms", vm))
		return nil
	}
}
