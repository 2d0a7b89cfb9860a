package main

import (
	"strings"

	"github.com/vmgate/vmgate/client"
)

// grantScope is the scope of `vmgate grant --pool … --tag …`: nil (the whole
// cluster) without either.
func grantScope(pools, tags []string) *client.GrantScope {
	if len(pools) == 0 && len(tags) == 0 {
		return nil
	}
	return &client.GrantScope{Pools: pools, Tags: tags}
}

// scopeText says a grant's scope after "user 2 is operator on cluster 1".
func scopeText(sc *client.GrantScope) string {
	if sc == nil {
		return ""
	}
	var parts []string
	if len(sc.Pools) > 0 {
		parts = append(parts, "pools "+strings.Join(sc.Pools, ", "))
	}
	if len(sc.Tags) > 0 {
		parts = append(parts, "tags "+strings.Join(sc.Tags, ", "))
	}
	return ", only for guests in " + strings.Join(parts, " or with ")
}
