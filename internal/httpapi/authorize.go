package httpapi

import (
	"net/http"

	"github.com/vmgate/vmgate/internal/fleet"
)

// actor is the caller as internal/fleet sees it: an API token's grants go along
// as the actor's Limit, which the fleet applies under the owner's at every check,
// and its id, which no grant change accepts.
func actor(r *http.Request) fleet.Actor {
	p := principal(r)
	return fleet.Actor{UserID: p.UserID, Email: p.Email, Role: p.Role, Limit: p.TokenGrants, APITokenID: p.APITokenID}
}

// pathClusterID reads and validates {clusterId}.
func pathClusterID(r *http.Request) (int64, error) {
	return parseIntParam("clusterId", r.PathValue("clusterId"), 1, 1<<53)
}

// authorize checks the caller's grant on a cluster (docs/security.md items 18, 19); fleet
// audits a denial, naming the request. It runs after path and body validation and
// before anything touches PVE.
func (s *Server) authorize(r *http.Request, clusterID int64, need string) error {
	return s.fleet.Require(r.Context(), actor(r), clusterID, need, r.Method+" "+r.URL.Path)
}

// operatorWrite ends a guest or operation write handler once its path, query and
// body are valid: the caller's operator grant on the cluster (404/403), then act.
// The route's Idempotency-Key is the keyed middleware's, around the handler.
func (s *Server) operatorWrite(w http.ResponseWriter, r *http.Request, clusterID int64,
	act func(w http.ResponseWriter, r *http.Request) error) error {
	if err := s.authorize(r, clusterID, fleet.GrantOperator); err != nil {
		return err
	}
	return act(w, r)
}

// readScope is what a list of tasks or operations may show the caller: with a
// clusterId (non-zero) that one cluster, once the caller's grant on it is checked,
// and nil for "no further restriction"; without one the clusters the caller may
// read, or nil for all of them (an admin). The use cases read a non-nil but empty
// list as "none".
func (s *Server) readScope(r *http.Request, clusterID int64) ([]int64, error) {
	if clusterID != 0 {
		return nil, s.authorize(r, clusterID, fleet.GrantViewer)
	}
	ids, all, err := s.fleet.Readable(r.Context(), actor(r))
	if err != nil || all {
		return nil, err
	}
	return ids, nil
}
