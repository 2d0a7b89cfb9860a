package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// What the caller may see of the clusters (tag inventory), and the guests: their
// status, power actions and migrations (tags vms and containers).

const (
	clustersPath = "/api/v1/pve/clusters"
	fleetGuests  = "/api/v1/pve/guests"
)

func clusterPath(cid int64) string { return clustersPath + "/" + id(cid) }

// GuestKind is PVE's kind of guest: a QEMU VM or an LXC container.
type GuestKind string

// The kinds of guest, in PVE's words (a task's guestKind, a list's type).
const (
	QEMU GuestKind = "qemu"
	LXC  GuestKind = "lxc"
)

// Noun is how a person names a guest of the kind: VM or CT.
func (k GuestKind) Noun() string {
	if k == LXC {
		return "CT"
	}
	return "VM"
}

// pathSegment is the kind's segment of the API's guest paths: vm or lxc.
func (k GuestKind) pathSegment() string {
	if k == LXC {
		return "lxc"
	}
	return "vm"
}

// GuestRef names a guest: its cluster, the node it is on, its kind and vmid.
type GuestRef struct {
	ClusterID int64
	Node      string
	Kind      GuestKind
	VMID      int64
}

// VM names a QEMU guest.
func VM(clusterID int64, node string, vmid int64) GuestRef {
	return GuestRef{ClusterID: clusterID, Node: node, Kind: QEMU, VMID: vmid}
}

// CT names an LXC container.
func CT(clusterID int64, node string, vmid int64) GuestRef {
	return GuestRef{ClusterID: clusterID, Node: node, Kind: LXC, VMID: vmid}
}

// Path is the guest's API path: /api/v1/pve/vm/1/pve1/100 or /api/v1/pve/lxc/….
func (g GuestRef) Path() string {
	return "/api/v1/pve/" + g.Kind.pathSegment() + "/" + id(g.ClusterID) + "/" + url.PathEscape(g.Node) + "/" + id(g.VMID)
}

func (g GuestRef) String() string { return fmt.Sprintf("%s %d on %s", g.Kind.Noun(), g.VMID, g.Node) }

// VisibleClusters lists the clusters the caller may see, with the caller's role.
func (c *Client) VisibleClusters(ctx context.Context) (Listing[ClusterView], error) {
	return list[ClusterView](ctx, c, clustersPath, nil)
}

// Nodes lists a cluster's nodes.
func (c *Client) Nodes(ctx context.Context, clusterID int64) (Listing[Node], error) {
	return list[Node](ctx, c, clusterPath(clusterID)+"/nodes", nil)
}

// query is the filter as a list's query.
func (f GuestFilter) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"type": string(f.Type), "node": f.Node, "status": f.Status, "tag": f.Tag, "q": f.Q, "pool": f.Pool} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.PageSize > 0 {
		q.Set("limit", strconv.Itoa(f.PageSize))
	}
	return q
}

// VMs lists a cluster's QEMU guests that pass f (Type and Pool do not apply),
// every page.
func (c *Client) VMs(ctx context.Context, clusterID int64, f GuestFilter) (Listing[VMView], error) {
	f.Type, f.Pool = "", ""
	return list[VMView](ctx, c, clusterPath(clusterID)+"/vms", f.query())
}

// ClusterGuests lists a cluster's guests of both kinds (or f.Type's) that pass
// f, every page.
func (c *Client) ClusterGuests(ctx context.Context, clusterID int64, f GuestFilter) (Listing[Guest], error) {
	return list[Guest](ctx, c, clusterPath(clusterID)+"/guests", f.query())
}

// Guests lists the guests of every cluster the caller may see that pass f,
// every page; each names its cluster. A cluster vmgate could not read is in
// Unavailable (once, however many pages named it), its guests missing.
func (c *Client) Guests(ctx context.Context, f GuestFilter) (FleetGuests, error) {
	var out FleetGuests
	seen := map[int64]bool{}
	l, err := listPages[Guest](ctx, c, fleetGuests, f.query(), func(r *Response) {
		for _, u := range r.Unavailable {
			if !seen[u.ClusterID] {
				seen[u.ClusterID] = true
				out.Unavailable = append(out.Unavailable, u)
			}
		}
	})
	out.Listing = l
	return out, err
}

