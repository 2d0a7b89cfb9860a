package pve

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Remote migration (PVE's experimental remote_migrate, issue 22): the write
// on the source cluster and the reads of a pre-check on both clusters.

func init() {
	for _, k := range []GuestKind{Qemu, LXC} {
		guestActions[k]["remote_migrate"] = true
		guestActions[k]["config"] = true
	}
}

// RemoteEndpoint is the target cluster as remote_migrate's target-endpoint
// names it (PVE's proxmox-remote format): one node's API address, its
// certificate's fingerprint and an API token of the target cluster.
type RemoteEndpoint struct {
	Host        string // an address or a host name, without the port
	Port        int    // 8006 when 0
	Fingerprint string // SHA-256, "AB:CD:..."; empty: the source trusts what the target presents first
	TokenID     string // USER@REALM!TOKENID
	Secret      string
}

var fingerprintSyntax = regexp.MustCompile(`^([0-9A-Fa-f]{2}:){31}[0-9A-Fa-f]{2}$`)

// propertyString is the target-endpoint value. Every part is checked: a comma
// or an equals sign in a value would change what PVE reads.
func (e RemoteEndpoint) propertyString() (string, error) {
	port := e.Port
	if port == 0 {
		port = 8006
	}
	switch {
	case e.Host == "" || strings.ContainsAny(e.Host, ",=; \t\r\n") || len(e.Host) > 253:
		return "", fmt.Errorf("%w: target host %q", ErrInvalidArgument, truncate(e.Host, 60))
	case port < 1 || port > 65535:
		return "", fmt.Errorf("%w: target port %d", ErrInvalidArgument, port)
	case e.Fingerprint != "" && !fingerprintSyntax.MatchString(e.Fingerprint):
		return "", fmt.Errorf("%w: target fingerprint", ErrInvalidArgument)
	case !tokenIDSyntax.MatchString(e.TokenID) || e.Secret == "" || strings.ContainsAny(e.Secret, ",=; \t\r\n"):
		return "", fmt.Errorf("%w: target API token", ErrInvalidArgument)
	}
	s := "apitoken=PVEAPIToken=" + e.TokenID + "=" + e.Secret + ",host=" + e.Host + ",port=" + strconv.Itoa(port)
	if e.Fingerprint != "" {
		s += ",fingerprint=" + strings.ToUpper(e.Fingerprint)
	}
	return s, nil
}

var tokenIDSyntax = regexp.MustCompile(`^[^\s:/,=]+@[A-Za-z][A-Za-z0-9.\-_]+![A-Za-z][A-Za-z0-9.\-_]+$`)

// RemoteEndpointFromURL is a RemoteEndpoint for a node's API URL
// (https://host:port).
func RemoteEndpointFromURL(raw, fingerprint, tokenID, secret string) (RemoteEndpoint, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return RemoteEndpoint{}, fmt.Errorf("%w: endpoint URL %q", ErrInvalidArgument, truncate(raw, 80))
	}
	port := 8006
	if p := u.Port(); p != "" {
		if port, err = strconv.Atoi(p); err != nil {
			return RemoteEndpoint{}, fmt.Errorf("%w: endpoint URL %q", ErrInvalidArgument, truncate(raw, 80))
		}
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
		host = "[" + host + "]"
	}
	return RemoteEndpoint{Host: host, Port: port, Fingerprint: fingerprint, TokenID: tokenID, Secret: secret}, nil
}

// RemoteMigrateOptions are the parameters of POST remote_migrate.
type RemoteMigrateOptions struct {
	Endpoint      RemoteEndpoint
	TargetVMID    int    // 0: the same vmid
	TargetStorage string // storage map "src:dst,..." (an identity map "1" is refused by PVE)
	TargetBridge  string // bridge map "src:dst,..."
	Online        bool   // QEMU: live migration of a running VM
	Restart       bool   // LXC: shut a running CT down, move it, start it on the target
	Timeout       *int   // LXC: the restart's shutdown timeout, seconds
	Delete        bool   // delete the source guest after a successful migration
	BWLimit       *int   // KiB/s
}

// RemoteMigrate starts a remote migration of guest g and returns the UPID of
// the source's qmigrate or vzmigrate task. The request carries the target's
// API token: it is sent to the source cluster, which uses it to reach the
// target (docs/security.md item 39).
func (c *Client) RemoteMigrate(ctx context.Context, g Guest, o RemoteMigrateOptions) (UPID, error) {
	ep, err := o.Endpoint.propertyString()
	if err != nil {
		return UPID{}, &NotSentError{Err: fmt.Errorf("pve: %w", err)}
	}
	for what, m := range map[string]string{"target storage": o.TargetStorage, "target bridge": o.TargetBridge} {
		if m == "" || len(m) > 1024 || !storageMapSyntax(m) {
			return UPID{}, &NotSentError{Err: fmt.Errorf("pve: %w: %s map %q", ErrInvalidArgument, what, truncate(m, 40))}
		}
	}
	f := url.Values{"target-endpoint": {ep}, "target-storage": {o.TargetStorage}, "target-bridge": {o.TargetBridge}}
	if o.TargetVMID != 0 {
		if err := checkVMID(o.TargetVMID); err != nil {
			return UPID{}, &NotSentError{Err: fmt.Errorf("pve: %w", err)}
		}
		f.Set("target-vmid", strconv.Itoa(o.TargetVMID))
	}
	switch g.Kind {
	case Qemu:
		if o.Restart || o.Timeout != nil {
			return UPID{}, errOnlyFor(g, "a restart migration", LXC)
		}
		putBool(f, "online", o.Online)
	case LXC:
		putBool(f, "restart", o.Restart)
		if err := putSeconds(f, "timeout", o.Timeout); err != nil {
			return UPID{}, err
		}
	}
	putBool(f, "delete", o.Delete)
	if err := putSeconds(f, "bwlimit", o.BWLimit); err != nil {
		return UPID{}, err
	}
	return c.startTask(ctx, g, ActMigrate, "remote_migrate", f)
}

