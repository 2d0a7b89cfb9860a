package cli

import (
	"strconv"
	"strings"

	"github.com/vmgate/vmgate/client"
)

// GroupMappingsTable is the table of `vmgate group-mapping list`: each mapping's
// grants as cluster=role, comma-separated (cluster ids: the table stays one line
// per mapping).
func GroupMappingsTable(list []client.GroupMapping) TableOf {
	t := TableOf{Header: []string{"ID", "GROUP", "ROLE", "GRANTS", "UPDATED"}, Flex: []string{"GROUP", "GRANTS"}}
	for _, m := range list {
		grants := make([]string, 0, len(m.Grants))
		for _, g := range m.Grants {
			grants = append(grants, strconv.FormatInt(g.ClusterID, 10)+"="+g.Role)
		}
		t.Add(strconv.FormatInt(m.ID, 10), m.Group, m.Role, strings.Join(grants, ","), Stamp(m.UpdatedAt))
	}
	return t
}
