package httpapi

import (
	"net/http"

	"github.com/vmgate/vmgate/internal/fleet"
)

// actor is the caller as internal/fleet sees it: an API token's grants go along
// as the actor's Limit, which the fleet applies under the owner's at every check.
func actor(r *http.Request) fleet.Actor {
	p := principal(r)
	return fleet.Actor{UserID: p.UserID, Email: p.Email, Role: p.Role, Limit: p.TokenGrants}
}

// pathClusterID reads and validates {clusterId}.
func pathClusterID(r *http.Request) (int64, error) {
	return parseIntParam("clusterId", r.PathValue("clusterId"), 1, 1<<53)
}

// authorize checks the caller's grant on a cluster (SECURITY.md 18, 19); fleet
// audits a denial, naming the request. It runs after path and body validation and
// before anything touches PVE.
func (s *Server) authorize(r *http.Request, clusterID int64, need string) error {
	return s.fleet.Require(r.Context(), actor(r), clusterID, need, r.Method+" "+r.URL.Path)
}
