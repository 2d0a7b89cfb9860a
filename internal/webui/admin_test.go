package webui

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/store"
)

// TestAdminPagesAreForAdmins: every admin page and form refuses anyone else (403,
// audited as access.denied), before anything is read or changed.
func TestAdminPagesAreForAdmins(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	b := e.browser()
	b.login(opEmail)
	for _, path := range []string{"/admin/users", "/admin/users/1", "/admin/clusters", "/admin/clusters/1", "/admin/grants", "/admin/audit"} {
		if p := b.get(path); p.status != http.StatusForbidden {
			t.Errorf("operator GET %s: %d", path, p.status)
		}
	}
	for _, path := range []string{"/admin/users", "/admin/users/1", "/admin/users/1/delete", "/admin/clusters", "/admin/grants"} {
		if p := b.post(path, url.Values{"change": {"disable"}, "confirm": {"yes"}, "email": {"x@example.com"}}); p.status != http.StatusForbidden {
			t.Errorf("operator POST %s: %d", path, p.status)
		}
	}
	if u, _ := e.acc.User(context.Background(), 1); u.Disabled {
		t.Fatal("the operator disabled the admin")
	}
	e.trail.Flush(context.Background()) // repeated denials are folded into a counted row
	es, _ := e.trail.List(context.Background(), 100, 0)
	var denied int64
	for _, en := range es {
		if en.Action == "access.denied" && en.UserEmail == opEmail {
			denied += en.Count
		}
	}
	if denied != 11 {
		t.Errorf("%d refusals audited, want 11", denied)
	}
	// And the navigation does not offer the admin pages.
	if strings.Contains(b.get("/").body, `href="/admin/users"`) {
		t.Error("the operator's navigation links the admin pages")
	}
}

var userLink = regexp.MustCompile(`href="/admin/users/(\d+)">zoe@example.com<`)

// TestAdminUsers: create, rename, change the role, disable (the user's UI session
// ends at once), enable, reset the password, delete; the last admin cannot demote
// themselves, and the page says why.
func TestAdminUsers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	b := e.browser()
	b.login(adminEmail)
	b.get("/admin/users").expect(t, 200)
	p := b.post("/admin/users", url.Values{"email": {"zoe@example.com"}, "nickname": {"Zoe"}, "password": {"amber fjord 3 kites"}, "role": {"user"}})
	p.expect(t, http.StatusSeeOther)
	page := p.location()
	if !strings.Contains(b.get(page).body, "User zoe@example.com created.") {
		t.Fatalf("after create: %s", page)
	}
	m := userLink.FindStringSubmatch(b.get("/admin/users").body)
	if m == nil || "/admin/users/"+m[1] != page {
		t.Fatal("the new user is not listed")
	}
	zoeID, _ := strconv.ParseInt(m[1], 10, 64)
	// A password the policy refuses: the form comes back saying so, with the
	// e-mail, the name and the role as typed, never the password (issue 19 item 8).
	p = b.post("/admin/users", url.Values{"email": {"yves@example.com"}, "nickname": {"Yves"}, "password": {"short"},
		"role": {"admin"}})
	p.expect(t, http.StatusBadRequest)
	for _, want := range []string{"notice-error", `value="yves@example.com"`, `value="Yves"`, "<option selected>admin</option>"} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the refused user creation's form has no %s", want)
		}
	}
	if strings.Contains(p.body, `value="short"`) {
		t.Error("the refused form sends the password back")
	}

	zoe := e.browser()
	zoe.loginWith("zoe@example.com", "amber fjord 3 kites")
	b.get(page)
	b.post(page, url.Values{"change": {"nickname"}, "nickname": {"Zoë"}}).expect(t, http.StatusSeeOther)
	b.post(page, url.Values{"change": {"disable"}}).expect(t, http.StatusSeeOther)
	if p := b.get(page); !strings.Contains(p.body, "User disabled") || !strings.Contains(p.body, "Zoë") {
		t.Fatalf("after disable:\n%s", p.body)
	}
	if p := zoe.get("/"); p.status != http.StatusSeeOther {
		t.Fatalf("a disabled user's UI still answers %d", p.status)
	}
	b.post(page, url.Values{"change": {"enable"}}).expect(t, http.StatusSeeOther)
	b.post(page, url.Values{"change": {"password"}, "password": {"velvet quarry 8 owls"}}).expect(t, http.StatusSeeOther)
	b.post(page, url.Values{"change": {"role"}, "role": {"admin"}}).expect(t, http.StatusSeeOther)
	u, err := e.acc.User(context.Background(), zoeID)
	if err != nil || u.Email != "zoe@example.com" || u.Role != "admin" || u.Disabled || u.Nickname != "Zoë" {
		t.Fatalf("zoe: %+v %v", u, err)
	}
	if _, _, err := e.acc.Login(context.Background(), "zoe@example.com", "velvet quarry 8 owls", "127.0.0.1"); err != nil {
		t.Fatalf("the reset password: %v", err)
	}
	// Deleting needs the box ticked.
	b.post(page+"/delete", nil).expect(t, http.StatusSeeOther)
	if p := b.get(page); p.status != 200 || !strings.Contains(p.body, "Tick the box") {
		t.Fatalf("delete without confirming:\n%s", p.body)
	}
	b.post(page+"/delete", url.Values{"confirm": {"yes"}}).expect(t, http.StatusSeeOther)
	if p := b.get(page); p.status != http.StatusNotFound {
		t.Fatalf("the deleted user's page: %d", p.status)
	}

	// The last admin cannot demote themselves.
	self := "/admin/users/" + itoa(e.users[adminEmail].ID)
	b.get(self)
	b.post(self, url.Values{"change": {"role"}, "role": {"user"}}).expect(t, http.StatusSeeOther)
	if p := b.get(self); !strings.Contains(p.body, "notice-error") || !strings.Contains(p.body, "admin") {
		t.Fatalf("demoting the last admin:\n%s", p.body)
	}
	if u, _ := e.acc.User(context.Background(), e.users[adminEmail].ID); u.Role != "admin" {
		t.Fatal("the last admin was demoted")
	}
}

