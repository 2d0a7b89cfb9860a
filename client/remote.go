package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
)

// RemoteMigrateRequest moves a guest to another cluster (POST …/remote-migrate).
// TargetStorage and TargetBridge map the guest's storages and bridges: one
// name for all ("" in the map's key: see RemoteMap) or source → target pairs.
type RemoteMigrateRequest struct {
	TargetCluster string    `json:"targetCluster"` // id or name
	TargetNode    string    `json:"targetNode,omitempty"`
	TargetVMID    int       `json:"targetVmid,omitempty"`
	TargetStorage RemoteMap `json:"targetStorage,omitempty"`
	TargetBridge  RemoteMap `json:"targetBridge,omitempty"`
	Online        *bool     `json:"online,omitempty"`
	Restart       *bool     `json:"restart,omitempty"`
	Delete        bool      `json:"delete,omitempty"`
	BWLimit       *int      `json:"bwlimit,omitempty"`
}

// RemoteMap is a storage or bridge mapping: source → target. A single entry
// with the key "" maps everything to its value (sent as a plain name).
type RemoteMap map[string]string

// MarshalJSON writes "name" for {"": name}, else the object.
func (m RemoteMap) MarshalJSON() ([]byte, error) {
	if all, ok := m[""]; ok && len(m) == 1 {
		return []byte(strconv.Quote(all)), nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := "{"
	for i, k := range keys {
		if i > 0 {
			out += ","
		}
		out += strconv.Quote(k) + ":" + strconv.Quote(m[k])
	}
	return []byte(out + "}"), nil
}

// RemotePrecheck is GET …/remote-migrate's answer.
type RemotePrecheck struct {
	Running       bool `json:"running"`
	HAManaged     bool `json:"haManaged"`
	TargetCluster struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	} `json:"targetCluster"`
	TargetNode string `json:"targetNode"`
	Candidates []struct {
		Node    string `json:"node"`
		Status  string `json:"status"`
		FreeMem int64  `json:"freeMem"`
	} `json:"candidates"`
	Disks []struct {
		Key     string  `json:"key"`
		Volid   string  `json:"volid"`
		Storage string  `json:"storage"`
		Size    int64   `json:"size"`
		Target  *string `json:"target"`
	} `json:"disks"`
	Storages []struct {
		Storage string   `json:"storage"`
		Type    string   `json:"type"`
		Shared  bool     `json:"shared"`
		Content []string `json:"content"`
		Avail   int64    `json:"avail"`
		Total   int64    `json:"total"`
	} `json:"storages"`
	NICs []struct {
		Key    string  `json:"key"`
		Bridge string  `json:"bridge"`
		Target *string `json:"target"`
	} `json:"nics"`
	Bridges          []string `json:"bridges"`
	TargetVMID       int      `json:"targetVmid"`
	VMIDFree         bool     `json:"vmidFree"`
	NextVMID         int      `json:"nextVmid"`
	TokenPermissions []struct {
		Path      string `json:"path"`
		Privilege string `json:"privilege"`
		Granted   bool   `json:"granted"`
	} `json:"tokenPermissions"`
	MissingPermissions []string `json:"missingPermissions"`
	Blockers           []string `json:"blockers"`
}

// RemoteMigrateCheck is the pre-check of a move to another cluster. Mappings
// given as one name for all are passed on; pairs are the POST's alone.
func (c *Client) RemoteMigrateCheck(ctx context.Context, g GuestRef, req RemoteMigrateRequest) (RemotePrecheck, error) {
	q := url.Values{"targetCluster": {req.TargetCluster}}
	if req.TargetNode != "" {
		q.Set("targetNode", req.TargetNode)
	}
	if req.TargetVMID != 0 {
		q.Set("targetVmid", strconv.Itoa(req.TargetVMID))
	}
	if all, ok := req.TargetStorage[""]; ok && len(req.TargetStorage) == 1 {
		q.Set("targetStorage", all)
	}
	if all, ok := req.TargetBridge[""]; ok && len(req.TargetBridge) == 1 {
		q.Set("targetBridge", all)
	}
	var p RemotePrecheck
	if _, err := c.do(ctx, http.MethodGet, g.Path()+"/remote-migrate", q, nil, &p); err != nil {
		return RemotePrecheck{}, fmt.Errorf("remote-migrate check of %s to %s: %w", g, req.TargetCluster, err)
	}
	return p, nil
}

// RemoteMigrate starts a move to another cluster and returns the source task's id.
func (c *Client) RemoteMigrate(ctx context.Context, g GuestRef, req RemoteMigrateRequest, opts ...CallOption) (string, error) {
	var out struct {
		TaskID string `json:"taskId"`
	}
	if _, err := c.write(ctx, http.MethodPost, g.Path()+"/remote-migrate", nil, req, &out, opts); err != nil {
		return "", fmt.Errorf("move %s to cluster %s: %w", g, req.TargetCluster, err)
	}
	return out.TaskID, nil
}
