package fleet

import (
	"slices"

	"github.com/vmgate/vmgate/internal/store"
)

// GrantScope is a grant's scope as an admin gives and sees it: the PVE pools
// and tags whose guests the grant covers. JSON: {"pools": [...], "tags": [...]},
// the shape group mappings use too.
type GrantScope struct {
	Pools []string `json:"pools"`
	Tags  []string `json:"tags"`
}

// MaxScopeEntries bounds the pools, and apart the tags, of one scope.
const MaxScopeEntries = 64

// validScope checks a scope an admin gives (nil: the whole cluster) and
// returns it as the store keeps it: each entry a PVE pool id or tag, at most
// MaxScopeEntries of each, duplicates dropped, sorted; at least one entry (an
// empty scope would be a grant on nothing: leave the scope out instead).
func validScope(in *GrantScope) (store.GrantScope, error) {
	if in == nil {
		return store.GrantScope{}, nil
	}
	if len(in.Pools) > MaxScopeEntries || len(in.Tags) > MaxScopeEntries {
		return store.GrantScope{}, invalid("a scope names at most %d pools and %d tags", MaxScopeEntries, MaxScopeEntries)
	}
	for i, p := range in.Pools {
		if !validPool(p) {
			return store.GrantScope{}, invalid("scope.pools[%d] %q is not a PVE pool id (letters, digits, _ -, nested with /; at most %d)",
				i, quoteSafe(p), maxPoolLen)
		}
	}
	for i, t := range in.Tags {
		if !validTag(t) {
			return store.GrantScope{}, invalid("scope.tags[%d] %q is not a PVE tag (letters, digits, _ + . -; at most %d)",
				i, quoteSafe(t), maxTagLen)
		}
	}
	out := store.GrantScope{Pools: sortedSet(in.Pools), Tags: sortedSet(in.Tags)}
	if out.IsZero() {
		return store.GrantScope{}, invalid("a scope names at least one pool or tag; for the whole cluster, leave scope out (null)")
	}
	return out, nil
}

// CheckScope is the check PutScopedGrant makes of a scope, for the other use
// cases that give grants (group mappings, internal/identity): nil is the whole
// cluster; otherwise the scope as the store keeps it, or an Invalid error whose
// message names scope.pools[i] or scope.tags[i].
func CheckScope(in *GrantScope) (store.GrantScope, error) { return validScope(in) }

func sortedSet(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}

// grantOf is a stored grant as an admin sees it.
func grantOf(g store.Grant) Grant {
	out := Grant{UserID: g.UserID, ClusterID: g.ClusterID, Role: g.Role, CreatedAt: g.CreatedAt}
	if !g.Scope.IsZero() {
		out.Scope = &GrantScope{Pools: nonNil(g.Scope.Pools), Tags: nonNil(g.Scope.Tags)}
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