// TestAdminClustersAndGrants: the cluster page shows the endpoints and
// fingerprints vmgate learned; a registration PVE refuses says why; a rename is
// saved; grants are given, shown in the matrix and taken away; a deletion needs
// the box ticked.
func TestAdminClustersAndGrants(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	b := e.browser()
	b.login(adminEmail)
	p := b.get("/admin/clusters/1").expect(t, 200)
	learned := regexp.MustCompile(`<tr><td><code>https://127\.0\.0\.\d+:\d+</code></td><td>pve\d</td><td><code class="small">[0-9A-F:]{95}</code></td></tr>`)
	if n := len(learned.FindAllString(p.body, -1)); n != 3 {
		t.Fatalf("%d learned endpoints shown, want 3:\n%s", n, p.body)
	}
	if strings.Contains(p.body, "tokenSecret\" value") {
		t.Error("the secret is in the form")
	}
	b.get("/admin/clusters")
	// A registration that cannot connect: the form comes back saying why, with
	// what was typed but the secret (issue 19 item 8).
	p = b.post("/admin/clusters", url.Values{"name": {"prod"}, "endpoints": {"https://127.0.0.1:1"}, "tokenId": {"vmgate@pve!gw"},
		"tokenSecret": {"x-secret-x"}, "trust": {"insecure"}})
	if p.status < 400 || p.status == http.StatusInternalServerError || !strings.Contains(p.body, "notice-error") {
		t.Errorf("a registration that cannot connect answered %d:\n%s", p.status, p.body)
	}
	for _, want := range []string{`value="prod"`, ">https://127.0.0.1:1</textarea>", `value="vmgate@pve!gw"`, `value="insecure" checked`} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the refused registration's form has no %s", want)
		}
	}
	if strings.Contains(p.body, "x-secret-x") {
		t.Error("the refused registration's form sends the token secret back")
	}
	// The edit form sent back as shown (its endpoints are the learned ones) with a
	// new name changes the name alone.
	form := regexp.MustCompile(`(?s)<textarea id="endpoints" name="endpoints"[^>]*>(.*?)</textarea>`).FindStringSubmatch(b.get("/admin/clusters/1").body)
	if form == nil || strings.Count(form[1], "https://") != 3 {
		t.Fatalf("the edit form's endpoints: %v", form)
	}
	b.post("/admin/clusters/1", url.Values{"name": {"lab"}, "endpoints": {form[1]}, "tokenId": {"vmgate@pve!gw"}}).expect(t, http.StatusSeeOther)
	if c, _ := e.fleet.Cluster(context.Background(), 1); c.Name != "lab" || len(c.Endpoints) != 3 {
		t.Fatalf("after rename: %+v", c)
	}

	nadia := itoa(e.users[nobodyEmail].ID)
	b.get("/admin/grants")
	b.post("/admin/grants", url.Values{"user": {nadia}, "cluster": {"1"}, "role": {"viewer"}}).expect(t, http.StatusSeeOther)
	row := regexp.MustCompile(`nadia@example.com</a></th><td>viewer</td>`)
	if p := b.get("/admin/grants"); !row.MatchString(p.body) {
		t.Fatalf("grant not in the matrix:\n%s", p.body)
	}
	b.post("/admin/grants", url.Values{"user": {nadia}, "cluster": {"1"}, "role": {"none"}}).expect(t, http.StatusSeeOther)
	if gs, _ := e.fleet.UserGrants(context.Background(), e.users[nobodyEmail].ID); len(gs) != 0 {
		t.Fatalf("grants after removal: %+v", gs)
	}
	b.post("/admin/grants", url.Values{"user": {nadia}, "cluster": {"1"}, "role": {"owner"}}).expect(t, http.StatusSeeOther)
	if p := b.get("/admin/grants"); !strings.Contains(p.body, "notice-error") {
		t.Error("a bad role says nothing")
	}

	b.get("/admin/clusters/1")
	b.post("/admin/clusters/1/delete", nil).expect(t, http.StatusSeeOther)
	if _, err := e.fleet.Cluster(context.Background(), 1); err != nil {
		t.Fatal("deleted without the box ticked")
	}
	b.post("/admin/clusters/1/delete", url.Values{"confirm": {"yes"}}).expect(t, http.StatusSeeOther)
	if _, err := e.fleet.Cluster(context.Background(), 1); err == nil {
		t.Fatal("not deleted")
	}
}

