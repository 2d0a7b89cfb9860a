package identity

import (
	"context"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// TestGroupMappingScopesFollowTheMapping (docs/security.md item 43, issue 23): a
// mapping's grant with a scope gives the member the grant with that scope at
// login; the scope changed in the mapping changes the grant at the next login;
// two mappings of the member on one cluster with the same role give the union of
// their scopes, and a weaker unscoped one adds nothing; a grant whose scope an
// admin changed by hand is theirs and stays; the group gone, the mapped grant
// goes. A scope PutScopedGrant would refuse is refused here too.
func TestGroupMappingScopesFollowTheMapping(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, dsn func(t *testing.T) string) {
		st := openStore(t, dsn(t))
		e := newEnv(t, st)
		ctx := context.Background()
		var clusters []int64
		for _, name := range []string{"c1", "c2"} {
			c, err := st.CreateCluster(ctx, store.Cluster{Name: name, Endpoints: []store.Endpoint{{URL: "https://" + name + ".example:8006"}},
				TokenID: "root@pam!vmgate", TokenSecretSealed: []byte("sealed")})
			if err != nil {
				t.Fatal(err)
			}
			clusters = append(clusters, c.ID)
		}
		c1, c2 := clusters[0], clusters[1]
		if _, err := st.CreateUser(ctx, store.User{Email: "root@example.com", PasswordHash: "$argon2id$x", Role: store.RoleAdmin}); err != nil {
			t.Fatal(err)
		}
		m := NewAdmin(st, allowAll{}, nil)
		admin := auth.Principal{UserID: 1, Role: store.RoleAdmin, SessionID: "s"}

		for _, bad := range []struct {
			scope *Scope
			want  string
		}{
			{&Scope{}, "grants[0]: a scope names at least one pool or tag"},
			{&Scope{Pools: []string{"a b"}}, "grants[0]: scope.pools[0]"},
			{&Scope{Tags: []string{"x;y"}}, "grants[0]: scope.tags[0]"},
		} {
			_, err := m.Create(ctx, admin, MappingInput{Group: "bad", Role: store.RoleUser,
				Grants: []GrantInput{{ClusterID: c1, Role: store.GrantViewer, Scope: bad.scope}}})
			ee, ok := errs.As(err)
			if !errs.Is(err, errs.Invalid) || !ok || !strings.HasPrefix(ee.Message, bad.want) {
				t.Errorf("scope %+v: %v, want Invalid %q…", bad.scope, err, bad.want)
			}
		}

		team, err := m.Create(ctx, admin, MappingInput{Group: "team", Role: store.RoleUser, Grants: []GrantInput{
			{ClusterID: c1, Role: store.GrantOperator, Scope: &Scope{Pools: []string{"team-a", "team-a"}, Tags: []string{"web"}}},
			{ClusterID: c2, Role: store.GrantViewer}}})
		if err != nil {
			t.Fatal(err)
		}
		if g := team.Grants[0]; g.Scope == nil || strings.Join(g.Scope.Pools, ",") != "team-a" || strings.Join(g.Scope.Tags, ",") != "web" {
			t.Fatalf("created mapping's scope: %+v", g.Scope)
		}
		if team.Grants[1].Scope != nil {
			t.Fatalf("unscoped grant shows scope %+v", team.Grants[1].Scope)
		}
		if _, err := m.Create(ctx, admin, MappingInput{Group: "dbs", Role: store.RoleUser, Grants: []GrantInput{
			{ClusterID: c1, Role: store.GrantOperator, Scope: &Scope{Tags: []string{"db"}}}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Create(ctx, admin, MappingInput{Group: "watchers", Role: store.RoleUser, Grants: []GrantInput{
			{ClusterID: c1, Role: store.GrantViewer}}}); err != nil {
			t.Fatal(err)
		}

		groups := []string{"team"}
		e.op.setIDToken(func(n string) string { c := e.claims(n); c["groups"] = groups; return e.op.sign(t, c) })
		type held struct{ role, pools, tags string }
		expect := func(step string, want map[int64]held) int64 {
			t.Helper()
			f, err := login(t, e.svc, e.op)
			if err != nil {
				t.Fatalf("%s: login: %v", step, err)
			}
			gs, err := st.UserGrants(ctx, f.User.ID)
			if err != nil {
				t.Fatal(err)
			}
			got := map[int64]held{}
			for _, g := range gs {
				got[g.ClusterID] = held{g.Role, strings.Join(g.Scope.Pools, ","), strings.Join(g.Scope.Tags, ",")}
			}
			if len(got) != len(want) {
				t.Errorf("%s: grants %+v, want %+v", step, got, want)
			}
			for c, w := range want {
				if got[c] != w {
					t.Errorf("%s: cluster %d: %+v, want %+v", step, c, got[c], w)
				}
			}
			return f.User.ID
		}

		uid := expect("team: the scoped grant", map[int64]held{c1: {store.GrantOperator, "team-a", "web"}, c2: {store.GrantViewer, "", ""}})
		e.mu.Lock()
		var put []string
		for _, a := range e.audit {
			if a.Action == "grant.put" {
				put = append(put, a.Params)
			}
		}
		e.mu.Unlock()
		if len(put) != 2 || !strings.Contains(strings.Join(put, " "), `"scope":{"pools":["team-a"],"tags":["web"]}`) ||
			!strings.Contains(strings.Join(put, " "), `"scope":null`) {
			t.Errorf("grant.put audits: %s", put)
		}

		if _, err := m.Update(ctx, admin, team.ID, MappingInput{Group: "team", Role: store.RoleUser, Grants: []GrantInput{
			{ClusterID: c1, Role: store.GrantOperator, Scope: &Scope{Pools: []string{"team-b"}}},
			{ClusterID: c2, Role: store.GrantViewer}}}); err != nil {
			t.Fatal(err)
		}
		expect("the mapping's scope changed", map[int64]held{c1: {store.GrantOperator, "team-b", ""}, c2: {store.GrantViewer, "", ""}})

		groups = []string{"team", "dbs", "watchers"}
		expect("two scoped operators: the union; the wider viewer adds nothing",
			map[int64]held{c1: {store.GrantOperator, "team-b", "db"}, c2: {store.GrantViewer, "", ""}})

		groups = []string{"watchers"}
		expect("only the unscoped viewer: the scope goes", map[int64]held{c1: {store.GrantViewer, "", ""}})

		groups = []string{"team"}
		expect("team again", map[int64]held{c1: {store.GrantOperator, "team-b", ""}, c2: {store.GrantViewer, "", ""}})
		// An admin changes the scope of the mapped grant on c1 by hand: it is theirs now.
		if _, err := st.PutGrant(ctx, store.Grant{UserID: uid, ClusterID: c1, Role: store.GrantOperator,
			Scope: store.GrantScope{Pools: []string{"hand"}}}); err != nil {
			t.Fatal(err)
		}
		expect("the hand-changed scope stays", map[int64]held{c1: {store.GrantOperator, "hand", ""}, c2: {store.GrantViewer, "", ""}})

		groups = []string{}
		expect("no group: the mapped grant goes, the admin's stays", map[int64]held{c1: {store.GrantOperator, "hand", ""}})
	})
}
