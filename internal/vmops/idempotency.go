package vmops

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// IdempotencyTTL is how long a claimed Idempotency-Key is remembered.
const IdempotencyTTL = store.IdempotencyTTL

// Answer is the first answer to a request made with an Idempotency-Key, kept so that
// a repeat replays it. vmops keeps it as given; what it means is the front end's.
type Answer struct {
	Status  int
	Headers map[string]string
	Body    []byte
}

// KeyOutcome is what a request with an Idempotency-Key came to, when vmops must
// answer for it (Config.Answers): its holder died, or its outcome became known
// only after it had answered outcome_unknown. It is what the request itself
// would have answered with now.
type KeyOutcome struct {
	// Op is OpStart, OpShutdown, OpStop, OpReboot or OpMigrate; for an
	// evacuation or a bulk action the operation's kind (OperationID is set).
	Op string
	// OperationID is, for an evacuation or a bulk action, the operation its
	// request created, and Plan the plan it answered with as the operation keeps
	// it (internal/operations renders it: operations.Relaunched).
	OperationID int64
	Plan        []byte
	// Outcome is the task: a migration's TaskID; a power operation's task as it
	// is now (Running while it runs).
	Outcome Outcome
	// Err is a power operation's failed task, mapped as its request maps it
	// (shutdown_timeout, vm_locked, upstream_error, ...); nil otherwise.
	Err error
}

// KeyClaim is what ClaimKey found.
type KeyClaim struct {
	// Claimed: the key is the caller's now; run the request, then KeepAnswer,
	// ReleaseKey or, when its outcome is unknown, HoldKey. Otherwise the rest
	// describes the request that holds the key.
	Claimed     bool
	RequestHash string
	Done        bool   // it ended and Answer is its answer; otherwise it still runs
	Answer      Answer // when Done
	Since       time.Time
	// TaskRef is, for a key still in progress, the task row its request wrote
	// (TaskView.TaskRef; 0 when none yet): where to look meanwhile.
	TaskRef int64
}

// keyID names an Idempotency-Key: keys are per user.
type keyID struct {
	user int64
	key  string
}

// heldKey is an Idempotency-Key this process holds: its lease is renewed every
// third of KeyLease until the key is finished, released, or taken over.
type heldKey struct {
	id    keyID
	since time.Time // the claim: a task row older than it is not the request's
	stop  chan struct{}
	// awaiting: no request runs for the key in this process any more; it waits
	// for its task row to settle (the outcome was unknown, or the key was taken
	// over from a holder that died), and is finished then with KeyOutcome.
	awaiting bool
}

