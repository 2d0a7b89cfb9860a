package fleet

import (
	"context"
	"sort"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// A grant may be scoped to PVE pools and tags (store.GrantScope; issue 23
// section 3, docs/decisions/0120): it then covers only the guests in one of
// its pools or carrying one of its tags, as the cluster's guest snapshot shows
// them (/cluster/resources: pool and tags), so a change made in PVE takes effect
// within SnapshotMaxAge. A guest outside the caller's scope is, to the caller,
// a guest that does not exist: the same 404, PVE not asked about it
// (docs/security.md item 42).

// InScope reports whether the guest vmid of a cluster is in the caller's
// scope there. A nil InScope is a cluster-wide grant: every guest is.
type InScope func(vmid int64) bool

// scopeOf is a's scope on a cluster: nil when a's grant there covers the whole
// cluster (an admin, whose API token narrows clusters, never guests; a grant
// without a scope). An API token acts with its owner's scope.
func (s *Service) scopeOf(ctx context.Context, a Actor, clusterID int64) (*store.GrantScope, error) {
	if a.Role == store.RoleAdmin {
		return nil, nil
	}
	g, err := s.cache.userGrants(ctx, a.UserID)
	if err != nil {
		return nil, err
	}
	sc, ok := g.scopes[clusterID]
	if !ok {
		return nil, nil
	}
	return &sc, nil
}

// Scoped reports whether a's grant on a cluster is scoped (covers only some
// guests). The caller has passed Require.
func (s *Service) Scoped(ctx context.Context, a Actor, clusterID int64) (bool, error) {
	sc, err := s.scopeOf(ctx, a, clusterID)
	return sc != nil, err
}

// ScopeFilter returns which of a cluster's guests are in a's scope: nil (every
// one) for a cluster-wide grant, else a lookup in the cluster's guest snapshot
// (read from PVE when older than SnapshotMaxAge). A guest the snapshot does not
// show is not in scope: its pool and tags are not known. The caller has passed
// Require.
func (s *Service) ScopeFilter(ctx context.Context, a Actor, clusterID int64) (InScope, error) {
	sc, err := s.scopeOf(ctx, a, clusterID)
	if err != nil || sc == nil {
		return nil, err
	}
	sn, err := s.guests(ctx, clusterID)
	if err != nil {
		return nil, err
	}
	all, scope := sn.val.all, *sc
	return func(vmid int64) bool {
		i := sort.Search(len(all), func(i int) bool { return all[i].VMID >= vmid })
		return i < len(all) && all[i].VMID == vmid && scope.Covers(all[i].Pool, all[i].Tags)
	}, nil
}

// RequireGuest is Require for an action on or a read of one guest: a's grant
// on the cluster must allow need and, when it is scoped, cover the guest. A
// guest outside the scope answers exactly as a guest that does not exist on
// that node (NotOnNodeOf with nothing found: the same 404, byte for byte),
// audited as access.denied like every refusal; PVE is not asked about it.
func (s *Service) RequireGuest(ctx context.Context, a Actor, clusterID int64, g pve.Guest, need, attempt string) error {
	if err := s.Require(ctx, a, clusterID, need, attempt); err != nil {
		return err
	}
	in, err := s.ScopeFilter(ctx, a, clusterID)
	if err != nil || in == nil || in(int64(g.VMID)) {
		return err
	}
	kind := g.Kind
	if !kind.Valid() {
		kind = pve.Qemu
	}
	return s.outOfScope(ctx, clusterID, need, attempt, GuestNotFound(kind, int64(g.VMID), g.Node))
}

// GuestNotFound is the 404 of a guest that is not on node and that the
// cluster's resources do not show elsewhere (NotOnNodeOf's last answer).
func GuestNotFound(kind pve.GuestKind, vmid int64, node string) error {
	return NotOnNodeOf(kind, vmid, node, nil, nil)
}

// OutOfScope audits a refusal for want of scope (something about a guest
// outside a's scope, answered with notFound, the error a thing that does not
// exist gets) and returns notFound.
func (s *Service) OutOfScope(ctx context.Context, clusterID int64, need, attempt string, notFound error) error {
	return s.outOfScope(ctx, clusterID, need, attempt, notFound)
}

func (s *Service) outOfScope(ctx context.Context, clusterID int64, need, attempt string, notFound error) error {
	s.audit.Record(ctx, store.AuditRecord{Action: "access.denied", ClusterID: clusterID, Target: attempt,
		Params: audit.Params(map[string]string{"need": need, "scope": "outside"}), Result: "denied",
		Reason: audit.Reason(notFound)})
	return notFound
}

// RequireWide is Require for an action on a whole node or cluster (evacuation,
// maintenance): a scoped grant, which covers only some guests, does not allow
// it (403 scoped_grant, audited), whatever its role.
func (s *Service) RequireWide(ctx context.Context, a Actor, clusterID int64, need, attempt string) error {
	if err := s.Require(ctx, a, clusterID, need, attempt); err != nil {
		return err
	}
	sc, err := s.scopeOf(ctx, a, clusterID)
	if err != nil || sc == nil {
		return err
	}
	err = errs.R(errs.Forbidden, errs.ReasonScopedGrant,
		"your grant on this cluster covers only some guests (a pool or tag scope); this action needs a cluster-wide operator grant")
	s.audit.Record(ctx, store.AuditRecord{Action: "access.denied", ClusterID: clusterID, Target: attempt,
		Params: audit.Params(map[string]string{"need": need, "scope": "cluster"}), Result: "denied", Reason: audit.Reason(err)})
	return err
}
