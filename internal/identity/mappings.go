package identity

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/store"
)

// Admin is single sign-on's administration: the group mappings, and which user an
// identity of the provider is (Link). Changes need an admin's login session (an
// API token never manages credentials, docs/decisions/0038) and are audited. It
// works without a provider configured, so that an admin can prepare it.
type Admin struct {
	st    AdminStore
	guard Guard
	audit func(ctx context.Context, rec store.AuditRecord)
}

// NewAdmin returns the administration's use cases.
func NewAdmin(st AdminStore, guard Guard, rec func(ctx context.Context, rec store.AuditRecord)) *Admin {
	if rec == nil {
		rec = func(context.Context, store.AuditRecord) {}
	}
	return &Admin{st: st, guard: guard, audit: rec}
}

// MappingInput is a mapping as an admin writes it.
type MappingInput struct {
	Group  string
	Role   string
	Grants []GrantInput
}

// GrantInput is one grant of a mapping. Scope nil is the whole cluster;
// otherwise the grant covers only the guests in those pools or with those tags,
// checked as fleet.PutScopedGrant checks a grant's scope.
type GrantInput struct {
	ClusterID int64
	Role      string
	Scope     *Scope
}

// Scope is a grant's scope as issue 23 section 3 defines it: the shape of
// fleet's, so that both are checked by one rule (fleet.CheckScope).
type Scope = fleet.GrantScope

// Mapping is a group mapping as the front ends show it.
type Mapping struct {
	ID        int64          `json:"id"`
	Group     string         `json:"group"`
	Role      string         `json:"role"`
	Grants    []MappingGrant `json:"grants"`
	CreatedAt time.Time      `json:"createdAt"`
	UpdatedAt time.Time      `json:"updatedAt"`
}

// MappingGrant is one grant of a Mapping.
type MappingGrant struct {
	ClusterID int64  `json:"clusterId"`
	Role      string `json:"role"`
	Scope     *Scope `json:"scope"` // null: the whole cluster
}

func viewMapping(m store.GroupMapping) Mapping {
	out := Mapping{ID: m.ID, Group: m.Group, Role: m.Role, Grants: []MappingGrant{}, CreatedAt: m.CreatedAt.UTC(),
		UpdatedAt: m.UpdatedAt.UTC()}
	for _, g := range m.Grants {
		mg := MappingGrant{ClusterID: g.ClusterID, Role: g.Role}
		if !g.Scope.IsZero() {
			mg.Scope = &Scope{Pools: nonNil(g.Scope.Pools), Tags: nonNil(g.Scope.Tags)}
		}
		out.Grants = append(out.Grants, mg)
	}
	return out
}

// Bounds of a mapping.
const (
	maxMappingGrants = 100
	maxMappings      = 1000
)

func (m *Admin) guardAdmin(ctx context.Context, p auth.Principal, attempt string) error {
	if err := m.guard.RequireAdmin(ctx, p, attempt); err != nil {
		return err
	}
	return m.guard.RequireSession(ctx, p, attempt)
}

// List returns every mapping, by ID.
func (m *Admin) List(ctx context.Context, p auth.Principal) ([]Mapping, error) {
	if err := m.guardAdmin(ctx, p, "identity.group_mappings"); err != nil {
		return nil, err
	}
	all, err := m.st.GroupMappings(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Mapping, 0, len(all))
	for _, gm := range all {
		out = append(out, viewMapping(gm))
	}
	return out, nil
}

// Create stores a new mapping; it applies at each member's next login.
func (m *Admin) Create(ctx context.Context, p auth.Principal, in MappingInput) (Mapping, error) {
	if err := m.guardAdmin(ctx, p, "identity.group_mapping_create"); err != nil {
		return Mapping{}, err
	}
	gm, err := m.check(ctx, in)
	if err == nil {
		var all []store.GroupMapping
		if all, err = m.st.GroupMappings(ctx); err == nil && len(all) >= maxMappings {
			err = errs.E(errs.Conflict, "vmgate keeps at most %d group mappings", maxMappings)
		}
	}
	if err == nil {
		gm, err = m.st.CreateGroupMapping(ctx, gm)
	}
	m.record(ctx, "identity.group_mapping_create", gm, err)
	if err != nil {
		return Mapping{}, err
	}
	return viewMapping(gm), nil
}

