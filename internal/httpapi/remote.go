package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/frontend"
	"github.com/vmgate/vmgate/internal/vmops"
)

// Moving a guest to another cluster (issue 22): GET …/remote-migrate is the
// pre-check, POST starts it. The use case (vmops.RemoteMigrate) checks the
// grants on both clusters and refuses what PVE would.

// remoteRoutes are the remote migration's routes, when the VM use cases have it.
func (s *Server) remoteRoutes() []route {
	rm, ok := s.vms.(frontend.RemoteMigrations)
	if !ok {
		return nil
	}
	var out []route
	for _, k := range guestKindRoutes {
		kind := k.kind
		g := "/api/v1/pve/" + k.segment + "/{clusterId}/{node}/{vmid}/remote-migrate"
		out = append(out,
			route{"GET", g, authed, func(w http.ResponseWriter, r *http.Request) error { return remoteCheck(w, r, rm, kind) }},
			route{"POST", g, authed, s.keyed(func(w http.ResponseWriter, r *http.Request) error { return remoteMigrate(w, r, rm, kind) })},
		)
	}
	return out
}

func remoteCheck(w http.ResponseWriter, r *http.Request, rm frontend.RemoteMigrations, kind vmops.GuestKind) error {
	vm, err := pathGuest(r, kind)
	if err != nil {
		return err
	}
	if err := checkQuery(r, "targetCluster", "targetNode", "targetVmid", "targetStorage", "targetBridge"); err != nil {
		return err
	}
	var req vmops.RemoteMigrateRequest
	if req.TargetCluster, err = queryOne(r, "targetCluster"); err != nil {
		return err
	}
	if req.TargetNode, err = queryOne(r, "targetNode"); err != nil {
		return err
	}
	if v, err := queryOne(r, "targetVmid"); err != nil {
		return err
	} else if v != "" {
		if req.TargetVMID, err = strconv.Atoi(v); err != nil {
			return errs.E(errs.Invalid, "targetVmid must be an integer")
		}
	}
	// A uniform storage or bridge in the query ("tank"); pairs need the POST's object.
	if v, err := queryOne(r, "targetStorage"); err != nil {
		return err
	} else {
		req.TargetStorage.Default = v
	}
	if v, err := queryOne(r, "targetBridge"); err != nil {
		return err
	} else {
		req.TargetBridge.Default = v
	}
	pc, err := rm.RemoteMigrateCheck(r.Context(), vmActor(r), vm, req)
	if err != nil {
		return withRightPath(r, vm, err)
	}
	writeData(w, toRemotePrecheckJSON(pc))
	return nil
}

func remoteMigrate(w http.ResponseWriter, r *http.Request, rm frontend.RemoteMigrations, kind vmops.GuestKind) error {
	vm, err := pathGuest(r, kind)
	if err != nil {
		return err
	}
	if err := checkQuery(r); err != nil {
		return err
	}
	var in struct {
		TargetCluster *jsonIDOrName  `json:"targetCluster"`
		TargetNode    *string        `json:"targetNode"`
		TargetVMID    *int64         `json:"targetVmid"`
		TargetStorage *vmops.Mapping `json:"targetStorage"`
		TargetBridge  *vmops.Mapping `json:"targetBridge"`
		Online        *bool          `json:"online"`
		Restart       *bool          `json:"restart"`
		Delete        *bool          `json:"delete"`
		BWLimit       *int64         `json:"bwlimit"`
	}
	if err := decodeJSON(w, r, &in); err != nil {
		return err
	}
	req := vmops.RemoteMigrateRequest{Online: in.Online, Restart: in.Restart}
	if in.TargetCluster != nil {
		req.TargetCluster = string(*in.TargetCluster)
	}
	if in.TargetNode != nil {
		req.TargetNode = *in.TargetNode
	}
	if in.TargetVMID != nil {
		req.TargetVMID = clampInt(*in.TargetVMID)
	}
	if in.TargetStorage != nil {
		req.TargetStorage = *in.TargetStorage
	}
	if in.TargetBridge != nil {
		req.TargetBridge = *in.TargetBridge
	}
	if in.Delete != nil {
		req.Delete = *in.Delete
	}
	if in.BWLimit != nil {
		n := clampInt(*in.BWLimit)
		req.BWLimit = &n
	}
	upid, err := rm.RemoteMigrate(r.Context(), vmActor(r), vm, req)
	return renderMigrate(w, upid, withRightPath(r, vm, err))
}

