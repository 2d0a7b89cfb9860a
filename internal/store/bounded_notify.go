package store

import (
	"context"
	"time"
)

// The notifications' methods of bounded (see bounded.go): each call gets the
// store's deadline and its failures are classified like every other call's.

// CreateNotifyTarget implements Store.
func (b *bounded) CreateNotifyTarget(ctx context.Context, t NotifyTarget) (NotifyTarget, error) {
	return call(b, ctx, func(ctx context.Context) (NotifyTarget, error) { return b.s.CreateNotifyTarget(ctx, t) })
}

// NotifyTargets implements Store.
func (b *bounded) NotifyTargets(ctx context.Context) ([]NotifyTarget, error) {
	return call(b, ctx, b.s.NotifyTargets)
}

// NotifyTargetByID implements Store.
func (b *bounded) NotifyTargetByID(ctx context.Context, id string) (NotifyTarget, error) {
	return call(b, ctx, func(ctx context.Context) (NotifyTarget, error) { return b.s.NotifyTargetByID(ctx, id) })
}

// UpdateNotifyTarget implements Store.
func (b *bounded) UpdateNotifyTarget(ctx context.Context, t NotifyTarget) (NotifyTarget, error) {
	return call(b, ctx, func(ctx context.Context) (NotifyTarget, error) { return b.s.UpdateNotifyTarget(ctx, t) })
}

// DeleteNotifyTarget implements Store.
func (b *bounded) DeleteNotifyTarget(ctx context.Context, id string) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.DeleteNotifyTarget(ctx, id) })
}

// EnqueueNotifications implements Store.
func (b *bounded) EnqueueNotifications(ctx context.Context, evs []NotifyEvent) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.EnqueueNotifications(ctx, evs) })
}

// UnfannedNotifications implements Store.
func (b *bounded) UnfannedNotifications(ctx context.Context, limit int) ([]NotifyEvent, error) {
	return call(b, ctx, func(ctx context.Context) ([]NotifyEvent, error) { return b.s.UnfannedNotifications(ctx, limit) })
}

// FanOutNotifications implements Store.
func (b *bounded) FanOutNotifications(ctx context.Context, events []int64, ds []NotifyDelivery, now time.Time) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.FanOutNotifications(ctx, events, ds, now) })
}

// NotifyHeads implements Store.
func (b *bounded) NotifyHeads(ctx context.Context, now time.Time, limit int) ([]NotifyDelivery, error) {
	return call(b, ctx, func(ctx context.Context) ([]NotifyDelivery, error) { return b.s.NotifyHeads(ctx, now, limit) })
}

// PendingNotifyDeliveries implements Store.
func (b *bounded) PendingNotifyDeliveries(ctx context.Context, targetID string, limit int) ([]NotifyDelivery, error) {
	return call(b, ctx, func(ctx context.Context) ([]NotifyDelivery, error) {
		return b.s.PendingNotifyDeliveries(ctx, targetID, limit)
	})
}

// ClaimNotifyDeliveries implements Store.
func (b *bounded) ClaimNotifyDeliveries(ctx context.Context, ids []int64, owner string, now, until time.Time) (bool, error) {
	return call(b, ctx, func(ctx context.Context) (bool, error) { return b.s.ClaimNotifyDeliveries(ctx, ids, owner, now, until) })
}

// RecordNotifyAttempt implements Store.
func (b *bounded) RecordNotifyAttempt(ctx context.Context, ids []int64, owner string, a NotifyAttempt) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.RecordNotifyAttempt(ctx, ids, owner, a) })
}

// ReleaseNotifyDeliveries implements Store.
func (b *bounded) ReleaseNotifyDeliveries(ctx context.Context, ids []int64, owner string) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.ReleaseNotifyDeliveries(ctx, ids, owner) })
}

// NotifyMessagesSince implements Store.
func (b *bounded) NotifyMessagesSince(ctx context.Context, targetID string, since time.Time) (int, error) {
	return call(b, ctx, func(ctx context.Context) (int, error) { return b.s.NotifyMessagesSince(ctx, targetID, since) })
}

// NotifyDeliveries implements Store.
func (b *bounded) NotifyDeliveries(ctx context.Context, f NotifyDeliveryFilter) ([]NotifyDelivery, error) {
	return call(b, ctx, func(ctx context.Context) ([]NotifyDelivery, error) { return b.s.NotifyDeliveries(ctx, f) })
}

// RetryNotifyDelivery implements Store.
func (b *bounded) RetryNotifyDelivery(ctx context.Context, id int64, now time.Time) (NotifyDelivery, error) {
	return call(b, ctx, func(ctx context.Context) (NotifyDelivery, error) { return b.s.RetryNotifyDelivery(ctx, id, now) })
}

// TakeNotifyLease implements Store.
func (b *bounded) TakeNotifyLease(ctx context.Context, name, owner string, now, until time.Time) (string, bool, error) {
	return call2(b, ctx, func(ctx context.Context) (string, bool, error) {
		return b.s.TakeNotifyLease(ctx, name, owner, now, until)
	})
}

// SetNotifyLeaseState implements Store.
func (b *bounded) SetNotifyLeaseState(ctx context.Context, name, owner, state string) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.SetNotifyLeaseState(ctx, name, owner, state) })
}
