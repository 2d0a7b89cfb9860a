package webui

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestAdminGroupMappingScope: the group mappings form gives a mapping whose
// grant on a cluster is narrowed to the pools and tags of that cluster's fields,
// the table shows the scope, and a bad tag is refused with a notice naming it.
func TestAdminGroupMappingScope(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	b := e.browser()
	b.login(adminEmail)
	b.get("/admin/group-mappings")
	b.post("/admin/group-mappings", url.Values{"group": {"team"}, "role": {"user"}, "grant-1": {"operator"},
		"pools-1": {"team-a"}, "tags-1": {"web, db"}}).expect(t, http.StatusSeeOther)
	p := b.get("/admin/group-mappings")
	if !strings.Contains(p.body, ": operator (pools team-a; tags db, web)") {
		t.Errorf("the table does not show the scope:\n%s", p.body)
	}
	b.post("/admin/group-mappings", url.Values{"group": {"bad"}, "role": {"user"}, "grant-1": {"viewer"},
		"tags-1": {"no;tag!"}}).expect(t, http.StatusSeeOther)
	if p := b.get("/admin/group-mappings"); !strings.Contains(p.body, "notice-error") || !strings.Contains(p.body, "scope.tags[") {
		t.Errorf("a bad tag says nothing:\n%s", p.body)
	}
}
