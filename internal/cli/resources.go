package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The things the CLI lists, as vmgate's API answers them (api/openapi.yaml), and
// their tables. A read prints JSON as the API gave it (every field, even one this
// client does not know) or a table of the columns a person scans for.

// ClusterView is a cluster as GET /pve/clusters lists it for the caller.
type ClusterView struct {
	ID         int64  `json:"id"`
	Name       string `json:"name"`
	Role       string `json:"role"`
	Status     string `json:"status"`
	PVEVersion string `json:"pveVersion"`
}

// Cluster is a registered cluster as an admin sees it (GET /clusters/{id}).
type Cluster struct {
	ID        int64  `json:"id"`
	Name      string `json:"name"`
	Endpoints []struct {
		URL         string `json:"url"`
		Node        string `json:"node"`
		Fingerprint string `json:"fingerprint"`
	} `json:"endpoints"`
	TokenID            string    `json:"tokenId"`
	Trust              string    `json:"trust"`
	InsecureSkipVerify bool      `json:"insecureSkipVerify"`
	CreatedAt          time.Time `json:"createdAt"`
}

// Node is a PVE node of a cluster.
type Node struct {
	Node   string  `json:"node"`
	Status string  `json:"status"`
	CPU    float64 `json:"cpu"`
	MaxCPU int64   `json:"maxCpu"`
	Mem    int64   `json:"mem"`
	MaxMem int64   `json:"maxMem"`
	Uptime int64   `json:"uptime"`
}

// VM is one VM of a cluster's list.
type VM struct {
	VMID    int64    `json:"vmid"`
	Name    string   `json:"name"`
	Node    string   `json:"node"`
	Status  string   `json:"status"`
	Lock    string   `json:"lock"`
	Tags    []string `json:"tags"`
	HAState string   `json:"haState"`
	MaxMem  int64    `json:"maxMem"`
	MaxCPU  float64  `json:"maxCpu"`
}

// User is a user as an admin sees it.
type User struct {
	ID        int64     `json:"id"`
	Email     string    `json:"email"`
	Nickname  string    `json:"nickname"`
	Role      string    `json:"role"`
	Disabled  bool      `json:"disabled"`
	CreatedAt time.Time `json:"createdAt"`
}

// AuditRecord is one row of the audit trail.
type AuditRecord struct {
	ID        int64     `json:"id"`
	At        time.Time `json:"at"`
	UserEmail string    `json:"userEmail"`
	SessionID string    `json:"sessionId"`
	Action    string    `json:"action"`
	ClusterID int64     `json:"clusterId"`
	VMID      int64     `json:"vmid"`
	Target    string    `json:"target"`
	Result    string    `json:"result"`
	Reason    string    `json:"reason"`
	Address   string    `json:"address"`
	Count     int64     `json:"count"`
}

// Grant is a role on one cluster.
type Grant struct {
	ClusterID int64  `json:"clusterId"`
	Role      string `json:"role"`
}

// APIToken is an API token as lists show it (never its secret).
type APIToken struct {
	ID           string     `json:"id"`
	Name         string     `json:"name"`
	CreatedAt    time.Time  `json:"createdAt"`
	ExpiresAt    time.Time  `json:"expiresAt"`
	Expired      bool       `json:"expired"`
	LastUsedAt   *time.Time `json:"lastUsedAt"`
	LastUsedFrom *string    `json:"lastUsedFrom"`
	Grants       *[]Grant   `json:"grants"`
}

// CreatedAPIToken is a new API token with its secret, shown once.
type CreatedAPIToken struct {
	APIToken
	Token string `json:"token"`
}

// Items is a list as the API answered it: every item raw (for -o json) and the
// list's envelope facts.
type Items struct {
	Raw  []json.RawMessage
	AsOf time.Time // when vmgate read the list from PVE (inventory lists), zero elsewhere
}

// Decode unmarshals every item into T.
func Decode[T any](it Items) ([]T, error) {
	out := make([]T, 0, len(it.Raw))
	for _, r := range it.Raw {
		var v T
		if err := json.Unmarshal(r, &v); err != nil {
			return nil, fmt.Errorf("decode an answer: %w", err)
		}
		out = append(out, v)
	}
	return out, nil
}

