package vmops

import (
	"context"
	"errors"
	"slices"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/pve"
)

// Grants checks a caller's grant on a cluster; *fleet.Service is one. Every use
// case checks its caller's grant itself, first, so that a front end is only a
// way in and the rule is said once (docs/security.md items 18, 19; issue 18
// (docs/history.md)).
type Grants interface {
	// Require is nil when a's grant allows need on the cluster, else NotFound
	// (no grant and no such cluster answer alike) or Forbidden, audited as
	// access.denied with attempt as its target.
	Require(ctx context.Context, a fleet.Actor, clusterID int64, need, attempt string) error
	// Readable lists the clusters whose tasks a may read; all: every one.
	Readable(ctx context.Context, a fleet.Actor) (ids []int64, all bool, err error)
	// RequireGuest is Require for one guest: a grant scoped to pools and tags
	// must also cover it, else the guest answers as one that does not exist
	// (docs/security.md item 42).
	RequireGuest(ctx context.Context, a fleet.Actor, clusterID int64, g pve.Guest, need, attempt string) error
	// ScopeFilter says which guests of a cluster a's grant covers (nil: all).
	ScopeFilter(ctx context.Context, a fleet.Actor, clusterID int64) (fleet.InScope, error)
	// RequireWide is Require for an action on a whole node: a scoped grant
	// does not allow it.
	RequireWide(ctx context.Context, a fleet.Actor, clusterID int64, need, attempt string) error
	// OutOfScope audits a refusal of something outside a's scope and returns
	// notFound, the answer of a thing that does not exist.
	OutOfScope(ctx context.Context, clusterID int64, need, attempt string, notFound error) error
}

// ErrDenied is in the chain of every refusal for want of a grant (fleet's
// NotFound or Forbidden): a front end that words other refusals itself (the web
// UI's notices) answers these as they are.
var ErrDenied = errors.New("the caller's grant does not allow this")

// deniedError is a refusal for want of a grant: the fleet's error, marked.
type deniedError struct{ err error }

func (d deniedError) Error() string   { return d.err.Error() }
func (d deniedError) Unwrap() []error { return []error{d.err, ErrDenied} }

// denied marks err as a refusal for want of a grant when it is one.
func denied(err error) error {
	if k := errs.KindOf(err); k == errs.NotFound || k == errs.Forbidden {
		return deniedError{err}
	}
	return err
}

// require checks a's grant on a cluster (need: fleet.GrantOperator to act,
// fleet.GrantViewer to read). A refusal is audited with the request as the
// caller made it (Actor.Via), or what the use case was asked when the caller
// did not say.
func (s *Service) require(ctx context.Context, a Actor, clusterID int64, need, what string) error {
	if s.grants == nil {
		// Refused rather than allowed: a service built without a grant checker
		// is a wiring mistake, not a licence.
		return errs.E(errs.Internal, "vmops: no grant checker configured")
	}
	attempt := a.Via
	if attempt == "" {
		attempt = what
	}
	return denied(s.grants.Require(ctx, a.Fleet(), clusterID, need, attempt))
}

// requireGuest is require for an action on or a read of one guest: when a's
// grant is scoped to pools and tags it must cover the guest, else the guest
// answers as one that does not exist on that node, PVE not asked.
func (s *Service) requireGuest(ctx context.Context, a Actor, vm GuestRef, need, what string) error {
	if s.grants == nil {
		return errs.E(errs.Internal, "vmops: no grant checker configured")
	}
	attempt := a.Via
	if attempt == "" {
		attempt = what
	}
	return denied(s.grants.RequireGuest(ctx, a.Fleet(), vm.ClusterID, vm.guest(), need, attempt))
}

// RequireGuest is requireGuest for the use cases built on this service's
// (internal/operations, internal/console).
func (s *Service) RequireGuest(ctx context.Context, a Actor, vm GuestRef, need, what string) error {
	return s.requireGuest(ctx, a, vm, need, what)
}

// RequireWide is require for an action on a whole node (evacuation,
// maintenance): a grant scoped to pools and tags does not allow it.
func (s *Service) RequireWide(ctx context.Context, a Actor, clusterID int64, need, what string) error {
	if s.grants == nil {
		return errs.E(errs.Internal, "vmops: no grant checker configured")
	}
	attempt := a.Via
	if attempt == "" {
		attempt = what
	}
	return denied(s.grants.RequireWide(ctx, a.Fleet(), clusterID, need, attempt))
}

