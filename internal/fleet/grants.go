package fleet

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/store"
)

// Authorize returns the actor's effective role on a cluster ("admin", "operator" or
// "viewer") when it allows need (store.GrantViewer or store.GrantOperator).
//
// Admins may do everything on every existing cluster. Anyone else needs a grant: no
// grant and no such cluster give the same NotFound ("cluster not found"), so that the
// existence of a cluster does not leak (BOLA); a viewer asking for operator gets
// Forbidden. An API token's grants (Actor.Limit) cap the owner's role cluster by
// cluster, at every call, so that an owner who loses a grant takes their tokens'
// with it at once. Authorize answers from the fleet's cache (kept true by the
// store's change feed); it never calls PVE.
func (s *Service) Authorize(ctx context.Context, a Actor, clusterID int64, need string) (string, error) {
	if need != store.GrantViewer && need != store.GrantOperator {
		return "", fmt.Errorf("authorize: unknown need %q", need)
	}
	if a.UserID <= 0 || clusterID <= 0 {
		return "", clusterNotFound()
	}
	var role string
	if a.Role == store.RoleAdmin {
		if _, err := s.record(ctx, clusterID); err != nil {
			return "", err
		}
		role = store.RoleAdmin
	} else {
		roles, err := s.cache.roles(ctx, a.UserID)
		if err != nil {
			return "", err
		}
		role = roles[clusterID]
	}
	role = a.limited(clusterID, role)
	switch {
	case role == "":
		return "", clusterNotFound()
	case role == store.RoleAdmin || role == store.GrantOperator:
		return role, nil
	case role == store.GrantViewer && need == store.GrantViewer:
		return role, nil
	case role == store.GrantViewer:
		return "", errs.E(errs.Forbidden, "your viewer grant on this cluster does not allow this action; it needs an operator grant")
	default:
		// A role this code does not know grants nothing.
		return "", errs.E(errs.Forbidden, "your grant on this cluster does not allow this action")
	}
}

// Require is Authorize for a use case about to act or read: nil when the actor's
// grant allows need on the cluster, else Authorize's NotFound or Forbidden,
// audited as access.denied with attempt (the request as the caller made it) as
// its target. The use cases (vmops, the fleet's reads) call it first, after
// judging the request and before anything touches PVE.
func (s *Service) Require(ctx context.Context, a Actor, clusterID int64, need, attempt string) error {
	_, err := s.Authorize(ctx, a, clusterID, need)
	if err == nil {
		return nil
	}
	if k := errs.KindOf(err); k == errs.NotFound || k == errs.Forbidden {
		s.audit.Record(ctx, store.AuditRecord{Action: "access.denied", ClusterID: clusterID, Target: attempt,
			Params: audit.Params(map[string]string{"need": need}), Result: "denied", Reason: audit.Reason(err)})
	}
	return err
}

// requireRead checks the actor's viewer grant on a cluster before one of the
// fleet's reads, audited when refused with the request as the actor made it
// (Actor.Via): the reads check their caller's grant themselves, like every use
// case (issue 18 (docs/history.md)).
func (s *Service) requireRead(ctx context.Context, a Actor, clusterID int64) error {
	attempt := a.Via
	if attempt == "" {
		attempt = "read cluster " + strconv.FormatInt(clusterID, 10)
	}
	return s.Require(ctx, a, clusterID, GrantViewer, attempt)
}

// requireGuestRead is requireRead for a read of one guest: a scoped grant must
// cover it (RequireGuest).
func (s *Service) requireGuestRead(ctx context.Context, a Actor, clusterID int64, g pve.Guest) error {
	attempt := a.Via
	if attempt == "" {
		attempt = "read " + g.Kind.Noun() + " " + strconv.Itoa(g.VMID)
	}
	return s.RequireGuest(ctx, a, clusterID, g, GrantViewer, attempt)
}

// Grant roles on one cluster.
const (
	GrantOperator = store.GrantOperator // power, migrate, read
	GrantViewer   = store.GrantViewer   // read
)

