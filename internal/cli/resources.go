package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/vmgate/vmgate/client"
)

// The tables of the things the CLI lists, from the API's answers (the client
// package's types). A read prints JSON as the API gave it (every field, even one
// this client does not know) or a table of the columns a person scans for, fit
// to 100 columns (TableOf); -o wide shows every column whole.

// ClusterNames maps cluster ids to names, for the tables that name a cluster: a
// person knows "lab", not 1. An id without a name shows as the id.
type ClusterNames map[int64]string

// Of is the cluster's name, or its id when the name is not known.
func (n ClusterNames) Of(id int64) string {
	if id == 0 {
		return ""
	}
	if name, ok := n[id]; ok && name != "" {
		return name
	}
	return strconv.FormatInt(id, 10)
}

// NamesOf maps the listed clusters' ids to their names.
func NamesOf(list []client.ClusterView) ClusterNames {
	n := ClusterNames{}
	for _, c := range list {
		n[c.ID] = c.Name
	}
	return n
}

// ClustersTable is the table of `vmgate cluster list`.
func ClustersTable(list []client.ClusterView) TableOf {
	t := TableOf{Header: []string{"ID", "NAME", "ROLE", "STATUS", "PVE"}, Flex: []string{"NAME"}}
	for _, c := range list {
		t.Add(strconv.FormatInt(c.ID, 10), c.Name, c.Role, c.Status, deref(c.PVEVersion))
	}
	return t
}

// ClusterTable is the table of `vmgate cluster show`: one row per endpoint.
func ClusterTable(c client.Cluster) TableOf {
	t := TableOf{Header: []string{"ID", "NAME", "TOKEN", "TRUST", "ENDPOINT", "NODE", "FINGERPRINT"},
		Flex: []string{"NAME", "TOKEN", "ENDPOINT", "FINGERPRINT"}}
	if len(c.Endpoints) == 0 {
		t.Add(strconv.FormatInt(c.ID, 10), c.Name, c.TokenID, c.Trust, "", "", "")
	}
	for _, ep := range c.Endpoints {
		t.Add(strconv.FormatInt(c.ID, 10), c.Name, c.TokenID, c.Trust, ep.URL, ep.Node, ep.Fingerprint)
	}
	return t
}

// NodesTable is the table of `vmgate node list`.
func NodesTable(list []client.Node) TableOf {
	t := TableOf{Header: []string{"NODE", "STATUS", "CPU", "MEM", "UPTIME", "MAINTENANCE"}, Flex: []string{"NODE", "MAINTENANCE"}}
	for _, n := range list {
		maint := ""
		if m := n.Maintenance; m != nil {
			maint = fmt.Sprintf("since %s (op %d)", ShortStamp(m.Since), m.OperationID)
		}
		t.Add(n.Node, n.Status, fmt.Sprintf("%.0f%%/%d", n.CPU*100, n.MaxCPU),
			Size(n.Mem)+"/"+Size(n.MaxMem), HumanDuration(time.Duration(n.Uptime)*time.Second), maint)
	}
	return t
}

// VMsTable is the table of `vmgate vm list`.
func VMsTable(list []client.VMView) TableOf {
	t := TableOf{Header: []string{"VMID", "NAME", "NODE", "STATUS", "LOCK", "HA", "CPUS", "MEM", "TAGS"},
		Flex: []string{"NAME", "NODE", "TAGS", "HA"}}
	for _, v := range list {
		t.Add(strconv.FormatInt(v.VMID, 10), v.Name, v.Node, v.Status, v.Lock, v.HAState,
			strconv.FormatFloat(v.MaxCPU, 'f', -1, 64), Size(v.MaxMem), strings.Join(v.Tags, ","))
	}
	return t
}

// KindWord is a guest kind as the tables show it: vm or ct.
func KindWord(k client.GuestKind) string {
	switch k {
	case client.QEMU:
		return "vm"
	case client.LXC:
		return "ct"
	}
	return string(k)
}

// GuestsTable is the table of `vmgate guest list` and `vmgate ct list`: both
// kinds, a TYPE column, and the cluster's name when the list spans clusters.
func GuestsTable(list []client.Guest, names ClusterNames, fleet bool) TableOf {
	t := TableOf{Header: []string{"CLUSTER", "VMID", "TYPE", "NAME", "NODE", "STATUS", "LOCK", "HA", "CPUS", "MEM", "TAGS"},
		Flex: []string{"CLUSTER", "NAME", "NODE", "TAGS", "HA"}}
	if !fleet {
		t.Header = t.Header[1:]
	}
	for _, g := range list {
		row := []string{strconv.FormatInt(g.VMID, 10), KindWord(g.Type), g.Name, g.Node, g.Status, g.Lock, g.HAState,
			strconv.FormatFloat(g.MaxCPU, 'f', -1, 64), Size(g.MaxMem), strings.Join(g.Tags, ",")}
		if fleet {
			cluster := g.ClusterName
			if cluster == "" {
				cluster = names.Of(g.ClusterID)
			}
			row = append([]string{cluster}, row...)
		}
		t.Add(row...)
	}
	return t
}

