// Package idempotency keeps the Idempotency-Keys of vmgate's writes: a request
// claims its key before it runs, and the answer it gave is kept so that a repeat
// replays it instead of acting twice (docs/design.md §3.2).
//
// A claim is a lease this process renews while it holds the key
// (docs/decisions/0008, 0020): when the holder dies (kill -9, a lost replica),
// another process takes the key over once the lease has run out and finishes it
// with what the request really did. What that was is not this package's
// question: it asks Config.Settle, which the front end answers from the use
// cases (the request's task row, or the operation it created) and renders as
// the request would have been answered. The kept answer is opaque here: a
// status, a few headers and a body.
//
// The key machinery is one HTTP middleware's (internal/httpapi); the store holds
// the records (Store is the narrow part of store.Store it uses).
package idempotency

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// TTL is how long a claimed key is remembered.
const TTL = store.IdempotencyTTL

// DefaultSweep is how often Run looks for keys whose holder's lease ran out.
const DefaultSweep = 5 * time.Second

// Store is what the keeper needs of the store: its idempotency records.
// store.Store implements it.
type Store interface {
	ClaimIdempotencyKey(ctx context.Context, r store.IdempotencyRecord) (store.IdempotencyRecord, bool, error)
	CompleteIdempotencyKey(ctx context.Context, r store.IdempotencyRecord) error
	ReleaseIdempotencyKey(ctx context.Context, userID int64, key, owner string) error
	HeartbeatIdempotencyKey(ctx context.Context, userID int64, key, owner string, until time.Time) error
	TakeOverIdempotencyKey(ctx context.Context, userID int64, key, owner string, now, until time.Time) (store.IdempotencyRecord, bool, error)
	ExpiredIdempotencyLeases(ctx context.Context, now time.Time, limit int) ([]store.IdempotencyRecord, error)
}

// Key names an Idempotency-Key: keys are per user.
type Key struct {
	UserID int64
	Name   string // the header's value
}

// Answer is the first answer to a request made with a key, kept so that a repeat
// replays it. The keeper keeps it as given; what it means is the front end's.
type Answer struct {
	Status  int
	Headers map[string]string
	Body    []byte
}

// Claim is what Claim found.
type Claim struct {
	// Claimed: the key is the caller's now; run the request, then Keep, Release
	// or, when its outcome is unknown, Await. Otherwise the rest describes the
	// request that holds the key.
	Claimed     bool
	RequestHash string
	Done        bool   // it ended and Answer is its answer; otherwise it still runs
	Answer      Answer // when Done
	Since       time.Time
}

// Verdict is what Config.Settle found a request came to.
type Verdict int

const (
	// Unsettled: not known yet (its task is still looked for). The key stays in
	// progress, held by this process; Settle asks again later.
	Unsettled Verdict = iota
	// StartedNothing: the key is released, and a retry runs the request.
	StartedNothing
	// Answered: the key keeps Settlement.Answer, the request's answer.
	Answered
)

// Settlement is what a request whose key this process finishes on its behalf
// came to.
type Settlement struct {
	Verdict Verdict
	Answer  Answer // when Answered
}

// SettleFunc tells what the request made under k, claimed at since, came to. It
// is asked for a key no request answers for any more in this process: its
// outcome was unknown when it answered (Await), or its holder died (take-over).
// An error leaves the key unsettled, to be asked again.
type SettleFunc func(ctx context.Context, k Key, since time.Time) (Settlement, error)

// Config is what New needs. Store is required.
type Config struct {
	Store Store
	// Settle finds out what a request came to for a key this process finishes
	// on its behalf. Nil: keys whose holder died are left to their lease, and
	// an awaited key to its TTL.
	Settle SettleFunc
	Logger *slog.Logger
	Now    func() time.Time
	// After is the clock heartbeats wait on [time.After]; tests drive it.
	After func(time.Duration) <-chan time.Time
	// Owner names this process as the holder of the keys it claims
	// (store.IdempotencyRecord.Owner) [store.NewOwner].
	Owner string
	// Lease is how long a claimed key's lease lasts without a heartbeat; the
	// holder renews it every third of that [store.IdempotencyLease].
	Lease time.Duration
	// Sweep is how often Run looks for keys whose holder's lease ran out, to take
	// them over and settle them [DefaultSweep].
	Sweep time.Duration
}

