package frontend

import (
	"context"

	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/notify"
)

// Notifications is internal/notify's targets and deliveries as the front ends
// use them: every call needs an admin, its writes a login session.
// *notify.Service is one.
type Notifications interface {
	Targets(ctx context.Context, a fleet.Actor) ([]notify.Target, error)
	Target(ctx context.Context, a fleet.Actor, id string) (notify.Target, error)
	Create(ctx context.Context, a fleet.Actor, spec notify.TargetSpec) (notify.Target, error)
	Update(ctx context.Context, a fleet.Actor, id string, p notify.TargetPatch) (notify.Target, error)
	Delete(ctx context.Context, a fleet.Actor, id string) error
	Test(ctx context.Context, a fleet.Actor, id string) (notify.TestResult, error)
	Deliveries(ctx context.Context, a fleet.Actor, f notify.DeliveryFilter) ([]notify.Delivery, error)
	Retry(ctx context.Context, a fleet.Actor, id int64) (notify.Delivery, error)
}

var _ Notifications = (*notify.Service)(nil)