// List reads a list at path, following nextCursor to the end when the API pages
// it (the VM list with limit).
func (c *Client) List(ctx context.Context, path string, q url.Values) (Items, error) {
	var out Items
	q = cloneValues(q)
	for {
		var page []json.RawMessage
		resp, err := c.Do(ctx, http.MethodGet, path, q, nil, &page)
		if err != nil {
			return out, err
		}
		out.Raw = append(out.Raw, page...)
		if resp.AsOf != nil && (out.AsOf.IsZero() || resp.AsOf.Before(out.AsOf)) {
			out.AsOf = *resp.AsOf
		}
		if resp.NextCursor == "" {
			if out.Raw == nil {
				out.Raw = []json.RawMessage{}
			}
			return out, nil
		}
		q.Set("cursor", resp.NextCursor)
	}
}

func cloneValues(q url.Values) url.Values {
	out := url.Values{}
	for k, vs := range q {
		out[k] = slices.Clone(vs)
	}
	return out
}

// ClustersPath and the others are the API paths of the lists.
const (
	ClustersPath      = "/api/v1/pve/clusters"
	AdminClustersPath = "/api/v1/clusters"
	UsersPath         = "/api/v1/users"
	TasksPath         = "/api/v1/pve/tasks"
	AuditPath         = "/api/v1/audit"
	MyTokensPath      = "/api/v1/user/tokens"
)

// ClusterPath is the inventory path of a cluster ("/api/v1/pve/clusters/1").
func ClusterPath(id int64) string { return ClustersPath + "/" + strconv.FormatInt(id, 10) }

// VMFilter selects a cluster's VMs (every field optional); PageSize > 0 reads
// the list in pages of that many, following the cursor to the end.
type VMFilter struct {
	Node, Status, Tag, Q string
	PageSize             int
}

// Query is the filter as the VM list's query.
func (f VMFilter) Query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"node": f.Node, "status": f.Status, "tag": f.Tag, "q": f.Q} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.PageSize > 0 {
		q.Set("limit", strconv.Itoa(f.PageSize))
	}
	return q
}

// VMs lists a cluster's VMs that pass f, following the pages to the end. It
// returns when the oldest page was read (asOf).
func (c *Client) VMs(ctx context.Context, clusterID int64, f VMFilter) ([]VM, time.Time, error) {
	it, err := c.VMItems(ctx, clusterID, f)
	if err != nil {
		return nil, time.Time{}, err
	}
	vms, err := Decode[VM](it)
	return vms, it.AsOf, err
}

// VMItems is VMs as the API answered them, for -o json.
func (c *Client) VMItems(ctx context.Context, clusterID int64, f VMFilter) (Items, error) {
	return c.List(ctx, ClusterPath(clusterID)+"/vms", f.Query())
}

// CTItems reads a cluster's containers as VMItems reads its VMs (the guest
// list of type lxc: the VM list's shape, and a type).
func (c *Client) CTItems(ctx context.Context, clusterID int64, f VMFilter) (Items, error) {
	q := f.Query()
	q.Set("type", "lxc")
	return c.List(ctx, ClusterPath(clusterID)+"/guests", q)
}

// The tables. Each takes what the API answered and the time to show ages from.

// ClustersTable is the table of `vmgate cluster list`.
func ClustersTable(list []ClusterView) TableOf {
	t := TableOf{Header: []string{"ID", "NAME", "ROLE", "STATUS", "PVE"}}
	for _, c := range list {
		t.Add(strconv.FormatInt(c.ID, 10), c.Name, c.Role, c.Status, c.PVEVersion)
	}
	return t
}

// ClusterTable is the table of `vmgate cluster show`: one row per endpoint.
func ClusterTable(c Cluster) TableOf {
	t := TableOf{Header: []string{"ID", "NAME", "TOKEN", "TRUST", "ENDPOINT", "NODE", "FINGERPRINT"}}
	if len(c.Endpoints) == 0 {
		t.Add(strconv.FormatInt(c.ID, 10), c.Name, c.TokenID, c.Trust, "", "", "")
	}
	for _, ep := range c.Endpoints {
		t.Add(strconv.FormatInt(c.ID, 10), c.Name, c.TokenID, c.Trust, ep.URL, ep.Node, ep.Fingerprint)
	}
	return t
}

// NodesTable is the table of `vmgate node list`.
func NodesTable(list []Node) TableOf {
	t := TableOf{Header: []string{"NODE", "STATUS", "CPU", "MEM", "UPTIME"}}
	for _, n := range list {
		t.Add(n.Node, n.Status, fmt.Sprintf("%.0f%%/%d", n.CPU*100, n.MaxCPU),
			Size(n.Mem)+"/"+Size(n.MaxMem), HumanDuration(time.Duration(n.Uptime)*time.Second))
	}
	return t
}

