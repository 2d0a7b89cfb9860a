package fleet

import (
	"context"
	"fmt"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// Authorize returns the actor's effective role on a cluster ("admin", "operator" or
// "viewer") when it allows need (store.GrantViewer or store.GrantOperator).
//
// Admins may do everything on every existing cluster. Anyone else needs a grant: no
// grant and no such cluster give the same NotFound ("cluster not found"), so that the
// existence of a cluster does not leak (BOLA); a viewer asking for operator gets
// Forbidden. Authorize reads only the store; it never calls PVE.
func (s *Service) Authorize(ctx context.Context, a Actor, clusterID int64, need string) (string, error) {
	if need != store.GrantViewer && need != store.GrantOperator {
		return "", fmt.Errorf("authorize: unknown need %q", need)
	}
	if a.UserID <= 0 || clusterID <= 0 {
		return "", clusterNotFound()
	}
	if a.Role == store.RoleAdmin {
		if _, err := s.store.ClusterByID(ctx, clusterID); err != nil {
			if errs.KindOf(err) == errs.NotFound {
				return "", clusterNotFound()
			}
			return "", err
		}
		return store.RoleAdmin, nil
	}
	g, err := s.store.GrantFor(ctx, a.UserID, clusterID)
	if err != nil {
		if errs.KindOf(err) == errs.NotFound {
			return "", clusterNotFound()
		}
		return "", err
	}
	switch {
	case g.Role == store.GrantOperator:
		return g.Role, nil
	case g.Role == store.GrantViewer && need == store.GrantViewer:
		return g.Role, nil
	case g.Role == store.GrantViewer:
		return "", errs.R(errs.Forbidden, "forbidden", "your viewer grant on this cluster does not allow this action; it needs an operator grant")
	default:
		// A role this code does not know grants nothing.
		return "", errs.R(errs.Forbidden, "forbidden", "your grant on this cluster does not allow this action")
	}
}

// ValidGrantRole reports whether role is a grant role.
func ValidGrantRole(role string) bool {
	return role == store.GrantOperator || role == store.GrantViewer
}

// PutGrant gives a user a role on a cluster, or changes it.
func (s *Service) PutGrant(ctx context.Context, userID, clusterID int64, role string) (store.Grant, error) {
	if !ValidGrantRole(role) {
		return store.Grant{}, invalid("role must be %q or %q", store.GrantOperator, store.GrantViewer)
	}
	if err := s.grantTargets(ctx, userID, clusterID); err != nil {
		return store.Grant{}, err
	}
	return s.store.PutGrant(ctx, store.Grant{UserID: userID, ClusterID: clusterID, Role: role, CreatedAt: s.now()})
}

// DeleteGrant removes a user's grant on a cluster. Removing a grant that does not
// exist is NotFound, so a typo in the user id does not pass for success.
func (s *Service) DeleteGrant(ctx context.Context, userID, clusterID int64) error {
	if err := s.grantTargets(ctx, userID, clusterID); err != nil {
		return err
	}
	if err := s.store.DeleteGrant(ctx, userID, clusterID); err != nil {
		if errs.KindOf(err) == errs.NotFound {
			return errs.R(errs.NotFound, "not_found", "user %d has no grant on cluster %d", userID, clusterID)
		}
		return err
	}
	return nil
}

// grantTargets checks that both ends of a grant exist, naming the missing one (the
// caller is an admin: there is nothing to hide).
func (s *Service) grantTargets(ctx context.Context, userID, clusterID int64) error {
	if _, err := s.Cluster(ctx, clusterID); err != nil {
		return err
	}
	if _, err := s.store.UserByID(ctx, userID); err != nil {
		if errs.KindOf(err) == errs.NotFound {
			return errs.R(errs.NotFound, "not_found", "user %d not found", userID)
		}
		return err
	}
	return nil
}