// Keeper claims, keeps, replays and takes over Idempotency-Keys for one process.
type Keeper struct {
	store  Store
	settle SettleFunc
	log    *slog.Logger
	now    func() time.Time
	after  func(time.Duration) <-chan time.Time
	owner  string
	lease  time.Duration
	sweep  time.Duration

	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup

	mu   sync.Mutex
	held map[Key]*heldKey
}

// heldKey is a key this process holds: its lease is renewed every third of
// Lease until the key is kept, released, or taken over.
type heldKey struct {
	key   Key
	since time.Time // the claim: what is older is not the request's
	stop  chan struct{}
	// awaiting: no request runs for the key in this process any more; it waits
	// for what its request did to be known (the outcome was unknown, or the key
	// was taken over from a holder that died), and is settled then.
	awaiting bool
	settling bool // settleHeld is asking Config.Settle about it
	again    bool // news came while settling: ask once more
}

// New builds a keeper. Call Run to take over the keys of dead holders, and
// Close at the end.
func New(cfg Config) *Keeper {
	k := &Keeper{store: cfg.Store, settle: cfg.Settle, log: cfg.Logger, now: cfg.Now, after: cfg.After, owner: cfg.Owner,
		lease: cfg.Lease, sweep: cfg.Sweep, held: map[Key]*heldKey{}}
	if k.log == nil {
		k.log = slog.New(slog.DiscardHandler)
	}
	if k.now == nil {
		k.now = time.Now
	}
	if k.after == nil {
		k.after = time.After
	}
	if k.owner == "" {
		k.owner = store.NewOwner()
	}
	if k.lease <= 0 {
		k.lease = store.IdempotencyLease
	}
	if k.sweep <= 0 {
		k.sweep = DefaultSweep
	}
	k.bgCtx, k.bgCancel = context.WithCancel(context.Background())
	return k
}

// Close stops renewing leases and waits for the heartbeats to return: the keys
// this process holds run out and another process takes them over.
func (k *Keeper) Close() {
	// Under mu so that no heartbeat is added once the wait has begun.
	k.mu.Lock()
	k.bgCancel()
	k.mu.Unlock()
	k.bg.Wait()
}

// Claim claims key for the request identified by requestHash, for TTL, unless an
// unexpired claim of the key exists; then it returns that claim. When the
// holder of a key in progress died (its lease ran out), Claim takes the key
// over at once and settles it: it returns the request's answer, or, when that
// request started nothing, claims the key for this one.
func (k *Keeper) Claim(ctx context.Context, key Key, requestHash string) (Claim, error) {
	for range 2 {
		now := k.now()
		got, claimed, err := k.store.ClaimIdempotencyKey(ctx, store.IdempotencyRecord{UserID: key.UserID, Key: key.Name,
			RequestHash: requestHash, State: store.IdemInProgress, CreatedAt: now, ExpiresAt: now.Add(TTL),
			Owner: k.owner, LeaseExpiresAt: now.Add(k.lease)})
		if err != nil {
			return Claim{}, err
		}
		if claimed {
			k.hold(key, now, false)
			return Claim{Claimed: true, RequestHash: requestHash, Since: now}, nil
		}
		if got.State == store.IdemInProgress && got.RequestHash == requestHash && !got.LeaseExpiresAt.After(now) {
			rec, released, err := k.takeOver(ctx, got)
			if err != nil {
				return Claim{}, err
			}
			if released {
				continue // the first request started nothing: this one runs
			}
			got = rec
		}
		return claimOf(got), nil
	}
	return Claim{}, errs.E(errs.Conflict, "Idempotency-Key %q is being claimed and released concurrently", key.Name)
}

// claimOf describes a key another request holds or finished.
func claimOf(r store.IdempotencyRecord) Claim {
	out := Claim{RequestHash: r.RequestHash, Done: r.State == store.IdemDone, Since: r.CreatedAt}
	if out.Done {
		out.Answer = Answer{Status: r.StatusCode, Body: r.Body}
		_ = json.Unmarshal([]byte(r.Headers), &out.Answer.Headers) // written by complete; none is fine
	}
	return out
}

