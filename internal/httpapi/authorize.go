package httpapi

import (
	"context"
	"net/http"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/store"
)

// clusterAuthorizer decides whether an actor may act on a cluster.
type clusterAuthorizer interface {
	// Authorize returns the actor's effective role on the cluster, NotFound ("cluster
	// not found", identical for a missing cluster and one without a grant) or Forbidden.
	Authorize(ctx context.Context, a fleet.Actor, clusterID int64, need string) (string, error)
}

// actor is the caller as internal/fleet sees it.
func actor(r *http.Request) fleet.Actor {
	p := principal(r)
	return fleet.Actor{UserID: p.UserID, Email: p.Email, Role: p.Role}
}

// pathClusterID reads and validates {clusterId}.
func pathClusterID(r *http.Request) (int64, error) {
	return parseIntParam("clusterId", r.PathValue("clusterId"), 1, 1<<53)
}

// authorize checks the caller's grant on a cluster (SECURITY.md 18, 19) and audits a
// denial. It runs after path and body validation and before anything touches PVE.
func (s *Server) authorize(r *http.Request, clusterID int64, need string) error {
	_, err := s.fleet.Authorize(r.Context(), actor(r), clusterID, need)
	if err == nil {
		return nil
	}
	if k := errs.KindOf(err); k == errs.NotFound || k == errs.Forbidden {
		s.trail.Record(r.Context(), store.AuditRecord{Action: "access.denied", ClusterID: clusterID,
			Target: r.Method + " " + r.URL.Path, Params: jsonString(map[string]string{"need": need}), Result: "denied"})
	}
	return err
}
