package httpapi

import (
	"net/http"

	"github.com/vmgate/vmgate/internal/identity"
)

// identityRoutes are the group mappings of single sign-on (internal/identity): an
// admin's login session only, like every route that manages credentials
// (docs/security.md item 32).
func (s *Server) identityRoutes() []route {
	return []route{
		{"GET", "/api/v1/identity/group-mappings", adminSession, s.listGroupMappings},
		{"POST", "/api/v1/identity/group-mappings", adminSession, s.createGroupMapping},
		{"PUT", "/api/v1/identity/group-mappings/{id}", adminSession, s.updateGroupMapping},
		{"DELETE", "/api/v1/identity/group-mappings/{id}", adminSession, s.deleteGroupMapping},
		{"GET", "/api/v1/users/{id}/identities", admin, s.userIdentities},
		{"PUT", "/api/v1/users/{id}/identities", adminSession, s.linkIdentity},
	}
}

// groupMappingIn is a mapping as a request writes it.
type groupMappingIn struct {
	Group  string `json:"group"`
	Role   string `json:"role"`
	Grants []struct {
		ClusterID int64           `json:"clusterId"`
		Role      string          `json:"role"`
		Scope     *identity.Scope `json:"scope"`
	} `json:"grants"`
}

func (in groupMappingIn) input() identity.MappingInput {
	out := identity.MappingInput{Group: in.Group, Role: in.Role}
	for _, g := range in.Grants {
		out.Grants = append(out.Grants, identity.GrantInput{ClusterID: g.ClusterID, Role: g.Role, Scope: g.Scope})
	}
	return out
}

func pathMappingID(r *http.Request) (int64, error) {
	return parseIntParam("group mapping id", r.PathValue("id"), 1, 1<<53)
}

func (s *Server) listGroupMappings(w http.ResponseWriter, r *http.Request) error {
	if err := checkQuery(r); err != nil {
		return err
	}
	ms, err := s.mappings.List(r.Context(), principal(r))
	if err != nil {
		return err
	}
	writeData(w, ms)
	return nil
}

func (s *Server) createGroupMapping(w http.ResponseWriter, r *http.Request) error {
	var in groupMappingIn
	if err := decodeJSON(w, r, &in); err != nil {
		return err
	}
	m, err := s.mappings.Create(r.Context(), principal(r), in.input())
	if err != nil {
		return err
	}
	writeData(w, m)
	return nil
}

func (s *Server) updateGroupMapping(w http.ResponseWriter, r *http.Request) error {
	id, err := pathMappingID(r)
	if err != nil {
		return err
	}
	var in groupMappingIn
	if err := decodeJSON(w, r, &in); err != nil {
		return err
	}
	m, err := s.mappings.Update(r.Context(), principal(r), id, in.input())
	if err != nil {
		return err
	}
	writeData(w, m)
	return nil
}

func (s *Server) deleteGroupMapping(w http.ResponseWriter, r *http.Request) error {
	id, err := pathMappingID(r)
	if err != nil {
		return err
	}
	if err := s.mappings.Delete(r.Context(), principal(r), id); err != nil {
		return err
	}
	writeOK(w)
	return nil
}

// The identities of a user: reading is an admin's (an admin's API token too,
// like the users' list); linking one manages a credential: an admin's login
// session only.

func (s *Server) userIdentities(w http.ResponseWriter, r *http.Request) error {
	id, err := pathUserID(r)
	if err != nil {
		return err
	}
	if err := checkQuery(r); err != nil {
		return err
	}
	ids, err := s.mappings.Identities(r.Context(), principal(r), id)
	if err != nil {
		return err
	}
	writeData(w, ids)
	return nil
}

func (s *Server) linkIdentity(w http.ResponseWriter, r *http.Request) error {
	id, err := pathUserID(r)
	if err != nil {
		return err
	}
	var in struct {
		Issuer  string `json:"issuer"`
		Subject string `json:"subject"`
	}
	if err := decodeJSON(w, r, &in); err != nil {
		return err
	}
	linked, err := s.mappings.Link(r.Context(), principal(r), id, in.Issuer, in.Subject)
	if err != nil {
		return err
	}
	writeData(w, linked)
	return nil
}