// GuestStatus reads a guest's status on its node.
func (c *Client) GuestStatus(ctx context.Context, g GuestRef) (GuestStatus, error) {
	var st GuestStatus
	_, err := c.do(ctx, http.MethodGet, g.Path(), nil, nil, &st)
	return st, err
}

// PowerOptions tune a power action.
type PowerOptions struct {
	// Wait is how long vmgate waits for PVE's task, in seconds (0 to 300); nil is
	// the server's default (60), 0 answers at once.
	Wait *int
	// Force: stop powers off at once instead of shutting down (and overrules a
	// running shutdown where the PVE release can).
	Force bool
	// Timeout is passed on to PVE: the seconds a shutdown (stop, reboot) may take.
	Timeout *int
	// ToDisk: suspend hibernates instead of pausing (VMs only).
	ToDisk bool
}

// PowerResult is a power action's answer: its task, and whether the task still
// ran when vmgate's wait ended (202).
type PowerResult struct {
	TaskID   string
	Running  bool
	Replayed bool // the stored answer of an earlier call with the same Idempotency-Key
}

// Start starts a guest.
func (c *Client) Start(ctx context.Context, g GuestRef, o PowerOptions, opts ...CallOption) (PowerResult, error) {
	return c.power(ctx, g, "start", o, opts)
}

// Stop shuts a guest down gracefully (PVE's shutdown, within o.Timeout), or with
// o.Force powers it off at once. A shutdown the guest ignores ends 409
// shutdown_timeout.
func (c *Client) Stop(ctx context.Context, g GuestRef, o PowerOptions, opts ...CallOption) (PowerResult, error) {
	return c.power(ctx, g, "stop", o, opts)
}

// Reboot reboots a guest.
func (c *Client) Reboot(ctx context.Context, g GuestRef, o PowerOptions, opts ...CallOption) (PowerResult, error) {
	return c.power(ctx, g, "reboot", o, opts)
}

// Suspend pauses a VM, or hibernates it with o.ToDisk.
func (c *Client) Suspend(ctx context.Context, g GuestRef, o PowerOptions, opts ...CallOption) (PowerResult, error) {
	return c.power(ctx, g, "suspend", o, opts)
}

// Resume resumes a paused or hibernated VM.
func (c *Client) Resume(ctx context.Context, g GuestRef, o PowerOptions, opts ...CallOption) (PowerResult, error) {
	return c.power(ctx, g, "resume", o, opts)
}

func (c *Client) power(ctx context.Context, g GuestRef, op string, o PowerOptions, opts []CallOption) (PowerResult, error) {
	q := url.Values{}
	if o.Wait != nil {
		q.Set("wait", strconv.Itoa(*o.Wait))
	}
	if o.Force {
		q.Set("force", "true")
	}
	if o.Timeout != nil {
		q.Set("timeout", strconv.Itoa(*o.Timeout))
	}
	if o.ToDisk {
		q.Set("todisk", "true")
	}
	resp, err := c.write(ctx, http.MethodPost, g.Path()+"/"+op, q, nil, nil, opts)
	if err != nil {
		return PowerResult{}, fmt.Errorf("%s %s: %w", op, g, err)
	}
	return PowerResult{TaskID: resp.TaskID(), Running: resp.Status == http.StatusAccepted, Replayed: resp.Replayed()}, nil
}

// MigratePrecheck reads PVE's migration pre-check of a guest (target may be "").
func (c *Client) MigratePrecheck(ctx context.Context, g GuestRef, target string) (MigratePrecheck, error) {
	q := url.Values{}
	if target != "" {
		q.Set("target", target)
	}
	var p MigratePrecheck
	_, err := c.do(ctx, http.MethodGet, g.Path()+"/migrate", q, nil, &p)
	return p, err
}

// Migrate starts a guest's migration and returns its task's UPID at once.
func (c *Client) Migrate(ctx context.Context, g GuestRef, req MigrateRequest, opts ...CallOption) (string, error) {
	var out struct {
		TaskID string `json:"taskId"`
	}
	if _, err := c.write(ctx, http.MethodPost, g.Path()+"/migrate", nil, req, &out, opts); err != nil {
		return "", fmt.Errorf("migrate %s to %s: %w", g, req.Target, err)
	}
	return out.TaskID, nil
}
