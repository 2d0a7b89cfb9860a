package fleet

import "github.com/vmgate/vmgate/internal/store"

// Actor is the authenticated caller as the fleet sees it.
type Actor struct {
	UserID int64
	Email  string
	Role   string // store.RoleAdmin or store.RoleUser
	// Limit, when not nil, is an API token's grants (cluster id → role): the
	// caller acts only on these clusters, each with the weaker of the token's
	// role and the owner's current one (an admin owner's is operator on every
	// existing cluster). nil: the owner's grants, unlimited. docs/security.md item 32.
	Limit map[int64]string
	// APITokenID is the API token the caller authenticated with; empty for a
	// login session. A token never changes grants, whoever owns it (docs/security.md
	// 32): they are credentials, and a leaked token must not widen itself.
	APITokenID string
	// Via names the request as the caller made it ("GET /api/v1/…", the web
	// UI's "UI GET /vms/…"): a read refused for want of a grant is audited with
	// it as the attempt (Require).
	Via string
}

// IsAdmin reports whether the actor may administer the fleet: an admin, not
// narrowed by an API token's grants.
func (a Actor) IsAdmin() bool { return a.Role == store.RoleAdmin && a.Limit == nil }

// roleRank orders the roles: a higher rank allows more.
func roleRank(role string) int {
	switch role {
	case store.RoleAdmin:
		return 3
	case store.GrantOperator:
		return 2
	case store.GrantViewer:
		return 1
	}
	return 0 // a role this code does not know allows nothing
}

// limited applies the actor's Limit to role, the owner's own role on clusterID
// (store.RoleAdmin for an admin): the weaker of the two, "" when the token has no
// grant on the cluster.
func (a Actor) limited(clusterID int64, role string) string {
	if a.Limit == nil {
		return role
	}
	lim, ok := a.Limit[clusterID]
	if !ok {
		return ""
	}
	if roleRank(lim) < roleRank(role) {
		return lim
	}
	return role
}
