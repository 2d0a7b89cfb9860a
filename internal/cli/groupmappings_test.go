package cli

import (
	"reflect"
	"testing"

	"github.com/vmgate/vmgate/client"
)

// TestParseMappedGrant: `--grant CLUSTER=ROLE[:pool=P][:tag=T]...` gives the
// cluster, the role and the scope (nil without pools and tags), and the table
// writes a scope back in the same form; malformed values are usage errors.
func TestParseMappedGrant(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in, cluster, role string
		scope             *client.GrantScope
	}{
		{"lab=operator", "lab", "operator", nil},
		{"3=viewer:pool=team-a:tag=web:pool=a/b", "3", "viewer",
			&client.GrantScope{Pools: []string{"team-a", "a/b"}, Tags: []string{"web"}}},
		{"lab=operator:tag=db", "lab", "operator", &client.GrantScope{Pools: []string{}, Tags: []string{"db"}}},
	} {
		cl, role, scope, err := ParseMappedGrant(c.in)
		if err != nil || cl != c.cluster || role != c.role || !reflect.DeepEqual(scope, c.scope) {
			t.Errorf("%q: %q %q %+v %v", c.in, cl, role, scope, err)
		}
	}
	for _, bad := range []string{"lab", "lab=admin", "=viewer", "lab=viewer:", "lab=viewer:pool=", "lab=viewer:owner=x",
		"lab=viewer:pool"} {
		if _, _, _, err := ParseMappedGrant(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	tab := GroupMappingsTable([]client.GroupMapping{{ID: 1, Group: "team", Role: "user", Grants: []client.GroupMappingGrant{
		{ClusterID: 3, Role: "viewer", Scope: &client.GrantScope{Pools: []string{"team-a"}, Tags: []string{"web"}}},
		{ClusterID: 4, Role: "operator"}}}})
	if got := tab.Rows[0][3]; got != "3=viewer:pool=team-a:tag=web,4=operator" {
		t.Errorf("table grants %q", got)
	}
}