// VMsTable is the table of `vmgate vm list`.
func VMsTable(list []VM) TableOf {
	t := TableOf{Header: []string{"VMID", "NAME", "NODE", "STATUS", "LOCK", "HA", "CPUS", "MEM", "TAGS"}}
	for _, v := range list {
		t.Add(strconv.FormatInt(v.VMID, 10), v.Name, v.Node, v.Status, v.Lock, v.HAState,
			strconv.FormatFloat(v.MaxCPU, 'f', -1, 64), Size(v.MaxMem), strings.Join(v.Tags, ","))
	}
	return t
}

// TasksTable is the table of `vmgate task list`.
func TasksTable(list []Task) TableOf {
	t := TableOf{Header: []string{"STARTED", "TYPE", "VMID", "NODE", "TARGET", "RESULT", "BY", "TASK"}}
	for _, k := range list {
		started := ""
		if k.StartTime != nil {
			started = Stamp(*k.StartTime)
		}
		vmid := ""
		if k.VMID != 0 {
			vmid = strconv.FormatInt(k.VMID, 10)
		}
		task := k.TaskID
		if task == "" && k.TaskRef != 0 {
			task = strconv.FormatInt(k.TaskRef, 10) // its UPID is not known (yet): vmgate's reference follows it
		}
		t.Add(started, k.Type, vmid, k.Node, k.Target, k.Result, k.StartedBy, task)
	}
	return t
}

// UsersTable is the table of `vmgate user list`; the nickname, free text, last.
func UsersTable(list []User) TableOf {
	t := TableOf{Header: []string{"ID", "EMAIL", "ROLE", "DISABLED", "CREATED", "NICKNAME"}}
	for _, u := range list {
		t.Add(strconv.FormatInt(u.ID, 10), u.Email, u.Role, strconv.FormatBool(u.Disabled), Stamp(u.CreatedAt), u.Nickname)
	}
	return t
}

// AuditTable is the table of `vmgate audit`; the reason, free text, comes last.
func AuditTable(list []AuditRecord) TableOf {
	t := TableOf{Header: []string{"ID", "AT", "ACTOR", "VIA", "ACTION", "TARGET", "RESULT", "ADDRESS", "REASON"}}
	for _, a := range list {
		via := ""
		if strings.HasPrefix(a.SessionID, "token:") {
			via = a.SessionID
		}
		target := strings.ReplaceAll(a.Target, " ", "_")
		switch {
		case a.VMID != 0:
			target = fmt.Sprintf("vm:%d/%d", a.ClusterID, a.VMID)
		case target == "" && a.ClusterID != 0:
			target = fmt.Sprintf("cluster:%d", a.ClusterID)
		}
		result := a.Result
		if a.Count > 1 {
			result += fmt.Sprintf("×%d", a.Count)
		}
		t.Add(strconv.FormatInt(a.ID, 10), Stamp(a.At), a.UserEmail, via, a.Action, target, result, a.Address, a.Reason)
	}
	return t
}

// TokensTable is the table of `vmgate token list`: never a secret. A token's name
// may hold spaces; the others cells do not.
func TokensTable(list []APIToken, now time.Time) TableOf {
	t := TableOf{Header: []string{"ID", "NAME", "EXPIRES", "LAST-USED", "FROM", "GRANTS"}}
	for _, k := range list {
		expires := Stamp(k.ExpiresAt)
		if k.Expired {
			expires = "expired"
		}
		used, from := "never", ""
		if k.LastUsedAt != nil {
			used = Since(*k.LastUsedAt, now) + "-ago"
		}
		if k.LastUsedFrom != nil {
			from = *k.LastUsedFrom
		}
		t.Add(k.ID, k.Name, expires, used, from, GrantsText(k.Grants))
	}
	return t
}

// GrantsText renders grants as CLUSTER:ROLE,...; a token's nil grants as "owner's".
func GrantsText(gs *[]Grant) string {
	if gs == nil {
		return "owner's"
	}
	parts := make([]string, 0, len(*gs))
	for _, g := range *gs {
		parts = append(parts, fmt.Sprintf("%d:%s", g.ClusterID, g.Role))
	}
	return strings.Join(parts, ",")
}