// newOwner names this process as a holder of keys: host, pid and a random part,
// so that a restarted process on the same host is another owner.
func newOwner() string {
	host, _ := os.Hostname()
	var b [6]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// ClaimKey claims key for userID's request identified by requestHash, for
// IdempotencyTTL, unless an unexpired claim of the key exists; then it returns that
// claim. The claim is a lease this process renews while it holds the key
// (docs/decisions/0008): when the holder of a key in progress died (its lease ran
// out), ClaimKey takes the key over at once, finds out from the request's task
// row and PVE what the request did, and returns that answer (or, when it started
// nothing, claims the key for this request). Idempotency keys are kept by vmops
// because only VM operations take them (docs/design.md §3.2) and whether an answer may be
// forgotten depends on what PVE did.
func (s *Service) ClaimKey(ctx context.Context, userID int64, key, requestHash string) (KeyClaim, error) {
	id := keyID{userID, key}
	for range 2 {
		now := s.now()
		got, claimed, err := s.store.ClaimIdempotencyKey(ctx, store.IdempotencyRecord{UserID: userID, Key: key,
			RequestHash: requestHash, State: store.IdemInProgress, CreatedAt: now, ExpiresAt: now.Add(IdempotencyTTL),
			Owner: s.owner, LeaseExpiresAt: now.Add(s.keyLease)})
		if err != nil {
			return KeyClaim{}, err
		}
		if claimed {
			s.hold(id, now, false)
			return KeyClaim{Claimed: true, RequestHash: requestHash, Since: now}, nil
		}
		if got.State == store.IdemInProgress && got.RequestHash == requestHash && !got.LeaseExpiresAt.After(now) {
			rec, released, err := s.takeOverKey(ctx, got)
			if err != nil {
				return KeyClaim{}, err
			}
			if released {
				continue // the first request started nothing: this one runs
			}
			got = rec
		}
		return s.claimOf(ctx, got), nil
	}
	return KeyClaim{}, errs.E(errs.Conflict, "Idempotency-Key %q is being claimed and released concurrently", key)
}

// claimOf describes a key another request holds or finished.
func (s *Service) claimOf(ctx context.Context, r store.IdempotencyRecord) KeyClaim {
	out := KeyClaim{RequestHash: r.RequestHash, Done: r.State == store.IdemDone, Since: r.CreatedAt}
	if out.Done {
		out.Answer = Answer{Status: r.StatusCode, Body: r.Body}
		_ = json.Unmarshal([]byte(r.Headers), &out.Answer.Headers) // written by KeepAnswer; none is fine
		return out
	}
	if row, err := s.store.TaskByIdempotencyKey(ctx, r.UserID, r.Key); err == nil && !row.CreatedAt.Before(r.CreatedAt) {
		out.TaskRef = row.ID
	}
	return out
}

// KeepAnswer stores the answer to the request that claimed key, for replays.
func (s *Service) KeepAnswer(ctx context.Context, userID int64, key string, a Answer) error {
	s.unhold(keyID{userID, key})
	return s.complete(ctx, keyID{userID, key}, a)
}

// ReleaseKey forgets the claim of a request that started nothing, so that a retry
// runs again.
func (s *Service) ReleaseKey(ctx context.Context, userID int64, key string) error {
	s.unhold(keyID{userID, key})
	return s.store.ReleaseIdempotencyKey(ctx, userID, key, s.owner)
}

// HoldKey keeps the claim of a request whose outcome is unknown (outcome_unknown:
// it may have started a task) instead of keeping its answer: the key stays in
// progress, held by this process, until its task row settles (vmgate finds the
// task in PVE's list, or gives up after LostGrace), and is then finished with the
// answer the request would have given (or released when PVE started nothing).
// A retry meanwhile is 409 in_progress naming the request's task (TaskRef).
func (s *Service) HoldKey(ctx context.Context, userID int64, key string) {
	id := keyID{userID, key}
	s.mu.Lock()
	h := s.held[id]
	if h != nil {
		h.awaiting = true
	}
	s.mu.Unlock()
	if h != nil {
		s.settleHeld(ctx, id)
	}
}

// hold renews the lease of a key this process holds until unhold (or until the
// key turns out to be lost to another owner).
func (s *Service) hold(id keyID, since time.Time, awaiting bool) {
	h := &heldKey{id: id, since: since, stop: make(chan struct{}), awaiting: awaiting}
	s.mu.Lock()
	if old := s.held[id]; old != nil {
		close(old.stop)
	}
	s.held[id] = h
	if s.bgCtx.Err() != nil {
		// Closing: the lease simply runs out and another process takes over.
		s.mu.Unlock()
		return
	}
	s.bg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.bg.Done()
		for {
			select {
			case <-h.stop:
				return
			case <-s.bgCtx.Done():
				return
			case <-s.after(s.keyLease / 3):
			}
			err := s.store.HeartbeatIdempotencyKey(s.bgCtx, id.user, id.key, s.owner, s.now().Add(s.keyLease))
			switch k := errs.KindOf(err); {
			case err == nil:
			case k == errs.Conflict || k == errs.NotFound:
				// Taken over (our lease ran out, e.g. during a store outage) or
				// finished elsewhere: the key is no longer ours to answer for.
				s.log.Warn("lost an idempotency key", slog.Int64("user", id.user), slog.String("error", err.Error()))
				s.dropHeld(h)
				return
			default:
				s.log.Warn("renewing an idempotency key's lease failed", slog.Int64("user", id.user),
					slog.String("error", err.Error()))
			}
		}
	}()
}

// unhold stops renewing a key's lease.
func (s *Service) unhold(id keyID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.held[id]; h != nil {
		delete(s.held, id)
		close(h.stop)
	}
}

func (s *Service) dropHeld(h *heldKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[h.id] == h {
		delete(s.held, h.id)
		close(h.stop)
	}
}

// complete stores a key's answer as its owner.
func (s *Service) complete(ctx context.Context, id keyID, a Answer) error {
	if a.Headers == nil {
		a.Headers = map[string]string{}
	}
	hdr, err := json.Marshal(a.Headers)
	if err != nil {
		return err
	}
	return s.store.CompleteIdempotencyKey(ctx, store.IdempotencyRecord{UserID: id.user, Key: id.key, State: store.IdemDone,
		StatusCode: a.Status, Headers: string(hdr), Body: a.Body, Owner: s.owner})
}

