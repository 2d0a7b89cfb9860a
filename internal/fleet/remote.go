package fleet

import (
	"context"
	"strconv"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/pve"
)

// ResolveCluster finds a registered cluster by its id ("2") or its name
// ("dev-b"). It does not authorize: the caller checks the grant next, and a
// cluster the caller may not see answers the same NotFound as a missing one.
func (s *Service) ResolveCluster(ctx context.Context, ref string) (int64, string, error) {
	cs, err := s.cache.clusterSet(ctx)
	if err != nil {
		return 0, "", err
	}
	if id, err := strconv.ParseInt(ref, 10, 64); err == nil {
		if rec, ok := cs.byID[id]; ok {
			return id, rec.row.Name, nil
		}
		return 0, "", clusterNotFound()
	}
	for _, rec := range cs.sorted {
		if rec.row.Name == ref {
			return rec.row.ID, rec.row.Name, nil
		}
	}
	return 0, "", clusterNotFound()
}

// RemoteEndpoint is PVE's target-endpoint for a remote migration to a node of
// a registered cluster: the endpoint vmgate learned for that node, its pinned
// fingerprint, and the cluster's API token with its secret unsealed. The
// secret leaves vmgate towards the source cluster (docs/security.md item 39).
func (s *Service) RemoteEndpoint(ctx context.Context, clusterID int64, node string) (pve.RemoteEndpoint, error) {
	rec, err := s.record(ctx, clusterID)
	if err != nil {
		return pve.RemoteEndpoint{}, err
	}
	c := rec.row
	var url, fp string
	for _, e := range c.Endpoints {
		if e.Node == node {
			url, fp = e.URL, e.Fingerprint
			break
		}
	}
	if url == "" {
		return pve.RemoteEndpoint{}, errs.E(errs.Conflict, "vmgate knows no endpoint of node %s of cluster %s: register one, or pick another node", node, c.Name)
	}
	if fp == "" {
		// Without a fingerprint PVE's source would trust the first certificate the
		// target presents (it reads /nodes/localhost/certificates/info over that
		// connection): a move sends the token only to a pinned endpoint.
		return pve.RemoteEndpoint{}, errs.E(errs.Conflict,
			"vmgate has no pinned fingerprint for node %s of cluster %s (it trusts a CA there): pin the node's fingerprint in the cluster's registration to move guests to it", node, c.Name)
	}
	secret, err := s.openSecret(c)
	if err != nil {
		return pve.RemoteEndpoint{}, errs.Wrap(errs.Internal, err, "open the token secret of cluster %d", c.ID)
	}
	ep, err := pve.RemoteEndpointFromURL(url, fp, c.TokenID, secret)
	if err != nil {
		return pve.RemoteEndpoint{}, errs.Wrap(errs.Internal, err, "endpoint of node %s", node)
	}
	return ep, nil
}

// RefreshCluster forgets this replica's snapshots of a cluster's guests and
// nodes, so that the next read asks PVE (after a move to another cluster,
// whose end vmgate knows before a snapshot's age has passed).
func (s *Service) RefreshCluster(clusterID int64) {
	s.guestSnaps.drop(clusterID)
	s.nodeSnaps.drop(clusterID)
}
