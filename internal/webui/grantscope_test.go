package webui

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// TestAdminScopedGrant: the grants form gives a grant scoped to pools and tags
// (either list separated by commas or spaces), the matrix shows the scope, a
// bad pool is refused with a notice, and the form without pools or tags gives
// the whole cluster again.
func TestAdminScopedGrant(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	b := e.browser()
	b.login(adminEmail)
	nadia := itoa(e.users[nobodyEmail].ID)
	b.get("/admin/grants")
	b.post("/admin/grants", url.Values{"user": {nadia}, "cluster": {"1"}, "role": {"operator"},
		"pools": {"staging"}, "tags": {"web, prod"}}).expect(t, http.StatusSeeOther)
	gs, err := e.fleet.UserGrants(context.Background(), e.users[nobodyEmail].ID)
	if err != nil || len(gs) != 1 || gs[0].Scope == nil || !slices.Equal(gs[0].Scope.Pools, []string{"staging"}) ||
		!slices.Equal(gs[0].Scope.Tags, []string{"prod", "web"}) {
		t.Fatalf("grants after a scoped put: %+v (%v)", gs, err)
	}
	if p := b.get("/admin/grants"); !strings.Contains(p.body, "<td>operator (pools staging; tags prod, web)</td>") {
		t.Errorf("the matrix does not show the scope:\n%s", p.body)
	}
	b.post("/admin/grants", url.Values{"user": {nadia}, "cluster": {"1"}, "role": {"operator"},
		"pools": {"no/"}}).expect(t, http.StatusSeeOther)
	if p := b.get("/admin/grants"); !strings.Contains(p.body, "notice-error") || !strings.Contains(p.body, "cope.pools[0]") {
		t.Errorf("a bad pool says nothing:\n%s", p.body)
	}
	b.post("/admin/grants", url.Values{"user": {nadia}, "cluster": {"1"}, "role": {"viewer"}}).expect(t, http.StatusSeeOther)
	if gs, _ := e.fleet.UserGrants(context.Background(), e.users[nobodyEmail].ID); len(gs) != 1 || gs[0].Scope != nil {
		t.Fatalf("grants after a put without a scope: %+v", gs)
	}
}