// takeOverIdempotencyKey takes a key whose holder's lease ran out and settles it
// from its task row. It returns the key as it is afterwards, or released when
// the request had started nothing (the key is gone). Without Config.Answers it
// leaves the key alone.
func (s *Service) takeOverKey(ctx context.Context, rec store.IdempotencyRecord) (store.IdempotencyRecord, bool, error) {
	if s.answers == nil {
		return rec, false, nil
	}
	now := s.now()
	got, taken, err := s.store.TakeOverIdempotencyKey(ctx, rec.UserID, rec.Key, s.owner, now, now.Add(s.keyLease))
	if err != nil {
		if errs.KindOf(err) == errs.NotFound {
			return rec, true, nil
		}
		return rec, false, err
	}
	if !taken {
		return got, false, nil
	}
	s.log.Info("took over an idempotency key whose holder's lease ran out", slog.Int64("user", rec.UserID),
		slog.String("previous_owner", rec.Owner))
	id := keyID{rec.UserID, rec.Key}
	s.hold(id, got.CreatedAt, true)
	a, released := s.settleHeld(ctx, id)
	switch {
	case released:
		return got, true, nil
	case a != nil:
		got.State, got.StatusCode, got.Body = store.IdemDone, a.Status, a.Body
		hdr, _ := json.Marshal(a.Headers)
		got.Headers = string(hdr)
	}
	return got, false, nil
}

// takeOverKeys is Run's sweep: every key in progress whose holder's lease ran
// out is taken over and settled, so a retry finds the real answer without
// waiting for a request to trigger it.
func (s *Service) takeOverKeys(ctx context.Context) {
	if s.answers == nil {
		return
	}
	expired, err := s.store.ExpiredIdempotencyLeases(ctx, s.now(), 100)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("listing expired idempotency leases failed", slog.String("error", err.Error()))
		}
		return
	}
	for _, rec := range expired {
		s.mu.Lock()
		_, mine := s.held[keyID{rec.UserID, rec.Key}]
		s.mu.Unlock()
		if mine || ctx.Err() != nil {
			continue
		}
		if _, _, err := s.takeOverKey(ctx, rec); err != nil {
			s.log.Warn("taking over an idempotency key failed", slog.String("error", err.Error()))
		}
	}
}

// settleHeld finishes a key this process holds and no request answers for, from
// what its request wrote: an operation on many VMs (an evacuation, a bulk
// action) → finished with the answer its request gave (202 with the operation);
// else the task row: no row (the request died before it, nothing started) or a
// lost row → released; a row with its task → finished with the answer the
// request would give now; a pending row → searched for, and finished when the
// search settles it (settleKeyOf).
func (s *Service) settleHeld(ctx context.Context, id keyID) (*Answer, bool) {
	s.mu.Lock()
	h := s.held[id]
	s.mu.Unlock()
	if h == nil || !h.awaiting {
		return nil, false
	}
	op, err := s.store.OperationByIdempotencyKey(ctx, id.user, id.key)
	switch {
	case err == nil && !op.CreatedAt.Before(h.since.Add(-time.Second)):
		return s.settleWithOperation(ctx, h, op)
	case err != nil && errs.KindOf(err) != errs.NotFound:
		return nil, false // the next sweep tries again: the lease is renewed meanwhile
	}
	row, err := s.store.TaskByIdempotencyKey(ctx, id.user, id.key)
	switch {
	case errs.KindOf(err) == errs.NotFound, err == nil && row.CreatedAt.Before(h.since.Add(-time.Second)):
		return nil, s.releaseHeld(ctx, h)
	case err != nil:
		return nil, false // the next sweep tries again: the lease is renewed meanwhile
	}
	return s.settleWith(ctx, h, row)
}

// settleKeyOf finishes the key a settled row's request ran under, when this
// process holds it waiting (a search found the task, or gave up).
func (s *Service) settleKeyOf(ctx context.Context, row store.Task) {
	if row.IdemKey == "" {
		return
	}
	s.mu.Lock()
	h := s.held[keyID{row.UserID, row.IdemKey}]
	s.mu.Unlock()
	if h == nil || !h.awaiting || row.CreatedAt.Before(h.since.Add(-time.Second)) {
		return
	}
	s.settleWith(ctx, h, row)
}

