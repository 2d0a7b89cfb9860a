package pve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// What node maintenance needs of PVE's API (issue 20 (docs/history.md)): a
// node's status and its reboot (PVE/API2/Nodes.pm: GET and POST
// /nodes/{node}/status), its packages (PVE/API2/APT.pm: /apt/update,
// /apt/versions), the HA stack's status (/cluster/ha/status/current) and Ceph's
// health and flags (/cluster/ceph/status, /cluster/ceph/flags/{flag}).

// nodeSubPath builds /nodes/{node}/{sub} for the fixed sub-paths below.
func nodeSubPath(node, sub string) (apiPath, error) {
	if err := checkNode("node", node); err != nil {
		return apiPath{}, err
	}
	switch sub {
	case "status", "apt/update", "apt/versions":
	default:
		return apiPath{}, fmt.Errorf("%w: unknown node sub-path %q", ErrInvalidArgument, sub)
	}
	return apiPath{escaped: "/nodes/" + url.PathEscape(node) + "/" + sub, node: node}, nil
}

// cephFlagPath builds /cluster/ceph/flags/{flag} for the flags maintenance sets.
func cephFlagPath(flag string) (apiPath, error) {
	switch flag {
	case "noout", "norebalance", "nobackfill", "norecover":
	default:
		return apiPath{}, fmt.Errorf("%w: ceph flag %q is not one vmgate sets", ErrInvalidArgument, flag)
	}
	return apiPath{escaped: "/cluster/ceph/flags/" + flag}, nil
}

var (
	pathHAStatus   = apiPath{escaped: "/cluster/ha/status/current"}
	pathCephStatus = apiPath{escaped: "/cluster/ceph/status"}
)

// NodeStatus is what maintenance reads of GET /nodes/{node}/status.
type NodeStatus struct {
	Uptime int64 // seconds since the node booted
	// KernelRelease is the running kernel's release (current-kernel's, PVE ≥
	// 8.2; else read from kversion: "Linux 6.8.12-4-pve #1 SMP ...").
	KernelRelease string
}

// NodeStatus reads a node's status. The request is proxied to the node: a node
// that is down answers 595 through another (a *NodeOfflineError).
func (c *Client) NodeStatus(ctx context.Context, node string) (NodeStatus, error) {
	p, err := nodeSubPath(node, "status")
	if err != nil {
		return NodeStatus{}, err
	}
	var w struct {
		Uptime        flexInt    `json:"uptime"`
		KVersion      flexString `json:"kversion"`
		CurrentKernel *struct {
			Release flexString `json:"release"`
		} `json:"current-kernel"`
	}
	if _, err := c.get(ctx, p, nil, limitDefault, &w); err != nil {
		return NodeStatus{}, err
	}
	st := NodeStatus{Uptime: int64(w.Uptime)}
	if w.CurrentKernel != nil && w.CurrentKernel.Release != "" {
		st.KernelRelease = string(w.CurrentKernel.Release)
	} else if f := strings.Fields(string(w.KVersion)); len(f) >= 2 && f[0] == "Linux" {
		st.KernelRelease = f[1]
	}
	return st, nil
}

// RebootNode asks PVE to reboot a node (POST /nodes/{node}/status
// command=reboot; PVE answers null and reboots it after stopping its guests).
// A write whose answer was lost is an *AmbiguousError: the caller decides from
// the node's uptime whether it rebooted, and never asks twice blindly.
func (c *Client) RebootNode(ctx context.Context, node string) error {
	p, err := nodeSubPath(node, "status")
	if err != nil {
		return &NotSentError{Err: fmt.Errorf("pve: %w", err)}
	}
	_, err = c.do(ctx, call{method: http.MethodPost, path: p, form: url.Values{"command": {"reboot"}}, limit: limitDefault})
	var amb *ambiguity
	if errors.As(err, &amb) {
		return &AmbiguousError{Method: http.MethodPost, Path: p.escaped, Endpoint: amb.ep.base, Err: amb.cause}
	}
	return err
}

// PendingUpdate is one package apt would upgrade (GET /nodes/{node}/apt/update).
type PendingUpdate struct {
	Package   string
	Installed string // OldVersion
	Candidate string // Version
	Title     string
}

// PendingUpdates lists a node's pending package updates, by package.
func (c *Client) PendingUpdates(ctx context.Context, node string) ([]PendingUpdate, error) {
	p, err := nodeSubPath(node, "apt/update")
	if err != nil {
		return nil, err
	}
	var w []struct {
		Package    flexString `json:"Package"`
		OldVersion flexString `json:"OldVersion"`
		Version    flexString `json:"Version"`
		Title      flexString `json:"Title"`
	}
	if _, err := c.get(ctx, p, nil, limitDefault, &w); err != nil {
		return nil, err
	}
	out := make([]PendingUpdate, 0, len(w))
	for _, u := range w {
		out = append(out, PendingUpdate{Package: string(u.Package), Installed: string(u.OldVersion),
			Candidate: string(u.Version), Title: string(u.Title)})
	}
	slices.SortFunc(out, func(a, b PendingUpdate) int { return strings.Compare(a.Package, b.Package) })
	return out, nil
}

