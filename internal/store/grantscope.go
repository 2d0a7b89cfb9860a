package store

import (
	"encoding/json"
	"fmt"
	"slices"
)

// GrantScope narrows a grant to some of a cluster's guests: those in one of
// Pools (PVE resource pools, by id) or carrying one of Tags (PVE tags). The zero
// scope is no narrowing: the grant covers the whole cluster, as before scopes
// (issue 23 section 3, docs/decisions/0120).
type GrantScope struct {
	Pools []string `json:"pools,omitempty"`
	Tags  []string `json:"tags,omitempty"`
}

// IsZero reports whether the scope narrows nothing (a cluster-wide grant).
func (g GrantScope) IsZero() bool { return len(g.Pools) == 0 && len(g.Tags) == 0 }

// Covers reports whether a guest in pool ("" for none) with tags is in the
// scope. The zero scope covers every guest. PVE's tags compare case-blind in
// its own UI only by display; vmgate compares them exactly, as /cluster/resources
// gives them.
func (g GrantScope) Covers(pool string, tags []string) bool {
	if g.IsZero() {
		return true
	}
	if pool != "" && slices.Contains(g.Pools, pool) {
		return true
	}
	for _, t := range tags {
		if slices.Contains(g.Tags, t) {
			return true
		}
	}
	return false
}

// grantScopeJSON is a scope as the grants table keeps it.
type grantScopeJSON struct {
	Pools []string `json:"pools,omitempty"`
	Tags  []string `json:"tags,omitempty"`
}

// encodeScope is the scope column of g: "" for the zero scope.
func encodeScope(g GrantScope) (string, error) {
	if g.IsZero() {
		return "", nil
	}
	b, err := json.Marshal(grantScopeJSON(g))
	if err != nil {
		return "", fmt.Errorf("encode grant scope: %w", err)
	}
	return string(b), nil
}

// scopeCol scans the scope column into a GrantScope.
type scopeCol struct{ g *GrantScope }

func (c scopeCol) Scan(v any) error {
	var s string
	switch v := v.(type) {
	case nil:
	case string:
		s = v
	case []byte:
		s = string(v)
	default:
		return fmt.Errorf("grant scope: unexpected %T", v)
	}
	if s == "" {
		*c.g = GrantScope{}
		return nil
	}
	var j grantScopeJSON
	if err := json.Unmarshal([]byte(s), &j); err != nil {
		return fmt.Errorf("grant scope %q: %w", s, err)
	}
	*c.g = GrantScope(j)
	return nil
}

// Equal reports whether g and o name the same pools and tags, in the same
// order (scopes are kept sorted and without duplicates).
func (g GrantScope) Equal(o GrantScope) bool {
	return slices.Equal(g.Pools, o.Pools) && slices.Equal(g.Tags, o.Tags)
}