func (s *Service) settleWith(ctx context.Context, h *heldKey, row store.Task) (*Answer, bool) {
	switch {
	case row.Status == store.TaskLost && row.UPID == "" && row.LostReason == store.LostAmbiguous:
		// It may have started a task: the key keeps an answer that says so, and a
		// retry replays it rather than acting again.
		a := s.answers(KeyOutcome{Op: row.Op, Err: undecided(row)})
		return s.finishHeld(ctx, h, a, slog.Int64("task", row.ID), slog.String("maybe", row.MaybeUPID))
	case row.Status == store.TaskLost && row.UPID == "":
		return nil, s.releaseHeld(ctx, h)
	case row.UPID == "":
		s.startSearch(s.holderGone(ctx, row))
		return nil, false
	}
	a := s.answers(s.keyOutcome(ctx, row))
	return s.finishHeld(ctx, h, a, slog.Int64("task", row.ID), slog.String("upid", row.UPID))
}

// settleWithOperation finishes a key whose request created an operation on many
// VMs with the answer that request gave: the operation and its plan. The
// operation itself goes on under its own lease (internal/operations).
func (s *Service) settleWithOperation(ctx context.Context, h *heldKey, op store.Operation) (*Answer, bool) {
	a := s.answers(KeyOutcome{Op: op.Kind, OperationID: op.ID, Plan: []byte(op.Plan)})
	return s.finishHeld(ctx, h, a, slog.Int64("operation", op.ID))
}

// finishHeld stores a as the answer of a key this process holds.
func (s *Service) finishHeld(ctx context.Context, h *heldKey, a Answer, what ...any) (*Answer, bool) {
	s.dropHeld(h)
	if err := s.complete(ctx, h.id, a); err != nil {
		s.log.Warn("finishing an idempotency key failed", slog.Int64("user", h.id.user), slog.String("error", err.Error()))
		return nil, false
	}
	s.log.Info("finished an idempotency key with its request's outcome",
		append([]any{slog.Int64("user", h.id.user), slog.Int("status", a.Status)}, what...)...)
	return &a, false
}

func (s *Service) releaseHeld(ctx context.Context, h *heldKey) bool {
	s.dropHeld(h)
	err := s.store.ReleaseIdempotencyKey(ctx, h.id.user, h.id.key, s.owner)
	if err != nil && errs.KindOf(err) != errs.NotFound {
		s.log.Warn("releasing an idempotency key failed", slog.Int64("user", h.id.user), slog.String("error", err.Error()))
		return false
	}
	return true
}

// keyOutcome is what the request of a row with a task would answer now: a
// migration its task id; a power operation its task as it is (running: 202).
func (s *Service) keyOutcome(ctx context.Context, row store.Task) KeyOutcome {
	out := KeyOutcome{Op: row.Op, Outcome: Outcome{TaskID: row.UPID, Running: true, Task: rowView(row)}}
	if row.Op == OpMigrate {
		return out
	}
	u, err := pve.ParseUPID(row.UPID)
	if err != nil {
		return out
	}
	v, err := s.lookup(ctx, u, 0)
	if err != nil {
		return out
	}
	out.Outcome.Task = v
	if v.Finished() {
		out.Outcome.Running = false
		if v.Result == ResultFailed {
			out.Err = taskFailure(row.Op, GuestRef{ClusterID: row.ClusterID, Node: row.Node, VMID: row.VMID}, v)
		}
	}
	return out
}

// holderGone marks a pending row whose writer is known to be gone (the lease of
// its Idempotency-Key or its operation ran out) as of unknown outcome, unless this
// process is making its call: its POST is not under way any more, and a search
// need not wait WriteBound for it (claim.go).
func (s *Service) holderGone(ctx context.Context, row store.Task) store.Task {
	s.mu.Lock()
	mine := s.starting[row.ID]
	s.mu.Unlock()
	if mine || row.UPID != "" || row.Status != store.TaskPending || !row.OutcomeUnknownAt.IsZero() {
		return row
	}
	row.OutcomeUnknownAt = s.now()
	updated, err := s.store.UpdateTask(ctx, row)
	if err != nil {
		s.log.Warn("marking a dead holder's task row failed", slog.Int64("task", row.ID), slog.String("error", err.Error()))
		return row
	}
	return updated
}
