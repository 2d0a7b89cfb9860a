package webui

import (
	"context"
	"net/http"

	"github.com/vmgate/vmgate/internal/vmops"
)

// Suspend (pause) and resume from the VM page (issue 13 (docs/history.md)), like the other power
// actions: a paused VM, or one suspended to disk, is resumed through vmgate.

func (u *UI) guestSuspend(k guestKind) func(w http.ResponseWriter, r *http.Request) error {
	return u.power(k, "suspend", func(ctx context.Context, a vmops.Actor, vm vmops.GuestRef) (vmops.Outcome, error) {
		return u.vms.Suspend(ctx, a, vm, vmops.SuspendOptions{})
	})
}

func (u *UI) guestResume(k guestKind) func(w http.ResponseWriter, r *http.Request) error {
	return u.power(k, "resume", func(ctx context.Context, a vmops.Actor, vm vmops.GuestRef) (vmops.Outcome, error) {
		return u.vms.Resume(ctx, a, vm, vmops.ResumeOptions{})
	})
}