// RefreshUpdates starts PVE's apt update task on a node (POST
// /nodes/{node}/apt/update) and returns its UPID.
func (c *Client) RefreshUpdates(ctx context.Context, node string) (UPID, error) {
	p, err := nodeSubPath(node, "apt/update")
	if err != nil {
		return UPID{}, &NotSentError{Err: fmt.Errorf("pve: %w", err)}
	}
	var text flexString
	res, err := c.do(ctx, call{method: http.MethodPost, path: p, form: url.Values{}, limit: limitDefault, out: &text})
	var amb *ambiguity
	if errors.As(err, &amb) {
		return UPID{}, &AmbiguousError{Method: http.MethodPost, Path: p.escaped, Endpoint: amb.ep.base, Err: amb.cause}
	}
	if err != nil {
		return UPID{}, err
	}
	if err := res.dataErr; err != nil {
		return UPID{}, fmt.Errorf("pve: POST %s at %s: %w: no UPID: %v", p.escaped, res.ep.base, ErrBadResponse, err)
	}
	u, err := ParseUPID(string(text))
	if err != nil || u.Node != node || u.Type != "aptupdate" {
		return UPID{}, fmt.Errorf("pve: POST %s at %s: %w: %q is not an apt update task of %s", p.escaped, res.ep.base,
			ErrBadResponse, truncate(string(text), 120), node)
	}
	c.recent.add(u)
	return u, nil
}

// PackageVersion is one package of GET /nodes/{node}/apt/versions.
type PackageVersion struct {
	Package string
	// Installed is the installed version (OldVersion); "" when not installed.
	Installed string
}

// PackageVersions lists a node's PVE-related packages and their installed
// versions.
func (c *Client) PackageVersions(ctx context.Context, node string) ([]PackageVersion, error) {
	p, err := nodeSubPath(node, "apt/versions")
	if err != nil {
		return nil, err
	}
	var w []struct {
		Package      flexString `json:"Package"`
		OldVersion   flexString `json:"OldVersion"`
		CurrentState flexString `json:"CurrentState"`
	}
	if _, err := c.get(ctx, p, nil, limitDefault, &w); err != nil {
		return nil, err
	}
	out := make([]PackageVersion, 0, len(w))
	for _, v := range w {
		pv := PackageVersion{Package: string(v.Package)}
		if v.CurrentState == "Installed" {
			pv.Installed = string(v.OldVersion)
		}
		out = append(out, pv)
	}
	return out, nil
}

// HAStatusEntry is one entry of GET /cluster/ha/status/current: the quorum,
// the CRM master, an LRM per node, a service per HA resource.
type HAStatusEntry struct {
	ID      string // quorum, master, lrm:pve1, service:vm:100
	Type    string // quorum, master, lrm, service
	Node    string
	Status  string // PVE's words: "pve1 (active, Sat Nov 28 ...)", "No quorum on node 'pve1'!"
	Quorate bool   // the quorum entry's
	SID     string // a service's
	State   string // a service's: started, stopped, error, fence, ...
	CRM     string // a service's crm_state
}

// HAStatus reads the HA stack's status.
func (c *Client) HAStatus(ctx context.Context) ([]HAStatusEntry, error) {
	var w []struct {
		ID       flexString `json:"id"`
		Type     flexString `json:"type"`
		Node     flexString `json:"node"`
		Status   flexString `json:"status"`
		Quorate  Bool       `json:"quorate"`
		SID      flexString `json:"sid"`
		State    flexString `json:"state"`
		CRMState flexString `json:"crm_state"`
	}
	if _, err := c.get(ctx, pathHAStatus, nil, limitDefault, &w); err != nil {
		return nil, err
	}
	out := make([]HAStatusEntry, 0, len(w))
	for _, e := range w {
		out = append(out, HAStatusEntry{ID: string(e.ID), Type: string(e.Type), Node: string(e.Node), Status: string(e.Status),
			Quorate: bool(e.Quorate), SID: string(e.SID), State: string(e.State), CRM: string(e.CRMState)})
	}
	return out, nil
}

// CephHealth is Ceph's health as GET /cluster/ceph/status gives it.
type CephHealth struct {
	Status string            // HEALTH_OK, HEALTH_WARN, HEALTH_ERR
	Checks map[string]string // each failing check's name → its summary
}

// ErrNoCeph is CephStatus's error when the cluster does not run Ceph (PVE
// answers that ceph is not installed or not initialised).
var ErrNoCeph = errors.New("the cluster does not run Ceph")