// jsonIDOrName is a cluster given as its id (2) or its name ("dev-b").
type jsonIDOrName string

func (v *jsonIDOrName) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*v = jsonIDOrName(s)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return errs.E(errs.Invalid, "targetCluster is a cluster's id or name")
	}
	*v = jsonIDOrName(strconv.FormatInt(n, 10))
	return nil
}

type remotePrecheckJSON struct {
	Running          bool                   `json:"running"`
	HAManaged        bool                   `json:"haManaged"`
	TargetCluster    clusterRefJSON         `json:"targetCluster"`
	TargetNode       string                 `json:"targetNode"`
	Candidates       []remoteNodeJSON       `json:"candidates"`
	Disks            []remoteDiskJSON       `json:"disks"`
	Storages         []remoteStorageJSON    `json:"storages"`
	NICs             []remoteNICJSON        `json:"nics"`
	Bridges          []string               `json:"bridges"`
	TargetVMID       int                    `json:"targetVmid"`
	VMIDFree         bool                   `json:"vmidFree"`
	NextVMID         int                    `json:"nextVmid"`
	TokenPermissions []remotePermissionJSON `json:"tokenPermissions"`
	MissingPerms     []string               `json:"missingPermissions"`
	Blockers         []string               `json:"blockers"`
}

type clusterRefJSON struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
}

type remoteNodeJSON struct {
	Node    string `json:"node"`
	Status  string `json:"status"`
	FreeMem int64  `json:"freeMem"`
}

type remoteDiskJSON struct {
	Key     string  `json:"key"`
	Volid   string  `json:"volid"`
	Storage string  `json:"storage"`
	Size    int64   `json:"size"`
	Target  *string `json:"target"`
}

type remoteStorageJSON struct {
	Storage string   `json:"storage"`
	Type    string   `json:"type"`
	Shared  bool     `json:"shared"`
	Content []string `json:"content"`
	Avail   int64    `json:"avail"`
	Total   int64    `json:"total"`
}

type remoteNICJSON struct {
	Key    string  `json:"key"`
	Bridge string  `json:"bridge"`
	Target *string `json:"target"`
}

type remotePermissionJSON struct {
	Path      string `json:"path"`
	Privilege string `json:"privilege"`
	Granted   bool   `json:"granted"`
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func toRemotePrecheckJSON(pc vmops.RemotePrecheck) remotePrecheckJSON {
	out := remotePrecheckJSON{Running: pc.Running, HAManaged: pc.HAManaged,
		TargetCluster: clusterRefJSON{ID: pc.TargetClusterID, Name: pc.TargetClusterName}, TargetNode: pc.TargetNode,
		Candidates: []remoteNodeJSON{}, Disks: []remoteDiskJSON{}, Storages: []remoteStorageJSON{}, NICs: []remoteNICJSON{},
		Bridges: append([]string{}, pc.Bridges...), TargetVMID: pc.TargetVMID, VMIDFree: pc.VMIDFree, NextVMID: pc.NextVMID,
		TokenPermissions: []remotePermissionJSON{}, MissingPerms: []string{}, Blockers: append([]string{}, pc.Blockers...)}
	for _, n := range pc.Candidates {
		out.Candidates = append(out.Candidates, remoteNodeJSON{Node: n.Node, Status: n.Status, FreeMem: n.FreeMem})
	}
	for _, d := range pc.Disks {
		out.Disks = append(out.Disks, remoteDiskJSON{Key: d.Key, Volid: d.Volid, Storage: d.Storage, Size: d.Size, Target: optional(d.Target)})
	}
	for _, st := range pc.Storages {
		out.Storages = append(out.Storages, storageJSON(st))
	}
	for _, n := range pc.NICs {
		out.NICs = append(out.NICs, remoteNICJSON{Key: n.Key, Bridge: n.Bridge, Target: optional(n.Target)})
	}
	for _, p := range pc.TokenPermissions {
		out.TokenPermissions = append(out.TokenPermissions, remotePermissionJSON{Path: p.Path, Privilege: p.Privilege, Granted: p.Granted})
		if !p.Granted {
			out.MissingPerms = append(out.MissingPerms, p.Privilege+" on "+p.Path)
		}
	}
	return out
}

func storageJSON(st vmops.RemoteStorage) remoteStorageJSON {
	return remoteStorageJSON{Storage: st.Storage, Type: st.Type, Shared: st.Shared, Content: append([]string{}, st.Content...),
		Avail: st.Avail, Total: st.Total}
}