// GuestConfig reads a guest's current config (GET .../config) as text
// values: PVE answers numbers for some keys, strings for others.
func (c *Client) GuestConfig(ctx context.Context, g Guest) (map[string]string, error) {
	p, err := guestPath(g, "config")
	if err != nil {
		return nil, fmt.Errorf("pve: %w", err)
	}
	var raw map[string]json.RawMessage
	if _, err := c.get(ctx, p, nil, limitDefault, &raw); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		var s string
		if json.Unmarshal(v, &s) == nil {
			out[k] = s
			continue
		}
		out[k] = strings.Trim(string(v), `"`)
	}
	return out, nil
}

// Bridges lists a node's bridges (GET /nodes/{node}/network?type=any_bridge),
// sorted.
func (c *Client) Bridges(ctx context.Context, node string) ([]string, error) {
	if err := checkNode("node", node); err != nil {
		return nil, fmt.Errorf("pve: %w", err)
	}
	p := apiPath{escaped: "/nodes/" + url.PathEscape(node) + "/network", node: node}
	var ifaces []struct {
		Iface flexString `json:"iface"`
		Type  flexString `json:"type"`
	}
	if _, err := c.get(ctx, p, url.Values{"type": {"any_bridge"}}, limitDefault, &ifaces); err != nil {
		return nil, err
	}
	var out []string
	for _, i := range ifaces {
		out = append(out, string(i.Iface))
	}
	sort.Strings(out)
	return out, nil
}

// Permissions reads the caller's (the token's) privileges on a path (GET
// /access/permissions?path=P): the set of privileges it holds there.
func (c *Client) Permissions(ctx context.Context, path string) (map[string]bool, error) {
	if !strings.HasPrefix(path, "/") || len(path) > 256 || strings.ContainsAny(path, " \t\r\n") {
		return nil, fmt.Errorf("pve: %w: ACL path %q", ErrInvalidArgument, truncate(path, 60))
	}
	var raw map[string]map[string]json.RawMessage
	if _, err := c.get(ctx, apiPath{escaped: "/access/permissions"}, url.Values{"path": {path}}, limitDefault, &raw); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for priv := range raw[path] {
		out[priv] = true
	}
	return out, nil
}

// NextID reads the cluster's next free vmid (GET /cluster/nextid).
func (c *Client) NextID(ctx context.Context) (int, error) {
	var id flexString
	if _, err := c.get(ctx, apiPath{escaped: "/cluster/nextid"}, nil, limitDefault, &id); err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(id)))
	if err != nil || !ValidVMID(n) {
		return 0, fmt.Errorf("pve: GET /cluster/nextid: %w: %q", ErrBadResponse, truncate(string(id), 20))
	}
	return n, nil
}

// StorageInfo is one storage of one node (/cluster/resources type=storage).
type StorageInfo struct {
	Storage string
	Node    string
	Type    string // PVE's plugin type: dir, lvmthin, rbd, ...
	Shared  bool
	Content []string // images, rootdir, iso, ...
	Avail   int64    // bytes free
	Total   int64
	Active  bool
}

// Storages reads every node's storages.
func (c *Client) Storages(ctx context.Context) ([]StorageInfo, error) {
	var raw []struct {
		Storage    flexString      `json:"storage"`
		Node       flexString      `json:"node"`
		PluginType flexString      `json:"plugintype"`
		Status     flexString      `json:"status"`
		Shared     json.RawMessage `json:"shared"`
		Content    flexString      `json:"content"`
		Disk       json.Number     `json:"disk"`
		MaxDisk    json.Number     `json:"maxdisk"`
	}
	if _, err := c.get(ctx, pathClusterResources, url.Values{"type": {"storage"}}, limitLarge, &raw); err != nil {
		return nil, err
	}
	out := make([]StorageInfo, 0, len(raw))
	for _, r := range raw {
		used, _ := r.Disk.Int64()
		total, _ := r.MaxDisk.Int64()
		s := StorageInfo{Storage: string(r.Storage), Node: string(r.Node), Type: string(r.PluginType),
			Shared: string(r.Shared) == "1" || string(r.Shared) == "true", Total: total, Avail: max(total-used, 0),
			Active: string(r.Status) == "available"}
		for _, ct := range strings.Split(string(r.Content), ",") {
			if ct != "" {
				s.Content = append(s.Content, ct)
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Node != out[j].Node {
			return out[i].Node < out[j].Node
		}
		return out[i].Storage < out[j].Storage
	})
	return out, nil
}
