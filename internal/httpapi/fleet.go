package httpapi

import (
	"context"

	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/vmops"
)

// Fleet is what the HTTP layer needs of internal/fleet (clusters, grants,
// authorization, inventory). *fleet.Service implements it.
type Fleet interface {
	// Require checks the actor's grant on a cluster and audits a refusal
	// (fleet.Service.Require).
	Require(ctx context.Context, a fleet.Actor, clusterID int64, need, attempt string) error
	// Readable says which clusters' tasks the actor may list.
	Readable(ctx context.Context, a fleet.Actor) (ids []int64, all bool, err error)

	Register(ctx context.Context, spec fleet.ClusterSpec) (fleet.Cluster, error)
	Update(ctx context.Context, id int64, p fleet.ClusterPatch) (fleet.Cluster, error)
	Delete(ctx context.Context, id int64) error
	Cluster(ctx context.Context, id int64) (fleet.Cluster, error)
	List(ctx context.Context) ([]fleet.Cluster, error)

	PutGrant(ctx context.Context, a fleet.Actor, userID, clusterID int64, role string) (fleet.Grant, error)
	DeleteGrant(ctx context.Context, a fleet.Actor, userID, clusterID int64) error

	Clusters(ctx context.Context, a fleet.Actor) ([]fleet.ClusterView, error)
	NodeList(ctx context.Context, clusterID int64) (fleet.NodeList, error)
	VMList(ctx context.Context, clusterID int64, q fleet.VMQuery) (fleet.VMList, error)
	GuestList(ctx context.Context, clusterID int64, kind string, q fleet.VMQuery) (fleet.VMList, error)
	FleetGuests(ctx context.Context, a fleet.Actor, q fleet.FleetQuery) (fleet.FleetGuestList, error)
	GuestStatus(ctx context.Context, clusterID int64, kind, node string, vmid int64) (fleet.VMStatusView, error)
}

// fleetRoutes are the cluster administration (docs/design.md §3.4, admins only; grants
// from an admin's login session only, docs/security.md item 32) and the inventory reads
// (any authenticated user; each handler checks the grant).
func (s *Server) fleetRoutes() []route {
	return []route{
		{"GET", "/api/v1/clusters", admin, s.listClusters},
		{"POST", "/api/v1/clusters", admin, s.createCluster},
		{"GET", "/api/v1/clusters/{clusterId}", admin, s.getCluster},
		{"PATCH", "/api/v1/clusters/{clusterId}", admin, s.patchCluster},
		{"DELETE", "/api/v1/clusters/{clusterId}", admin, s.deleteCluster},
		{"PUT", "/api/v1/clusters/{clusterId}/grants/{userId}", adminSession, s.putGrant},
		{"DELETE", "/api/v1/clusters/{clusterId}/grants/{userId}", adminSession, s.deleteGrant},

		{"GET", "/api/v1/pve/clusters", authed, s.inventoryClusters},
		{"GET", "/api/v1/pve/clusters/{clusterId}/nodes", authed, s.clusterNodes},
		{"GET", "/api/v1/pve/clusters/{clusterId}/vms", authed, s.clusterVMs},
		{"GET", "/api/v1/pve/vm/{clusterId}/{node}/{vmid}", authed, s.guestStatus(vmops.GuestVM)},
		{"GET", "/api/v1/pve/lxc/{clusterId}/{node}/{vmid}", authed, s.guestStatus(vmops.GuestCT)},
		{"GET", "/api/v1/pve/clusters/{clusterId}/guests", authed, s.listClusterGuests},
		{"GET", "/api/v1/pve/guests", authed, s.listFleetGuests},
	}
}