// GuestStatusTable is the table of `vmgate vm status` and `vmgate ct status`.
func GuestStatusTable(g client.GuestStatus) TableOf {
	t := TableOf{Header: []string{"VMID", "TYPE", "NAME", "NODE", "STATUS", "QMP", "LOCK", "HA", "UPTIME", "CPUS", "MEM", "TAGS"},
		Flex: []string{"NAME", "NODE", "HA", "TAGS"}}
	kind := g.Type
	if kind == "" && g.QMPStatus != "" {
		kind = client.QEMU
	}
	if g.Stale {
		t.Header = append(t.Header, "AS-OF")
	}
	row := []string{strconv.FormatInt(g.VMID, 10), KindWord(kind), g.Name, g.Node, g.Status, g.QMPStatus, g.Lock, g.HA.State,
		HumanDuration(time.Duration(g.Uptime) * time.Second), strconv.FormatFloat(g.CPUs, 'f', -1, 64), Size(g.MaxMem),
		strings.Join(g.Tags, ",")}
	if g.Stale && g.StaleSince != nil {
		row = append(row, ShortStamp(*g.StaleSince))
	}
	t.Add(row...)
	return t
}

// TasksTable is the table of `vmgate task list` and `task show`: narrow, the
// task named by vmgate's reference (every task command takes it where it takes
// a UPID); -o wide adds the UPID and PVE's task type.
func TasksTable(list []client.Task, names ClusterNames) TableOf {
	t := TableOf{Header: []string{"STARTED", "CLUSTER", "OP", "KIND", "VMID", "NODE", "TARGET", "RESULT", "BY", "REF", "TYPE", "UPID"},
		Flex: []string{"CLUSTER", "NODE", "TARGET", "BY", "OP"}, WideOnly: []string{"TYPE", "UPID"}}
	for _, k := range list {
		started := ShortStamp(k.StartTime)
		vmid := ""
		if k.GuestID() != 0 {
			vmid = strconv.FormatInt(k.GuestID(), 10)
		}
		ref := ""
		if k.Ref() != 0 {
			ref = strconv.FormatInt(k.Ref(), 10)
		} else {
			ref = k.UPID() // a task vmgate did not start: its UPID is its only name
		}
		op := k.Operation()
		if op == "" {
			op = k.Type
		}
		t.Add(started, names.Of(k.ClusterID), op, KindWord(k.Kind()), vmid, k.Node, k.TargetNode(), k.Result, k.By(), ref,
			k.Type, k.UPID())
	}
	return t
}

// UsersTable is the table of `vmgate user list`; the nickname, free text, last.
func UsersTable(list []client.User) TableOf {
	t := TableOf{Header: []string{"ID", "EMAIL", "ROLE", "DISABLED", "CREATED", "NICKNAME"}, Flex: []string{"EMAIL", "NICKNAME"}}
	for _, u := range list {
		t.Add(strconv.FormatInt(u.ID, 10), u.Email, u.Role, strconv.FormatBool(u.Disabled), Stamp(u.CreatedAt), u.Nickname)
	}
	return t
}

// AuditTable is the table of `vmgate audit`; the reason, free text, comes last.
// -o wide adds the session or API token and the full date.
func AuditTable(list []client.AuditRecord, names ClusterNames) TableOf {
	t := TableOf{Header: []string{"ID", "AT", "ACTOR", "ACTION", "TARGET", "RESULT", "ADDRESS", "VIA", "DATE", "REASON"},
		Flex: []string{"ACTOR", "TARGET", "RESULT", "ADDRESS", "REASON"}, WideOnly: []string{"VIA", "DATE"}}
	for _, a := range list {
		via := ""
		if strings.HasPrefix(a.SessionID, "token:") {
			via = a.SessionID
		}
		target := strings.ReplaceAll(a.Target, " ", "_")
		switch {
		case a.VMID != 0:
			target = fmt.Sprintf("%s/%d", names.Of(a.ClusterID), a.VMID)
		case target == "" && a.ClusterID != 0:
			target = "cluster:" + names.Of(a.ClusterID)
		}
		result := a.Result
		if a.Count > 1 {
			result += fmt.Sprintf("×%d", a.Count)
		}
		t.Add(strconv.FormatInt(a.ID, 10), ShortStamp(a.At), a.UserEmail, a.Action, target, result, a.Address, via, Stamp(a.At),
			a.Reason)
	}
	return t
}

// TokensTable is the table of `vmgate token list`: never a secret. A token's name
// may hold spaces; the others cells do not.
func TokensTable(list []client.APIToken, now time.Time, names ClusterNames) TableOf {
	t := TableOf{Header: []string{"ID", "NAME", "EXPIRES", "LAST-USED", "FROM", "GRANTS"}, Flex: []string{"NAME", "FROM", "GRANTS"}}
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
		t.Add(k.ID, k.Name, expires, used, from, GrantsText(k.Grants, names))
	}
	return t
}

// MeTable is the table of `vmgate me`.
func MeTable(me client.Me, server string, names ClusterNames) TableOf {
	t := TableOf{Header: []string{"ID", "EMAIL", "ROLE", "GRANTS", "SERVER", "NICKNAME"},
		Flex: []string{"EMAIL", "GRANTS", "SERVER", "NICKNAME"}}
	t.Add(strconv.FormatInt(me.ID, 10), me.Email, me.Role, GrantsText(&me.Grants, names), server, me.Nickname)
	return t
}

// GrantsText renders grants as CLUSTER:ROLE,... (the cluster by name when
// known); a token's nil grants as "owner's".
func GrantsText(gs *[]client.Grant, names ClusterNames) string {
	if gs == nil {
		return "owner's"
	}
	parts := make([]string, 0, len(*gs))
	for _, g := range *gs {
		parts = append(parts, names.Of(g.ClusterID)+":"+g.Role)
	}
	return strings.Join(parts, ",")
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
