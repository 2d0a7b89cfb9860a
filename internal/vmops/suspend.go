package vmops

import (
	"context"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/pve"
)

// Suspend and resume (issue 13 (docs/history.md)), as task rows and audit records name them.
const (
	OpSuspend   = "suspend"   // pause: QEMU stops, memory stays (PVE task qmpause)
	OpHibernate = "hibernate" // suspend to disk: the state is saved and QEMU quits (PVE task qmsuspend)
	OpResume    = "resume"    // continue a paused VM, or start a hibernated one from its state (qmresume)
)

// SuspendOptions are the options of Suspend.
type SuspendOptions struct {
	// ToDisk hibernates the VM (its state is written to a vmstate volume and QEMU
	// quits; the VM stays locked "suspended" until resumed or started) instead of
	// pausing it. PVE refuses it for HA-managed VMs and PCI passthrough.
	ToDisk bool
	// Wait is how long to wait for the task (at most MaxPowerWait); 0 returns at once.
	Wait time.Duration
}

// ResumeOptions are the options of Resume.
type ResumeOptions struct {
	// Wait is how long to wait for the task (at most MaxPowerWait); 0 returns at once.
	Wait time.Duration
}

// Suspend pauses a running VM (PVE status/suspend), or with ToDisk hibernates
// it, with the checks, task, waiting and audit of every power operation. A
// stopped VM is 409 vm_stopped, an already paused one vm_paused (unless it is to
// be hibernated), a locked one vm_locked, hibernating an HA-managed VM 409
// conflict (PVE cannot).
func (s *Service) Suspend(ctx context.Context, a Actor, vm GuestRef, o SuspendOptions) (Outcome, error) {
	if err := s.requireGuest(ctx, a, vm, fleet.GrantOperator, vm.attempt(OpSuspend)); err != nil {
		return Outcome{}, err
	}
	op := OpSuspend
	if o.ToDisk {
		op = OpHibernate
	}
	return s.power(ctx, a, vm, op, nil, o.Wait)
}

// Resume continues a paused VM (or one in prelaunch), or starts a hibernated one
// from its saved state (PVE status/resume). A running VM that is not paused is
// 409 vm_running, a stopped one that was not hibernated vm_stopped, a locked one
// vm_locked (a backup's lock excepted, as PVE does).
func (s *Service) Resume(ctx context.Context, a Actor, vm GuestRef, o ResumeOptions) (Outcome, error) {
	if err := s.requireGuest(ctx, a, vm, fleet.GrantOperator, vm.attempt(OpResume)); err != nil {
		return Outcome{}, err
	}
	return s.power(ctx, a, vm, OpResume, nil, o.Wait)
}

// isSuspendOp reports whether op is one of suspend, hibernate and resume.
func isSuspendOp(op string) bool { return op == OpSuspend || op == OpHibernate || op == OpResume }

// hibernated reports whether the VM is stopped with its state saved (PVE's lock
// "suspended"): a resume or a start brings it back.
func hibernated(st pve.GuestStatus) bool { return st.Status != "running" && st.Lock == "suspended" }

// paused reports whether a running VM's QEMU does not run (paused, prelaunch, ...).
func paused(st pve.GuestStatus) bool {
	return st.Status == "running" && st.QMPStatus != "" && st.QMPStatus != "running"
}

// checkSuspend refuses a suspend, hibernate or resume the VM's state forbids,
// before PVE is asked (qemu-server's vm_suspend and vm_resume).
func checkSuspend(op string, vm GuestRef, st pve.GuestStatus) error {
	switch op {
	case OpResume:
		switch {
		case hibernated(st):
			return nil
		case st.Status != "running":
			return errs.R(errs.Conflict, errs.ReasonVMStopped, "%s is not running and was not suspended to disk; start it instead", vm.name())
		case !paused(st):
			return errs.R(errs.Conflict, errs.ReasonVMRunning, "%s is running and not paused; there is nothing to resume", vm.name())
		case st.Lock != "" && st.Lock != "backup":
			return lockedErr(vm.VMID, st.Lock)
		}
		return nil
	default:
		switch {
		case hibernated(st):
			return errs.R(errs.Conflict, errs.ReasonVMStopped, "%s is suspended to disk already; resume it to bring it back", vm.name())
		case st.Status != "running":
			return errs.R(errs.Conflict, errs.ReasonVMStopped, "%s is not running", vm.name())
		case op == OpHibernate && st.HA.Managed:
			return errs.E(errs.Conflict,
				"%s is HA-managed: PVE cannot suspend it to disk (suspend without todisk pauses it)", vm.name())
		case st.Lock != "" && (op == OpHibernate || st.Lock != "backup"):
			return lockedErr(vm.VMID, st.Lock)
		case op == OpSuspend && paused(st):
			return errs.R(errs.Conflict, errs.ReasonVMPaused, "%s is %s already; resume it to continue", vm.name(), st.QMPStatus)
		}
		return nil
	}
}