// ScopeFilter says which guests of a cluster a's grant covers: nil for every
// one (a cluster-wide grant). The caller has checked a's grant on the cluster.
func (s *Service) ScopeFilter(ctx context.Context, a Actor, clusterID int64) (fleet.InScope, error) {
	if s.grants == nil {
		return nil, errs.E(errs.Internal, "vmops: no grant checker configured")
	}
	return s.grants.ScopeFilter(ctx, a.Fleet(), clusterID)
}

// OutOfScope audits a refusal of something outside a's scope (attempt: the
// request as a made it, else what) and returns notFound marked as a refusal.
func (s *Service) OutOfScope(ctx context.Context, a Actor, clusterID int64, need, what string, notFound error) error {
	attempt := a.Via
	if attempt == "" {
		attempt = what
	}
	return denied(s.grants.OutOfScope(ctx, clusterID, need, attempt, notFound))
}

// readScope is what a list of tasks or operations may show a: with clusterID
// (non-zero) that one cluster, once a's viewer grant on it is checked (nil:
// nothing more to narrow); without one, the clusters a holds a grant on, or nil
// for every one (an admin). asked, when not nil, narrows it further to those
// clusters. The lists read a non-nil but empty scope as "none".
func (s *Service) readScope(ctx context.Context, a Actor, clusterID int64, asked []int64, what string) ([]int64, error) {
	if clusterID != 0 {
		return asked, s.require(ctx, a, clusterID, fleet.GrantViewer, what)
	}
	if s.grants == nil {
		return nil, errs.E(errs.Internal, "vmops: no grant checker configured")
	}
	ids, all, err := s.grants.Readable(ctx, a.Fleet())
	switch {
	case err != nil:
		return nil, err
	case all:
		return asked, nil
	case asked == nil:
		return ids, nil
	}
	out := make([]int64, 0, len(asked))
	for _, id := range asked {
		if slices.Contains(ids, id) {
			out = append(out, id)
		}
	}
	return out, nil
}

// MayAct is nil when a may act on the guests of a cluster (power, migrate,
// evacuate: an operator grant), else the refusal, audited like any other. A
// front end asks it before it offers the form of an action (the web UI's
// migrate and force-stop pages), so that the form answers as the action would.
func (s *Service) MayAct(ctx context.Context, a Actor, clusterID int64) error {
	return s.require(ctx, a, clusterID, fleet.GrantOperator, "act on the guests of a cluster")
}

// requireTask checks a's viewer grant on the cluster of task id: the one vmgate
// recorded for a task it started, else clusterHint (TaskCluster). A task on a
// cluster a holds no grant on answers like a cluster that does not exist
// (docs/security.md item 18).
func (s *Service) requireTask(ctx context.Context, a Actor, id string, clusterHint int64) error {
	clusterID, err := s.TaskCluster(ctx, id, clusterHint)
	if err != nil {
		return err
	}
	if s.grants != nil && !s.readableCluster(ctx, a, clusterID) && s.readsRemoteTarget(ctx, a, id) { // remote.go
		return nil
	}
	if err := s.require(ctx, a, clusterID, fleet.GrantViewer, "read task "+id); err != nil {
		return err
	}
	return s.requireTaskScope(ctx, a, id, clusterID, clusterHint, fleet.GrantViewer, "read task "+id)
}

// Require is require for the use cases built on this service's (internal/operations:
// an evacuation, a bulk action, the reads of an operation): the caller's grant
// on a cluster, a refusal audited and marked with ErrDenied.
func (s *Service) Require(ctx context.Context, a Actor, clusterID int64, need, what string) error {
	return s.require(ctx, a, clusterID, need, what)
}

// ReadScope is readScope for the lists of the use cases built on this
// service's (internal/operations' list of operations).
func (s *Service) ReadScope(ctx context.Context, a Actor, clusterID int64, asked []int64, what string) ([]int64, error) {
	return s.readScope(ctx, a, clusterID, asked, what)
}

// Denied marks err as a refusal for want of a grant (ErrDenied in its chain)
// when it is one (fleet's NotFound or Forbidden).
func Denied(err error) error { return denied(err) }