// Readable says which clusters' tasks the actor may list: all of them for an admin
// (all is true; tasks of deleted clusters too), otherwise the clusters the actor
// holds a grant on, whatever its role (any grant allows reading), possibly none.
// An API token's grants narrow either to the clusters they name.
func (s *Service) Readable(ctx context.Context, a Actor) (ids []int64, all bool, err error) {
	if a.IsAdmin() {
		return nil, true, nil
	}
	var roles userRoles
	if a.Role == store.RoleAdmin {
		roles = make(userRoles, len(a.Limit))
		for id := range a.Limit {
			roles[id] = store.RoleAdmin
		}
	} else if roles, err = s.cache.roles(ctx, a.UserID); err != nil {
		return nil, false, err
	}
	ids = make([]int64, 0, len(roles))
	for id, role := range roles {
		if roleRank(a.limited(id, role)) > 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, false, nil
}

// ValidGrantRole reports whether role is a grant role.
func ValidGrantRole(role string) bool {
	return role == GrantOperator || role == GrantViewer
}

// Grant is a user's role on one cluster, as an admin sees it.
type Grant struct {
	UserID    int64
	ClusterID int64
	Role      string // GrantOperator or GrantViewer
	CreatedAt time.Time
	// Scope is nil for a grant on the whole cluster, else the pools and tags
	// whose guests it covers (scope.go).
	Scope *GrantScope
}

func userTarget(id int64) string { return "user:" + strconv.FormatInt(id, 10) }

// requireAdminSession is the check of every grant change: only an admin (403
// forbidden) from a login session (403 session_required: an API token, even an
// admin's, changes no grant; docs/security.md item 32, docs/decisions/0038). A refusal is
// audited as access.denied with attempt as its target.
func (s *Service) requireAdminSession(ctx context.Context, a Actor, clusterID int64, attempt string) error {
	var err error
	switch {
	case !a.IsAdmin():
		err = errs.E(errs.Forbidden, "this action needs the admin role")
	case a.APITokenID != "":
		err = errs.R(errs.Forbidden, errs.ReasonSessionRequired,
			"an API token cannot change grants: log in with your password for this")
	default:
		return nil
	}
	s.audit.Record(ctx, store.AuditRecord{Action: "access.denied", ClusterID: clusterID, Target: attempt, Result: "denied",
		Reason: audit.Reason(err)})
	return err
}

// PutGrant is admin a giving a user a role on a cluster, or changing it. Only an
// admin's login session may (requireAdminSession). A role that is not a grant
// role is refused next and not audited; every other attempt is audited as
// grant.put.
// A put replaces the whole grant: a grant that was scoped covers the whole
// cluster after it (PutScopedGrant keeps or changes a scope).
func (s *Service) PutGrant(ctx context.Context, a Actor, userID, clusterID int64, role string) (Grant, error) {
	return s.PutScopedGrant(ctx, a, userID, clusterID, role, nil)
}

// PutScopedGrant is PutGrant with a scope: when not nil, the grant covers only
// the guests in one of its pools or carrying one of its tags (scope.go); nil
// gives the whole cluster.
func (s *Service) PutScopedGrant(ctx context.Context, a Actor, userID, clusterID int64, role string, scope *GrantScope) (Grant, error) {
	if err := s.requireAdminSession(ctx, a, clusterID, "grant.put"); err != nil {
		return Grant{}, err
	}
	if !ValidGrantRole(role) {
		return Grant{}, invalid("role must be %q or %q", GrantOperator, GrantViewer)
	}
	sc, err := validScope(scope)
	if err != nil {
		return Grant{}, err
	}
	g, err := s.putGrant(ctx, userID, clusterID, role, sc)
	params := map[string]any{"role": role}
	if !sc.IsZero() {
		params["scope"] = GrantScope(sc)
	}
	s.audit.Record(ctx, store.AuditRecord{Action: "grant.put", ClusterID: clusterID, Target: userTarget(userID),
		Params: audit.Params(params), Result: audit.Result(err)})
	if err != nil {
		return Grant{}, err
	}
	return grantOf(g), nil
}

func (s *Service) putGrant(ctx context.Context, userID, clusterID int64, role string, scope store.GrantScope) (store.Grant, error) {
	if err := s.grantTargets(ctx, userID, clusterID); err != nil {
		return store.Grant{}, err
	}
	return s.store.PutGrant(ctx, store.Grant{UserID: userID, ClusterID: clusterID, Role: role, CreatedAt: s.now(), Scope: scope})
}

// DeleteGrant is admin a removing a user's grant on a cluster. Only an admin's
// login session may (requireAdminSession). Removing a grant that does not exist
// is NotFound, so a typo in the user id does not pass for success. Every other
// attempt is audited as grant.delete.
func (s *Service) DeleteGrant(ctx context.Context, a Actor, userID, clusterID int64) error {
	if err := s.requireAdminSession(ctx, a, clusterID, "grant.delete"); err != nil {
		return err
	}
	err := s.deleteGrant(ctx, userID, clusterID)
	s.audit.Record(ctx, store.AuditRecord{Action: "grant.delete", ClusterID: clusterID, Target: userTarget(userID), Result: audit.Result(err)})
	return err
}

func (s *Service) deleteGrant(ctx context.Context, userID, clusterID int64) error {
	if err := s.grantTargets(ctx, userID, clusterID); err != nil {
		return err
	}
	if err := s.store.DeleteGrant(ctx, userID, clusterID); err != nil {
		if errs.KindOf(err) == errs.NotFound {
			return errs.E(errs.NotFound, "user %d has no grant on cluster %d", userID, clusterID)
		}
		return err
	}
	return nil
}

// grantTargets checks that both ends of a grant exist, naming the missing one (the
// caller is an admin: there is nothing to hide).
func (s *Service) grantTargets(ctx context.Context, userID, clusterID int64) error {
	if _, err := s.cluster(ctx, clusterID); err != nil {
		return err
	}
	if _, err := s.store.UserByID(ctx, userID); err != nil {
		if errs.KindOf(err) == errs.NotFound {
			return errs.E(errs.NotFound, "user %d not found", userID)
		}
		return err
	}
	return nil
}

// UserGrants lists a user's grants by cluster id, for an admin (the caller has
// passed the admin check; grants of a user who does not exist are none).
func (s *Service) UserGrants(ctx context.Context, userID int64) ([]Grant, error) {
	gs, err := s.store.UserGrants(ctx, userID)
	if err != nil {
		return nil, err
	}
	out := make([]Grant, 0, len(gs))
	for _, g := range gs {
		out = append(out, grantOf(g))
	}
	return out, nil
}
