package store

import (
	"context"
	"time"
)

// The operations' methods of bounded (see bounded.go): each call gets the
// store's deadline and its failures are classified like every other call's.

// CreateOperation implements Store.
func (b *bounded) CreateOperation(ctx context.Context, o Operation) (Operation, error) {
	return call(b, ctx, func(ctx context.Context) (Operation, error) { return b.s.CreateOperation(ctx, o) })
}

// OperationHolds implements Store.
func (b *bounded) OperationHolds(ctx context.Context, clusterID int64) (Holds, error) {
	return call(b, ctx, func(ctx context.Context) (Holds, error) { return b.s.OperationHolds(ctx, clusterID) })
}

// OperationByID implements Store.
func (b *bounded) OperationByID(ctx context.Context, id int64) (Operation, error) {
	return call(b, ctx, func(ctx context.Context) (Operation, error) { return b.s.OperationByID(ctx, id) })
}

// OperationByIdempotencyKey implements Store.
func (b *bounded) OperationByIdempotencyKey(ctx context.Context, userID int64, key string) (Operation, error) {
	return call(b, ctx, func(ctx context.Context) (Operation, error) {
		return b.s.OperationByIdempotencyKey(ctx, userID, key)
	})
}

// ListOperations implements Store.
func (b *bounded) ListOperations(ctx context.Context, f OperationFilter) ([]Operation, error) {
	return call(b, ctx, func(ctx context.Context) ([]Operation, error) { return b.s.ListOperations(ctx, f) })
}

// UnfinishedOperations implements Store.
func (b *bounded) UnfinishedOperations(ctx context.Context) ([]Operation, error) {
	return call(b, ctx, b.s.UnfinishedOperations)
}

// TakeOverOperation implements Store.
func (b *bounded) TakeOverOperation(ctx context.Context, id int64, owner string, now, until time.Time) (Operation, bool, error) {
	return call2(b, ctx, func(ctx context.Context) (Operation, bool, error) {
		return b.s.TakeOverOperation(ctx, id, owner, now, until)
	})
}

// RenewOperationLease implements Store.
func (b *bounded) RenewOperationLease(ctx context.Context, id int64, owner string, until time.Time) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.RenewOperationLease(ctx, id, owner, until) })
}

// SetOperationStatus implements Store.
func (b *bounded) SetOperationStatus(ctx context.Context, id int64, owner, status string, at time.Time) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.SetOperationStatus(ctx, id, owner, status, at) })
}

// UpdateOperationItems implements Store.
func (b *bounded) UpdateOperationItems(ctx context.Context, id int64, owner string, changes []ItemChange) error {
	return call0(b, ctx, func(ctx context.Context) error { return b.s.UpdateOperationItems(ctx, id, owner, changes) })
}

// RetryOperationItem implements Store.
func (b *bounded) RetryOperationItem(ctx context.Context, id int64, owner string, index int, lost int64, t Task) (Task, error) {
	return call(b, ctx, func(ctx context.Context) (Task, error) { return b.s.RetryOperationItem(ctx, id, owner, index, lost, t) })
}

// StartOperationItem implements Store.
func (b *bounded) StartOperationItem(ctx context.Context, id int64, owner string, index int, t Task) (Task, error) {
	return call(b, ctx, func(ctx context.Context) (Task, error) { return b.s.StartOperationItem(ctx, id, owner, index, t) })
}

// RequestOperationCancel implements Store.
func (b *bounded) RequestOperationCancel(ctx context.Context, id int64, abort bool, at time.Time) (Operation, error) {
	return call(b, ctx, func(ctx context.Context) (Operation, error) { return b.s.RequestOperationCancel(ctx, id, abort, at) })
}