// Update replaces mapping id.
func (m *Admin) Update(ctx context.Context, p auth.Principal, id int64, in MappingInput) (Mapping, error) {
	if err := m.guardAdmin(ctx, p, "identity.group_mapping_update"); err != nil {
		return Mapping{}, err
	}
	gm, err := m.check(ctx, in)
	if err == nil {
		gm.ID = id
		gm, err = m.st.UpdateGroupMapping(ctx, gm)
	}
	gm.ID = id
	m.record(ctx, "identity.group_mapping_update", gm, err)
	if err != nil {
		return Mapping{}, err
	}
	return viewMapping(gm), nil
}

// Delete removes mapping id; the grants it gave go at each member's next login.
func (m *Admin) Delete(ctx context.Context, p auth.Principal, id int64) error {
	if err := m.guardAdmin(ctx, p, "identity.group_mapping_delete"); err != nil {
		return err
	}
	err := m.st.DeleteGroupMapping(ctx, id)
	m.record(ctx, "identity.group_mapping_delete", store.GroupMapping{ID: id}, err)
	return err
}

func (m *Admin) record(ctx context.Context, action string, gm store.GroupMapping, err error) {
	params := map[string]any{"group": gm.Group, "role": gm.Role, "grants": gm.Grants}
	if gm.Group == "" {
		params = map[string]any{}
	}
	m.audit(ctx, store.AuditRecord{Action: action, Target: "group_mapping:" + strconv.FormatInt(gm.ID, 10),
		Result: audit.Result(err), Reason: audit.Reason(err), Params: jsonParams(params)})
}

