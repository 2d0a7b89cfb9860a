package storetest

import (
	"testing"

	"github.com/vmgate/vmgate/internal/store"
)

// testGrantScopes: a grant keeps its scope (pools and tags) through put, read
// and list; a changed scope replaces the old one, keeping CreatedAt; a zero
// scope is a cluster-wide grant again; the change is in the feed (the fleet's
// cache depends on it).
func testGrantScopes(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mkUser(t, s, "scoped@example.com")
	c1, c2 := mkCluster(t, s, "c1"), mkCluster(t, s, "c2")

	scoped := store.Grant{UserID: u.ID, ClusterID: c1.ID, Role: store.GrantOperator, CreatedAt: at(0),
		Scope: store.GrantScope{Pools: []string{"team-a", "shared/web"}, Tags: []string{"prod"}}}
	put, err := s.PutGrant(ctx, scoped)
	ok(t, err, "put scoped grant")
	same(t, put, scoped, "scoped grant as put")
	wide := store.Grant{UserID: u.ID, ClusterID: c2.ID, Role: store.GrantViewer, CreatedAt: at(0)}
	_, err = s.PutGrant(ctx, wide)
	ok(t, err, "put wide grant")

	got, err := s.GrantFor(ctx, u.ID, c1.ID)
	ok(t, err, "read scoped grant")
	same(t, got, scoped, "scoped grant read back")
	gs, err := s.UserGrants(ctx, u.ID)
	ok(t, err, "list grants")
	same(t, gs, []store.Grant{scoped, wide}, "grants with and without a scope")

	head := feedHead(t, s)
	narrower := scoped
	narrower.CreatedAt = at(1)
	narrower.Scope = store.GrantScope{Tags: []string{"web", "db"}}
	put, err = s.PutGrant(ctx, narrower)
	ok(t, err, "change scope")
	narrower.CreatedAt = at(0)
	same(t, put, narrower, "a changed scope replaces the old one and keeps CreatedAt")
	after, err := s.Changes(ctx, head, 10)
	ok(t, err, "changes after the scope change")
	same(t, len(after), 1, "one change for a scope change")
	same(t, after[0].Kind, store.ChangeGrant, "a scope change is a grant change")

	narrower.Scope = store.GrantScope{}
	put, err = s.PutGrant(ctx, narrower)
	ok(t, err, "drop scope")
	same(t, put.Scope.IsZero(), true, "a zero scope is cluster-wide again")
	got, err = s.GrantFor(ctx, u.ID, c1.ID)
	ok(t, err, "read unscoped grant")
	same(t, got, narrower, "cluster-wide grant read back")
}
