package webui

import (
	"context"
	"net/http"

	"github.com/vmgate/vmgate/internal/vmops"
)

// Suspend (pause) and resume from the VM page (issue 13 (docs/history.md)), like the other power
// actions: a paused VM, or one suspended to disk, is resumed through vmgate.

func (u *UI) vmSuspend(w http.ResponseWriter, r *http.Request) error {
	return u.power(w, r, "suspend", func(ctx context.Context, vm vmops.GuestRef) (vmops.Outcome, error) {
		return u.vms.Suspend(ctx, vmActor(r), vm, vmops.SuspendOptions{Wait: u.powerWait})
	})
}

func (u *UI) vmResume(w http.ResponseWriter, r *http.Request) error {
	return u.power(w, r, "resume", func(ctx context.Context, vm vmops.GuestRef) (vmops.Outcome, error) {
		return u.vms.Resume(ctx, vmActor(r), vm, vmops.ResumeOptions{Wait: u.powerWait})
	})
}
