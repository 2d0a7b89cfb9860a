package idempotency

import (
	"context"
	"log/slog"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// sweepBatch is how many keys of dead holders one sweep takes over at most; the
// next sweep takes the rest.
const sweepBatch = 100

// Run takes over, every Sweep until ctx ends, the keys in progress whose
// holder's lease ran out, and settles them: a retry then finds the real answer
// without waiting for a request to trigger the take-over. Without
// Config.Settle it does nothing but wait for ctx.
func (k *Keeper) Run(ctx context.Context) error {
	if k.settle == nil {
		<-ctx.Done()
		return nil
	}
	tick := time.NewTicker(k.sweep)
	defer tick.Stop()
	k.takeOverExpired(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-k.bgCtx.Done():
			return nil
		case <-tick.C:
			k.takeOverExpired(ctx)
		}
	}
}

// takeOverExpired is one sweep of Run.
func (k *Keeper) takeOverExpired(ctx context.Context) {
	expired, err := k.store.ExpiredIdempotencyLeases(ctx, k.now(), sweepBatch)
	if err != nil {
		if ctx.Err() == nil {
			k.log.Warn("listing expired idempotency leases failed", slog.String("error", err.Error()))
		}
		return
	}
	for _, rec := range expired {
		k.mu.Lock()
		_, mine := k.held[Key{rec.UserID, rec.Key}]
		k.mu.Unlock()
		if mine || ctx.Err() != nil {
			continue
		}
		if _, _, err := k.takeOver(ctx, rec); err != nil {
			k.log.Warn("taking over an idempotency key failed", slog.String("error", err.Error()))
		}
	}
}

// takeOver takes a key whose holder's lease ran out and settles it. It returns
// the key as it is afterwards, or released when the request had started nothing
// (the key is gone). Without Config.Settle it leaves the key alone.
func (k *Keeper) takeOver(ctx context.Context, rec store.IdempotencyRecord) (store.IdempotencyRecord, bool, error) {
	if k.settle == nil {
		return rec, false, nil
	}
	now := k.now()
	got, taken, err := k.store.TakeOverIdempotencyKey(ctx, rec.UserID, rec.Key, k.owner, now, now.Add(k.lease))
	if err != nil {
		if errs.KindOf(err) == errs.NotFound {
			return rec, true, nil
		}
		return rec, false, err
	}
	if !taken {
		return got, false, nil
	}
	k.log.Info("took over an idempotency key whose holder's lease ran out", slog.Int64("user", rec.UserID),
		slog.String("previous_owner", rec.Owner))
	key := Key{rec.UserID, rec.Key}
	k.hold(key, got.CreatedAt, true)
	a, released := k.settleHeld(ctx, key)
	switch {
	case released:
		return got, true, nil
	case a != nil:
		got.State, got.StatusCode, got.Body = store.IdemDone, a.Status, a.Body
		got.Headers, _ = marshalHeaders(a.Headers) // as complete wrote it, for claimOf to read back
	}
	return got, false, nil
}

// settleHeld finishes a key this process holds and no request answers for, with
// what Config.Settle says its request came to: kept with its answer, released,
// or held on (unsettled, or Settle failed: asked again at the next renewal or
// news). It returns the answer kept, or released when the key was released. A
// key held for a running request is left alone; news for a key being settled
// already has it asked once more when that ends unsettled.
func (k *Keeper) settleHeld(ctx context.Context, key Key) (*Answer, bool) {
	k.mu.Lock()
	h := k.held[key]
	switch {
	case h == nil || !h.awaiting || k.settle == nil:
		k.mu.Unlock()
		return nil, false
	case h.settling:
		h.again = true
		k.mu.Unlock()
		return nil, false
	}
	h.settling = true
	k.mu.Unlock()
	for {
		s, err := k.settle(ctx, key, h.since)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				k.log.Warn("settling an idempotency key failed; it is held and asked again", slog.Int64("user", key.UserID),
					slog.String("error", err.Error()))
			}
		case s.Verdict == StartedNothing:
			return nil, k.release(ctx, h)
		case s.Verdict == Answered:
			return k.finish(ctx, h, s.Answer)
		}
		k.mu.Lock()
		again := h.again && err == nil
		h.again = false
		h.settling = again
		k.mu.Unlock()
		if !again {
			return nil, false
		}
	}
}

// finish keeps a as the answer of a key this process holds.
func (k *Keeper) finish(ctx context.Context, h *heldKey, a Answer) (*Answer, bool) {
	k.drop(h)
	if err := k.complete(ctx, h.key, a); err != nil {
		k.log.Warn("finishing an idempotency key failed", slog.Int64("user", h.key.UserID), slog.String("error", err.Error()))
		return nil, false
	}
	k.log.Info("finished an idempotency key with its request's outcome", slog.Int64("user", h.key.UserID),
		slog.Int("status", a.Status))
	return &a, false
}

// release forgets a key this process holds whose request started nothing.
func (k *Keeper) release(ctx context.Context, h *heldKey) bool {
	k.drop(h)
	err := k.store.ReleaseIdempotencyKey(ctx, h.key.UserID, h.key.Name, k.owner)
	if err != nil && errs.KindOf(err) != errs.NotFound {
		k.log.Warn("releasing an idempotency key failed", slog.Int64("user", h.key.UserID), slog.String("error", err.Error()))
		return false
	}
	return true
}