// Keep stores the answer of the request that claimed key, for replays.
func (k *Keeper) Keep(ctx context.Context, key Key, a Answer) error {
	k.unhold(key)
	return k.complete(ctx, key, a)
}

// Release forgets the claim of a request that started nothing, so that a retry
// runs again.
func (k *Keeper) Release(ctx context.Context, key Key) error {
	k.unhold(key)
	return k.store.ReleaseIdempotencyKey(ctx, key.UserID, key.Name, k.owner)
}

// Await keeps the claim of a request whose outcome is unknown (it may have
// started something) instead of keeping its answer: the key stays in progress,
// held by this process, until Settle tells what the request came to, and is
// then kept with that answer (or released when it started nothing). A retry
// meanwhile finds it in progress.
func (k *Keeper) Await(ctx context.Context, key Key) {
	k.mu.Lock()
	h := k.held[key]
	if h != nil {
		h.awaiting = true
	}
	k.mu.Unlock()
	if h != nil {
		k.settleHeld(ctx, key)
	}
}

// Settle settles key now if this process holds it awaiting its request's
// outcome: the use cases call it when what a request under a key did may have
// become known (its task was found, or given up). Any other key is left alone.
func (k *Keeper) Settle(ctx context.Context, key Key) {
	k.settleHeld(ctx, key)
}

// hold renews the lease of a key this process holds until unhold (or until the
// key turns out to be lost to another owner). An awaited key is settled again
// at every renewal, in case the news of its request's outcome was missed.
func (k *Keeper) hold(key Key, since time.Time, awaiting bool) {
	h := &heldKey{key: key, since: since, stop: make(chan struct{}), awaiting: awaiting}
	k.mu.Lock()
	if old := k.held[key]; old != nil {
		close(old.stop)
	}
	k.held[key] = h
	if k.bgCtx.Err() != nil {
		// Closing: the lease simply runs out and another process takes over.
		k.mu.Unlock()
		return
	}
	k.bg.Add(1)
	k.mu.Unlock()
	go func() {
		defer k.bg.Done()
		wait := k.lease / 3
		for {
			select {
			case <-h.stop:
				return
			case <-k.bgCtx.Done():
				return
			case <-k.after(wait):
			}
			wait = k.lease / 3
			err := k.store.HeartbeatIdempotencyKey(k.bgCtx, key.UserID, key.Name, k.owner, k.now().Add(k.lease))
			switch kind := errs.KindOf(err); {
			case err == nil:
				k.settleHeld(k.bgCtx, key)
			case kind == errs.Conflict || kind == errs.NotFound:
				// Taken over (our lease ran out, e.g. during a store outage) or
				// finished elsewhere: the key is no longer ours to answer for.
				k.log.Warn("lost an idempotency key", slog.Int64("user", key.UserID), slog.String("error", err.Error()))
				k.drop(h)
				return
			default:
				// The store is away (a failover, docs/decisions/0118): try again
				// soon, so that the lease is renewed as soon as it is back.
				wait = min(wait, store.LeaseRetry)
				k.log.Warn("renewing an idempotency key's lease failed", slog.Int64("user", key.UserID),
					slog.String("error", err.Error()))
			}
		}
	}()
}

// unhold stops renewing a key's lease.
func (k *Keeper) unhold(key Key) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if h := k.held[key]; h != nil {
		delete(k.held, key)
		close(h.stop)
	}
}

// drop stops renewing h, unless the key is held anew meanwhile.
func (k *Keeper) drop(h *heldKey) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.held[h.key] == h {
		delete(k.held, h.key)
		close(h.stop)
	}
}

// complete stores a key's answer as its owner.
func (k *Keeper) complete(ctx context.Context, key Key, a Answer) error {
	hdr, err := marshalHeaders(a.Headers)
	if err != nil {
		return err
	}
	return k.store.CompleteIdempotencyKey(ctx, store.IdempotencyRecord{UserID: key.UserID, Key: key.Name,
		State: store.IdemDone, StatusCode: a.Status, Headers: hdr, Body: a.Body, Owner: k.owner})
}

// marshalHeaders is an answer's headers as the record keeps them: a JSON object.
func marshalHeaders(h map[string]string) (string, error) {
	if h == nil {
		return "{}", nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return "", fmt.Errorf("idempotency key's headers: %w", err)
	}
	return string(b), nil
}
