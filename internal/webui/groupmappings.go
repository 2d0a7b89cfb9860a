package webui

import (
	"net/http"
	"strconv"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/identity"
)

// groupMappingRoutes are the admin's page of single sign-on's group mappings
// (internal/identity, docs/decisions/0110); none without the use case.
func (u *UI) groupMappingRoutes() []route {
	if u.mappings == nil {
		return nil
	}
	return []route{
		{"GET", "/admin/group-mappings", admin, u.groupMappingsPage},
		{"POST", "/admin/group-mappings", admin, u.createGroupMapping},
		{"POST", "/admin/group-mappings/{id}/delete", admin, u.deleteGroupMapping},
	}
}

type groupMappingsView struct {
	Mappings []groupMappingRow
	Clusters []fleet.Cluster
	SSO      string // the provider's name; "" when no sign-on is configured
}

type groupMappingRow struct {
	identity.Mapping
	Grants []string // "lab: operator", "lab: viewer (pools team-a; tags web)"
}

func (u *UI) groupMappingsPage(w http.ResponseWriter, r *http.Request) error {
	ms, err := u.mappings.List(r.Context(), principal(r))
	if err != nil {
		return err
	}
	cs, err := u.fleet.List(r.Context())
	if err != nil {
		return err
	}
	names := map[int64]string{}
	for _, c := range cs {
		names[c.ID] = c.Name
	}
	v := groupMappingsView{Clusters: cs, SSO: u.ssoName()}
	for _, m := range ms {
		row := groupMappingRow{Mapping: m}
		for _, g := range m.Grants {
			name := names[g.ClusterID]
			if name == "" {
				name = "cluster " + strconv.FormatInt(g.ClusterID, 10)
			}
			row.Grants = append(row.Grants, name+": "+g.Role+scopeNote(g.Scope))
		}
		v.Mappings = append(v.Mappings, row)
	}
	u.renderAdmin(w, r, "groupmappings", "Group mappings", "group-mappings", v)
	return nil
}

// createGroupMapping adds a mapping from the form: a group, a role, and for each
// cluster a role or none (the field grant-<cluster id>), narrowed by the
// pools-<cluster id> and tags-<cluster id> fields (both empty: the whole
// cluster), judged by the use case as a grant's scope is.
func (u *UI) createGroupMapping(w http.ResponseWriter, r *http.Request) error {
	in := identity.MappingInput{Group: r.PostFormValue("group"), Role: r.PostFormValue("role")}
	cs, err := u.fleet.List(r.Context())
	if err != nil {
		return err
	}
	for _, c := range cs {
		switch role := r.PostFormValue("grant-" + strconv.FormatInt(c.ID, 10)); role {
		case "", "none":
		default:
			id := strconv.FormatInt(c.ID, 10)
			in.Grants = append(in.Grants, identity.GrantInput{ClusterID: c.ID, Role: role,
				Scope: formScope(r.PostFormValue("pools-"+id), r.PostFormValue("tags-"+id))})
		}
	}
	if _, err := u.mappings.Create(r.Context(), principal(r), in); err != nil {
		return u.refused(w, r, "/admin/group-mappings", err)
	}
	return u.succeeded(w, r, "/admin/group-mappings", "Group mapping saved: it applies at each member's next login.")
}

func (u *UI) deleteGroupMapping(w http.ResponseWriter, r *http.Request) error {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		return errs.E(errs.NotFound, "no such group mapping")
	}
	if err := u.mappings.Delete(r.Context(), principal(r), id); err != nil {
		return u.refused(w, r, "/admin/group-mappings", err)
	}
	return u.succeeded(w, r, "/admin/group-mappings", "Group mapping deleted: its grants go at each member's next login.")
}
