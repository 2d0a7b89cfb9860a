package httpapi

import (
	"net/http"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
)

// grantScopeRoutes read one grant with its scope (issue 23 section 3): PUT
// /api/v1/clusters/{clusterId}/grants/{userId} (clusters.go) gives it, a scope
// in its body narrowing it to pools and tags.
func (s *Server) grantScopeRoutes() []route {
	return []route{
		{"GET", "/api/v1/clusters/{clusterId}/grants/{userId}", admin, s.getGrant},
	}
}

func clusterGrantOf(g fleet.Grant) clusterGrantJSON {
	return clusterGrantJSON{UserID: g.UserID, ClusterID: g.ClusterID, Role: g.Role, CreatedAt: g.CreatedAt.UTC(), Scope: g.Scope}
}

func (s *Server) getGrant(w http.ResponseWriter, r *http.Request) error {
	clusterID, userID, err := pathGrant(r)
	if err != nil {
		return err
	}
	if err := checkQuery(r); err != nil {
		return err
	}
	gs, err := s.fleet.UserGrants(r.Context(), userID)
	if err != nil {
		return err
	}
	for _, g := range gs {
		if g.ClusterID == clusterID {
			writeData(w, clusterGrantOf(g))
			return nil
		}
	}
	return errs.E(errs.NotFound, "user %d has no grant on cluster %d", userID, clusterID)
}
