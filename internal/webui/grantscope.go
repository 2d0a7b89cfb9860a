package webui

import (
	"strings"

	"github.com/vmgate/vmgate/internal/fleet"
)

// formScope is the scope the grants form gives: its pools and tags, each a
// list separated by commas or spaces; nil (the whole cluster) when both are
// empty. The use case judges every entry.
func formScope(pools, tags string) *fleet.GrantScope {
	split := func(s string) []string {
		return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ';' || r == ' ' || r == '\t' })
	}
	p, t := split(pools), split(tags)
	if len(p) == 0 && len(t) == 0 {
		return nil
	}
	return &fleet.GrantScope{Pools: p, Tags: t}
}

// scopeNote is how the grants matrix shows a grant's scope after its role:
// "" for the whole cluster.
func scopeNote(sc *fleet.GrantScope) string {
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
	return " (" + strings.Join(parts, "; ") + ")"
}