// TestAdminAuditLog: the audit page filters by action, user, cluster, result and
// day, and pages through older records.
func TestAdminAuditLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	for i := range 130 {
		e.trail.Append(ctx, store.AuditRecord{Action: "vm.start", UserID: e.users[opEmail].ID, UserEmail: opEmail, ClusterID: 1,
			VMID: int64(100 + i%6), Result: "ok"})
	}
	e.trail.Append(ctx, store.AuditRecord{Action: "vm.stop", UserID: e.users[viewerEmail].ID, UserEmail: viewerEmail,
		ClusterID: 1, Result: "shutdown_timeout"})
	b := e.browser()
	b.login(adminEmail)
	rows := func(p page) int { return strings.Count(p.body, "<td class=\"small when\">") }
	p := b.get("/admin/audit").expect(t, 200)
	if rows(p) != auditPerPage || !strings.Contains(p.body, "Older →") {
		t.Fatalf("first page: %d rows", rows(p))
	}
	older := regexp.MustCompile(`href="/admin/audit(\?before=\d+)" rel="next"`).FindStringSubmatch(p.body)
	if older == nil {
		t.Fatal("no link to older records")
	}
	if p := b.get("/admin/audit" + older[1]); rows(p) == 0 || rows(p) >= auditPerPage {
		t.Errorf("second page: %d rows", rows(p))
	}
	if p := b.get("/admin/audit?action=vm.stop"); rows(p) != 1 || !strings.Contains(p.body, "shutdown_timeout") {
		t.Errorf("by action: %d rows", rows(p))
	}
	if p := b.get("/admin/audit?user=" + itoa(e.users[viewerEmail].ID)); rows(p) != 1 {
		t.Errorf("by user: %d rows", rows(p))
	}
	if p := b.get("/admin/audit?action=auth.login&result=ok"); rows(p) != 1 {
		t.Errorf("the admin's login: %d rows", rows(p))
	}
	if p := b.get("/admin/audit?cluster=2"); rows(p) != 0 {
		t.Errorf("another cluster: %d rows", rows(p))
	}
	today := time.Now().UTC().Format(time.DateOnly)
	if p := b.get("/admin/audit?action=vm.stop&from=" + today + "&to=" + today); rows(p) != 1 {
		t.Errorf("today: %d rows", rows(p))
	}
	if p := b.get("/admin/audit?action=vm.stop&to=2000-01-01"); rows(p) != 0 {
		t.Errorf("before 2000: %d rows", rows(p))
	}
}

var endForms = regexp.MustCompile(`action="(/[^"]+/sessions/[A-Za-z0-9_-]+/end)"`)

