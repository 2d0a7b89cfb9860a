package cli

import (
	"strconv"
	"strings"

	"github.com/vmgate/vmgate/client"
)

// GroupMappingsTable is the table of `vmgate group-mapping list`: each mapping's
// grants as cluster=role, comma-separated, a scoped one followed by its scope
// as --grant takes it (cluster=role:pool=P:tag=T; cluster ids: the table stays
// one line per mapping).
func GroupMappingsTable(list []client.GroupMapping) TableOf {
	t := TableOf{Header: []string{"ID", "GROUP", "ROLE", "GRANTS", "UPDATED"}, Flex: []string{"GROUP", "GRANTS"}}
	for _, m := range list {
		grants := make([]string, 0, len(m.Grants))
		for _, g := range m.Grants {
			grants = append(grants, strconv.FormatInt(g.ClusterID, 10)+"="+g.Role+ScopeSuffix(g.Scope))
		}
		t.Add(strconv.FormatInt(m.ID, 10), m.Group, m.Role, strings.Join(grants, ","), Stamp(m.UpdatedAt))
	}
	return t
}

// ScopeSuffix is a grant's scope as `--grant CLUSTER=ROLE…` writes it:
// ":pool=P" for each pool and ":tag=T" for each tag; "" for the whole cluster.
func ScopeSuffix(sc *client.GrantScope) string {
	if sc == nil {
		return ""
	}
	var b strings.Builder
	for _, p := range sc.Pools {
		b.WriteString(":pool=" + p)
	}
	for _, t := range sc.Tags {
		b.WriteString(":tag=" + t)
	}
	return b.String()
}

// ParseMappedGrant reads a group mapping's `--grant` value,
// CLUSTER=ROLE[:pool=POOL][:tag=TAG]...: ROLE operator or viewer, then any
// number of pools and tags the grant is narrowed to (none: the whole cluster).
// A colon separates them because neither a PVE pool id nor a tag may hold one,
// and a comma already separates repeated --grant values. The server checks the
// pools and tags themselves.
func ParseMappedGrant(v string) (cluster, role string, scope *client.GrantScope, err error) {
	cluster, rest, ok := strings.Cut(v, "=")
	parts := strings.Split(rest, ":")
	role = parts[0]
	if !ok || cluster == "" || (role != "operator" && role != "viewer") {
		return "", "", nil, UsageErrorf("--grant %q: want CLUSTER=operator or CLUSTER=viewer, then :pool=POOL or :tag=TAG to narrow it", v)
	}
	for _, p := range parts[1:] {
		key, val, _ := strings.Cut(p, "=")
		if val == "" || (key != "pool" && key != "tag") {
			return "", "", nil, UsageErrorf("--grant %q: %q is not pool=POOL or tag=TAG", v, p)
		}
		if scope == nil {
			scope = &client.GrantScope{Pools: []string{}, Tags: []string{}}
		}
		if key == "pool" {
			scope.Pools = append(scope.Pools, val)
		} else {
			scope.Tags = append(scope.Tags, val)
		}
	}
	return cluster, role, scope, nil
}