// check validates a mapping: a group name, a role, at most one grant per cluster,
// each on a cluster that exists with a role vmgate knows, and a scope as
// PutScopedGrant takes it (fleet.CheckScope).
func (m *Admin) check(ctx context.Context, in MappingInput) (store.GroupMapping, error) {
	if in.Group == "" || len(in.Group) > maxGroup || in.Group != trimPrintable(in.Group, maxGroup) {
		return store.GroupMapping{}, errs.E(errs.Invalid, "group must be 1 to %d printable characters without spaces around", maxGroup)
	}
	if in.Role != store.RoleAdmin && in.Role != store.RoleUser {
		return store.GroupMapping{}, errs.E(errs.Invalid, "role must be %q or %q", store.RoleAdmin, store.RoleUser)
	}
	if len(in.Grants) > maxMappingGrants {
		return store.GroupMapping{}, errs.E(errs.Invalid, "a mapping has at most %d grants", maxMappingGrants)
	}
	gm := store.GroupMapping{Group: in.Group, Role: in.Role, Grants: []store.MappedGrant{}}
	seen := map[int64]bool{}
	for i, g := range in.Grants {
		if g.Role != store.GrantOperator && g.Role != store.GrantViewer {
			return store.GroupMapping{}, errs.E(errs.Invalid, "grants[%d].role must be %q or %q", i, store.GrantOperator, store.GrantViewer)
		}
		scope, err := fleet.CheckScope(g.Scope)
		if err != nil {
			if e, ok := errs.As(err); ok {
				return store.GroupMapping{}, errs.E(e.Kind, "grants[%d]: %s", i, e.Message)
			}
			return store.GroupMapping{}, err
		}
		if seen[g.ClusterID] {
			return store.GroupMapping{}, errs.E(errs.Invalid, "grants[%d]: cluster %d is named twice", i, g.ClusterID)
		}
		seen[g.ClusterID] = true
		if _, err := m.st.ClusterByID(ctx, g.ClusterID); err != nil {
			if errs.Is(err, errs.NotFound) {
				return store.GroupMapping{}, errs.E(errs.Invalid, "grants[%d]: cluster %d does not exist", i, g.ClusterID)
			}
			return store.GroupMapping{}, fmt.Errorf("check group mapping: %w", err)
		}
		gm.Grants = append(gm.Grants, store.MappedGrant{ClusterID: g.ClusterID, Role: g.Role, Scope: scope})
	}
	return gm, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func jsonParams(m map[string]any) string {
	b, err := json.Marshal(m)
	if err != nil {
		return ""
	}
	return string(b)
}

// AdminStore is what Admin needs of the store.
type AdminStore interface {
	Store
	store.IdentityLinks
}

// LinkedIdentity is an identity of the provider as the front ends show it.
type LinkedIdentity struct {
	Issuer      string    `json:"issuer"`
	Subject     string    `json:"subject"`
	UserID      int64     `json:"userId"`
	Email       string    `json:"email"`
	Groups      []string  `json:"groups"`
	LastLoginAt time.Time `json:"lastLoginAt"`
}

func viewIdentity(id store.Identity) LinkedIdentity {
	groups := id.Groups
	if groups == nil {
		groups = []string{}
	}
	return LinkedIdentity{Issuer: id.Issuer, Subject: id.Subject, UserID: id.UserID, Email: id.Email, Groups: groups,
		LastLoginAt: id.LastLoginAt.UTC()}
}

// Identities are the identities of user userID (admin).
func (m *Admin) Identities(ctx context.Context, p auth.Principal, userID int64) ([]LinkedIdentity, error) {
	if err := m.guard.RequireAdmin(ctx, p, "identity.list"); err != nil {
		return nil, err
	}
	if _, err := m.st.UserByID(ctx, userID); err != nil {
		return nil, err
	}
	ids, err := m.st.UserIdentities(ctx, userID)
	if err != nil {
		return nil, err
	}
	out := make([]LinkedIdentity, 0, len(ids))
	for _, id := range ids {
		out = append(out, viewIdentity(id))
	}
	return out, nil
}

// Link makes the provider's identity (issuer, subject) user userID's: the same
// person with a password account, or at a second issuer, becomes one user ("a
// second issuer with the same e-mail is a different user unless an admin links
// them"). The identity's next sign-on logs into userID; a user the identity is
// taken from keeps their grants and sessions (an admin removes them if they were
// only that identity's). Audited as identity.link.
func (m *Admin) Link(ctx context.Context, p auth.Principal, userID int64, issuer, subject string) (LinkedIdentity, error) {
	if err := m.guardAdmin(ctx, p, "identity.link"); err != nil {
		return LinkedIdentity{}, err
	}
	if issuer == "" || len(issuer) > 2048 || issuer != trimPrintable(issuer, 2048) {
		return LinkedIdentity{}, errs.E(errs.Invalid, "issuer must be the provider's issuer URL")
	}
	if subject == "" || len(subject) > maxSubject || subject != trimPrintable(subject, maxSubject) {
		return LinkedIdentity{}, errs.E(errs.Invalid, "subject must be 1 to %d printable characters", maxSubject)
	}
	if _, err := m.st.UserByID(ctx, userID); err != nil {
		return LinkedIdentity{}, err
	}
	before, err := m.st.IdentityFor(ctx, issuer, subject)
	if err != nil && !errs.Is(err, errs.NotFound) {
		return LinkedIdentity{}, err
	}
	id, err := m.st.LinkIdentity(ctx, issuer, subject, userID)
	m.audit(ctx, store.AuditRecord{Action: "identity.link", Target: "user:" + strconv.FormatInt(userID, 10),
		Result: audit.Result(err), Reason: audit.Reason(err),
		Params: jsonParams(map[string]any{"issuer": issuer, "subject": subject, "from": before.UserID})})
	if err != nil {
		return LinkedIdentity{}, err
	}
	return viewIdentity(id), nil
}