// TestSessionsUI (docs/security.md item 29): a user sees their sessions and ends another of
// them (its browser is logged out at once) or their own (logging out); an admin
// ends anyone's from the user's page.
func TestSessionsUI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	a, b := e.browser(), e.browser()
	a.login(opEmail)
	b.login(opEmail)
	p := a.get("/account").expect(t, 200)
	forms := endForms.FindAllStringSubmatch(p.body, -1)
	if len(forms) != 2 || strings.Count(p.body, `badge-ok">this one`) != 1 {
		t.Fatalf("%d sessions listed:\n%s", len(forms), p.body)
	}
	// End b's session: the one not marked as this one.
	bSID := b.sessionID()
	a.post("/account/sessions/"+bSID+"/end", nil).expect(t, http.StatusSeeOther)
	if p := b.get("/"); p.status != http.StatusSeeOther {
		t.Fatalf("the ended session still answers %d", p.status)
	}
	if p := a.get("/account"); len(endForms.FindAllString(p.body, -1)) != 1 || !strings.Contains(p.body, "The session has ended") {
		t.Fatalf("after ending b:\n%s", p.body)
	}
	// Another user's session is no session of mine: refused.
	c := e.browser()
	c.login(viewerEmail)
	a.post("/account/sessions/"+c.sessionID()+"/end", nil).expect(t, http.StatusSeeOther)
	c.get("/").expect(t, 200)
	// Ending my own is logging out.
	p = a.post("/account/sessions/"+a.sessionID()+"/end", nil).expect(t, http.StatusSeeOther)
	if p.location() != "/login" || a.sessionCookie() != "" {
		t.Fatalf("ending my own session: %s, cookie %q", p.location(), a.sessionCookie())
	}

	// An admin ends the viewer's session.
	adm := e.browser()
	adm.login(adminEmail)
	page := "/admin/users/" + itoa(e.users[viewerEmail].ID)
	if p := adm.get(page); len(endForms.FindAllString(p.body, -1)) != 1 {
		t.Fatalf("the viewer's sessions on the admin page:\n%s", p.body)
	}
	adm.post(page+"/sessions/"+c.sessionID()+"/end", nil).expect(t, http.StatusSeeOther)
	if p := c.get("/"); p.status != http.StatusSeeOther {
		t.Fatalf("the session an admin ended still answers %d", p.status)
	}
}

// sessionID is the session id the browser's cookie carries.
func (b *browser) sessionID() string {
	b.e.t.Helper()
	p, err := b.e.auth.Authenticate(context.Background(), b.sessionCookie())
	if err != nil {
		b.e.t.Fatal(err)
	}
	return p.SessionID
}

var tokenSecret = regexp.MustCompile(`id="new-token-secret" class="mono" value="(vmg_[A-Za-z0-9]+)"`)

// TestAPITokensUI (docs/security.md item 32): a user makes a token, sees its secret once (on
// the answer itself, never again), the token works against the API and never
// beyond the user's grants; revoking it from the account page or an admin's
// user page ends it at once.
func TestAPITokensUI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	b := e.browser()
	b.login(viewerEmail)
	b.get("/account")
	p := b.post("/account/tokens", url.Values{"name": {"nightly"}, "days": {"30"}, "scope": {"all"}}).expect(t, 200)
	m := tokenSecret.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no secret shown:\n%s", p.body)
	}
	secret := m[1]
	api := func(method, path, tok string) int {
		req, _ := http.NewRequest(method, e.srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := api("GET", "/api/v1/pve/clusters/1/vms", secret); s != 200 {
		t.Fatalf("the new token reads VMs: %d", s)
	}
	if s := api("POST", "/api/v1/pve/vm/1/pve1/101/start", secret); s != 403 {
		t.Fatalf("the viewer's token started a VM: %d", s)
	}
	again := b.get("/account")
	if strings.Contains(again.body, secret) || !strings.Contains(again.body, "nightly") {
		t.Fatal("the secret is shown again, or the token is not listed")
	}
	// A viewer cannot give a token operator, whatever the form says.
	b.post("/account/tokens", url.Values{"name": {"sneaky"}, "scope": {"some"}, "cluster-1": {"operator"}}).expect(t, http.StatusSeeOther)
	if p := b.get("/account"); !strings.Contains(p.body, "notice-error") || strings.Contains(p.body, "sneaky") {
		t.Fatalf("a token beyond the viewer's grant:\n%s", p.body)
	}
	// Revoked from the account page: it fails at once.
	rev := regexp.MustCompile(`action="(/account/tokens/[A-Za-z0-9]+/revoke)"`).FindStringSubmatch(again.body)
	if rev == nil {
		t.Fatal("no revoke form")
	}
	b.post(rev[1], nil).expect(t, http.StatusSeeOther)
	if s := api("GET", "/api/v1/pve/clusters/1/vms", secret); s != 401 {
		t.Fatalf("a revoked token: %d", s)
	}

	// An admin revokes another.
	p = b.post("/account/tokens", url.Values{"name": {"second"}, "scope": {"some"}, "cluster-1": {"viewer"}}).expect(t, 200)
	second := tokenSecret.FindStringSubmatch(p.body)[1]
	adm := e.browser()
	adm.login(adminEmail)
	page := "/admin/users/" + itoa(e.users[viewerEmail].ID)
	up := adm.get(page)
	arev := regexp.MustCompile(`action="(` + page + `/tokens/[A-Za-z0-9]+/revoke)"`).FindStringSubmatch(up.body)
	if arev == nil || !strings.Contains(up.body, "cluster 1: viewer") {
		t.Fatalf("the admin's view of the token:\n%s", up.body)
	}
	adm.post(arev[1], nil).expect(t, http.StatusSeeOther)
	if s := api("GET", "/api/v1/pve/clusters/1/vms", second); s != 401 {
		t.Fatalf("a token an admin revoked: %d", s)
	}
}