// CephStatus reads Ceph's health. A cluster without Ceph is ErrNoCeph.
func (c *Client) CephStatus(ctx context.Context) (CephHealth, error) {
	var w struct {
		Health struct {
			Status flexString `json:"status"`
			Checks map[string]struct {
				Summary struct {
					Message flexString `json:"message"`
				} `json:"summary"`
			} `json:"checks"`
		} `json:"health"`
	}
	if _, err := c.get(ctx, pathCephStatus, nil, limitDefault, &w); err != nil {
		var pe *Error
		if errors.As(err, &pe) && pe.StatusCode == http.StatusInternalServerError && noCeph(pe.Text()) {
			return CephHealth{}, fmt.Errorf("%w: %w", ErrNoCeph, err)
		}
		return CephHealth{}, err
	}
	h := CephHealth{Status: string(w.Health.Status), Checks: map[string]string{}}
	for name, ch := range w.Health.Checks {
		h.Checks[name] = string(ch.Summary.Message)
	}
	return h, nil
}

// noCeph reports whether PVE's error says Ceph is not there (PVE/Ceph/Tools.pm
// check_ceph_installed, check_ceph_inited).
func noCeph(msg string) bool {
	return strings.Contains(msg, "binary not installed") || strings.Contains(msg, "not initialized") ||
		strings.Contains(msg, "not installed")
}

// SetCephFlag sets (on) or clears a Ceph flag (PUT /cluster/ceph/flags/{flag}).
func (c *Client) SetCephFlag(ctx context.Context, flag string, on bool) error {
	p, err := cephFlagPath(flag)
	if err != nil {
		return &NotSentError{Err: fmt.Errorf("pve: %w", err)}
	}
	v := "0"
	if on {
		v = "1"
	}
	_, err = c.do(ctx, call{method: http.MethodPut, path: p, form: url.Values{"value": {v}}, limit: limitDefault})
	var amb *ambiguity
	if errors.As(err, &amb) {
		// Setting a flag twice is harmless: the caller reads the flags again.
		return &AmbiguousError{Method: http.MethodPut, Path: p.escaped, Endpoint: amb.ep.base, Err: amb.cause}
	}
	return err
}

// CephFlags lists the Ceph flags set now.
func (c *Client) CephFlags(ctx context.Context) ([]string, error) {
	var w []struct {
		Name  flexString `json:"name"`
		Value Bool       `json:"value"`
	}
	if _, err := c.get(ctx, apiPath{escaped: "/cluster/ceph/flags"}, nil, limitDefault, &w); err != nil {
		var pe *Error
		if errors.As(err, &pe) && pe.StatusCode == http.StatusInternalServerError && noCeph(pe.Text()) {
			return nil, fmt.Errorf("%w: %w", ErrNoCeph, err)
		}
		return nil, err
	}
	var out []string
	for _, f := range w {
		if f.Value {
			out = append(out, string(f.Name))
		}
	}
	return out, nil
}

// HARule is a node-affinity rule of PVE 9's HA stack (GET /cluster/ha/rules).
type HARule struct {
	ID        string
	Resources []string       // vm:103, ct:203
	Nodes     map[string]int // node → priority (0: none given)
	Strict    bool
	Disabled  bool
}

// HARules lists the HA stack's node-affinity rules (PVE ≥ 9.0; earlier
// releases have HA groups and answer an error).
func (c *Client) HARules(ctx context.Context) ([]HARule, error) {
	var w []struct {
		Rule      flexString `json:"rule"`
		Type      flexString `json:"type"`
		Resources flexString `json:"resources"`
		Nodes     flexString `json:"nodes"`
		Strict    Bool       `json:"strict"`
		Disable   Bool       `json:"disable"`
	}
	if _, err := c.get(ctx, apiPath{escaped: "/cluster/ha/rules"}, url.Values{"type": {"node-affinity"}}, limitDefault, &w); err != nil {
		return nil, err
	}
	out := make([]HARule, 0, len(w))
	for _, r := range w {
		if r.Type != "node-affinity" {
			continue
		}
		rule := HARule{ID: string(r.Rule), Strict: bool(r.Strict), Disabled: bool(r.Disable), Nodes: map[string]int{}}
		for _, s := range strings.Split(string(r.Resources), ",") {
			if s = strings.TrimSpace(s); s != "" {
				rule.Resources = append(rule.Resources, s)
			}
		}
		for _, s := range strings.Split(string(r.Nodes), ",") {
			name, prio, _ := strings.Cut(strings.TrimSpace(s), ":")
			if name == "" {
				continue
			}
			p := 0
			fmt.Sscan(prio, &p)
			rule.Nodes[name] = p
		}
		out = append(out, rule)
	}
	return out, nil
}
