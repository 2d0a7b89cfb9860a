package frontend

import (
	"context"

	"github.com/vmgate/vmgate/internal/vmops"
)

// RemoteMigrations is vmops' move of a guest to another cluster (issue 22) as
// the front ends call it: the pre-check and the move. *vmops.Service is one; a
// front end asks its VMs for it (a fake VMs without it serves no such route).
type RemoteMigrations interface {
	RemoteMigrateCheck(ctx context.Context, a vmops.Actor, vm vmops.GuestRef, req vmops.RemoteMigrateRequest) (vmops.RemotePrecheck, error)
	RemoteMigrate(ctx context.Context, a vmops.Actor, vm vmops.GuestRef, req vmops.RemoteMigrateRequest) (string, error)
}

var _ RemoteMigrations = (*vmops.Service)(nil)
