package httpapi

import "github.com/vmgate/vmgate/internal/vmops"

// fleetRoutes are the cluster administration (docs/design.md §3.4, admins only; grants
// from an admin's login session only, docs/security.md item 32) and the inventory reads
// (any authenticated user; each read checks the caller's viewer grant).
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
