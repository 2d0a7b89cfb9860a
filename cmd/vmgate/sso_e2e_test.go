package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/client"
	"github.com/vmgate/vmgate/internal/oidctest"
	"github.com/vmgate/vmgate/internal/testkit"
)

// ssoLab is a vmgate server with single sign-on at a real Dex, an emulated
// cluster registered twice (lab, lab2) and an admin's client.
type ssoLab struct {
	base    string
	dex     *oidctest.Dex
	srv     *proc
	admin   *client.Client
	lab     int64
	lab2    int64
	clients []oidctest.Client
}

const (
	ssoSecret  = "dex-client-secret-for-vmgate"
	ssoAdminPW = "single sign on admin pass"
)

// startSSOLab starts Dex's address first (vmgate must know its issuer), then
// vmgate on a port picked ahead (Dex must know vmgate's callback), then Dex with
// users.
func startSSOLab(t *testing.T, users ...oidctest.User) *ssoLab {
	t.Helper()
	dex := oidctest.NewOn(t, freePort(t))
	info := startSim(t)
	dir := t.TempDir()
	createAdmin(t, dir, "root@example.com", ssoAdminPW)
	secretFile := filepath.Join(dir, "oidc-secret")
	if err := os.WriteFile(secretFile, []byte(ssoSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	base := "http://" + addr
	srv := start(t, nil, "server", "--data-dir", dir, "--listen", addr, "--oidc-issuer", dex.Issuer,
		"--oidc-client-id", "vmgate", "--oidc-client-secret-file", secretFile,
		"--oidc-redirect-url", base+"/auth/oidc/callback", "--oidc-provider-name", "Dex")
	srv.line(t, listening)
	l := &ssoLab{base: base, dex: dex, srv: srv, admin: checkedClient(t, base, ""),
		clients: []oidctest.Client{{ID: "vmgate", Secret: ssoSecret, RedirectURIs: []string{base + "/auth/oidc/callback"}}}}
	dex.Start(t, l.clients, users)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := l.admin.Login(ctx, "root@example.com", ssoAdminPW); err != nil {
		t.Fatal(err)
	}
	tokenID, secret, _ := strings.Cut(info.Token, "=")
	for _, name := range []string{"lab", "lab2"} {
		cl, err := l.admin.RegisterCluster(ctx, client.ClusterCreate{Name: name, Endpoints: []string{info.URL}, TokenID: tokenID,
			TokenSecret: secret, TLSFingerprint: info.Fingerprint})
		if err != nil {
			t.Fatalf("register %s: %v", name, err)
		}
		if name == "lab" {
			l.lab = cl.ID
		} else {
			l.lab2 = cl.ID
		}
	}
	return l
}

// browser is an HTTP client with its own cookies, playing a browser that follows
// redirects.
func browserClient() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 60 * time.Second}
}

// ssoInBrowser logs u in through the web UI's single sign-on, the test playing
// the browser: /auth/oidc/login, Dex's form, back to vmgate's callback. It
// returns the browser and the last page.
func (l *ssoLab) ssoInBrowser(t *testing.T, u oidctest.User, next string) (*http.Client, *http.Response, string) {
	t.Helper()
	b := browserClient()
	resp, err := b.Get(l.base + "/auth/oidc/login?next=" + next)
	if err != nil {
		t.Fatal(err)
	}
	last, body := oidctest.LogIn(t, b, resp, u.Email, u.Password)
	return b, last, body
}

// ssoLoopback logs u in as a native client would (client.StartSSO, the loopback
// redirect of RFC 8252, client.FinishSSO), the test playing the browser.
func (l *ssoLab) ssoLoopback(t *testing.T, u oidctest.User) client.LoginToken {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(l.base)
	start := c.StartSSO("http://" + ln.Addr().String() + "/callback")
	codes := make(chan string, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("state") == start.State {
			select {
			case codes <- r.URL.Query().Get("code"):
			default:
			}
		}
		io.WriteString(w, "ok")
	})}
	go srv.Serve(ln)
	defer srv.Close()
	b := browserClient()
	resp, err := b.Get(start.URL)
	if err != nil {
		t.Fatal(err)
	}
	oidctest.LogIn(t, b, resp, u.Email, u.Password)
	var code string
	select {
	case code = <-codes:
	case <-time.After(testkit.Deadline):
		t.Fatalf("the loopback redirect never came; vmgate:\n%s\ndex:\n%s", l.srv.log(), l.dex.Log())
	}
	tok, err := c.FinishSSO(t.Context(), start, code)
	if err != nil {
		t.Fatalf("exchange the code: %v", err)
	}
	return tok
}

func grantsOf(t *testing.T, me client.Me) map[int64]string {
	t.Helper()
	out := map[int64]string{}
	for _, g := range me.Grants {
		out[g.ClusterID] = g.Role
	}
	return out
}

// TestSingleSignOnWithDex (issue 23, docs/security.md items 40 and 43) against a
// real OpenID Provider: Dex logs alice in through the web UI (the test plays the
// browser over HTTP: vmgate's login, Dex's form, the callback, the bounce page,
// the session cookie); a native client's loopback login (RFC 8252) gets a token
// whose grants are what the group mapping gives; after Dex restarts with new
// keys and without alice's group, her next login still verifies (the JWKS
// rotation followed) and the mapped grant is gone while the hand-given one
// stays; disabling her ends her sessions at once and refuses her next sign-on.
func TestSingleSignOnWithDex(t *testing.T) {
	t.Parallel()
	alice := oidctest.User{Email: "alice@example.com", Password: "alice's dex password", Name: "Alice", ID: "alice-1",
		Groups: []string{"ops"}}
	l := startSSOLab(t, alice)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if _, err := l.admin.CreateGroupMapping(ctx, client.GroupMappingInput{Group: "ops", Role: "user",
		Grants: []client.GroupMappingGrant{{ClusterID: l.lab, Role: "operator"}}}); err != nil {
		t.Fatal(err)
	}

	// The log-in page offers the provider.
	page, err := http.Get(l.base + "/login")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(page.Body)
	page.Body.Close()
	if !strings.Contains(string(body), `href="/auth/oidc/login?next=%2f"`) || !strings.Contains(string(body), "Log in with Dex") {
		t.Fatalf("the log-in page has no single sign-on button:\n%s", body)
	}

	b, last, body2 := l.ssoInBrowser(t, alice, "/vms")
	if last.StatusCode != http.StatusOK || last.Request.URL.Path != "/auth/oidc/callback" || !strings.Contains(body2, "url=/vms") {
		t.Fatalf("the callback's answer: %d %s\n%s\nvmgate:\n%s", last.StatusCode, last.Request.URL, body2, l.srv.log())
	}
	vms, err := b.Get(l.base + "/vms")
	if err != nil {
		t.Fatal(err)
	}
	vmsBody, _ := io.ReadAll(vms.Body)
	vms.Body.Close()
	if vms.Request.URL.Path != "/vms" || vms.StatusCode != http.StatusOK || !strings.Contains(string(vmsBody), "alice@example.com") {
		t.Fatalf("the VM list with the SSO session: %d %s", vms.StatusCode, vms.Request.URL)
	}

	tok := l.ssoLoopback(t, alice)
	if tok.User.Email != "alice@example.com" {
		t.Fatalf("token of %+v", tok.User)
	}
	aliceC := checkedClient(t, l.base, tok.Token)
	me, err := aliceC.Me(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if g := grantsOf(t, me); me.Role != "user" || len(g) != 1 || g[l.lab] != "operator" {
		t.Fatalf("alice after her first login: %s %v", me.Role, g)
	}
	// An SSO session refreshes like any other.
	if _, err := aliceC.Refresh(ctx); err != nil {
		t.Fatalf("refresh an SSO session: %v", err)
	}
	// An admin gives lab2 by hand.
	if _, err := l.admin.PutGrant(ctx, l.lab2, me.ID, "viewer"); err != nil {
		t.Fatal(err)
	}

	// Dex again, with new keys, and alice no longer in ops.
	alice.Groups = nil
	l.dex.Start(t, l.clients, []oidctest.User{alice})
	tok = l.ssoLoopback(t, alice)
	me, err = checkedClient(t, l.base, tok.Token).Me(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if g := grantsOf(t, me); len(g) != 1 || g[l.lab2] != "viewer" {
		t.Fatalf("alice without her group: %v, want only the hand-given viewer on lab2", g)
	}

	// Disabled: her sessions end at once, her next sign-on is refused.
	if _, err := l.admin.UpdateUser(ctx, me.ID, client.UserPatch{Disabled: new(true)}); err != nil {
		t.Fatal(err)
	}
	if _, err := aliceC.Me(ctx); client.StatusOf(err) != http.StatusUnauthorized {
		t.Fatalf("a disabled user's token: %v", err)
	}
	again, err := b.Get(l.base + "/vms")
	if err != nil {
		t.Fatal(err)
	}
	again.Body.Close()
	if again.Request.URL.Path != "/login" {
		t.Fatalf("a disabled user's browser session reached %s", again.Request.URL)
	}
	_, refused, refusedBody := l.ssoInBrowser(t, alice, "/")
	if refused.StatusCode != http.StatusUnauthorized || !strings.Contains(refusedBody, "Single sign-on with Dex failed") {
		t.Fatalf("a disabled user's sign-on: %d\n%s", refused.StatusCode, refusedBody)
	}
	audit, err := l.admin.Audit(ctx, client.AuditFilter{Action: "auth.login"})
	if err != nil {
		t.Fatal(err)
	}
	oidcLogins := 0
	for _, r := range audit.Items {
		if strings.Contains(string(r.Params), `"method":"oidc"`) {
			oidcLogins++
		}
	}
	if oidcLogins != 3 {
		t.Errorf("auth.login records with method oidc: %d, want 3", oidcLogins)
	}
}

var ssoURL = regexp.MustCompile(`http://\S+/auth/oidc/login\?\S+`)

// TestLoginSSOCommand: an admin maps a group with `vmgate group-mapping add`;
// `vmgate login --sso --no-browser` prints the address to open, receives the
// browser on its loopback port (RFC 8252, PKCE), keeps the login, and the next
// command runs as the SSO user, with the group's grant; `group-mapping set`
// narrows the grant to a pool and a tag, and the list shows it; at the next
// sign-on the user sees only the guests of the mapped scope.
func TestLoginSSOCommand(t *testing.T) {
	t.Parallel()
	bob := oidctest.User{Email: "bob@example.com", Password: "bob's dex password", Name: "Bob", ID: "bob-1",
		Groups: []string{"ops"}}
	l := startSSOLab(t, bob)
	adminEnv := cliEnv(t, "VMGATE_SERVER="+l.base, "VMGATE_TOKEN="+l.admin.Token())
	added := runCLI(t, adminEnv, "", "group-mapping", "add", "ops", "--grant", "lab=operator", "-o", "json").
		want(t, 0, "group-mapping add")
	if !strings.Contains(added.stdout, `"group": "ops"`) {
		t.Fatalf("group-mapping add printed:\n%s", added.stdout)
	}
	list := runCLI(t, adminEnv, "", "group-mapping", "list", "-o", "table").want(t, 0, "group-mapping list")
	if rows := table(list.stdout); len(rows) != 2 || rows[1][1] != "ops" || rows[1][3] != fmt.Sprintf("%d=operator", l.lab) {
		t.Fatalf("group-mapping list:\n%s", list.stdout)
	}
	env := cliEnv(t)
	ssoLogin := func() {
		t.Helper()
		cmd := startCLI(t, env, "login", "--sso", "--no-browser", "--server", l.base)
		cmd.waitStderr(t, "/auth/oidc/login?")
		_, stderr := cmd.outputs()
		open := ssoURL.FindString(stderr)
		if !strings.Contains(open, "code_challenge_method=S256") {
			t.Fatalf("no address with PKCE in:\n%s", stderr)
		}
		b := browserClient()
		resp, err := b.Get(open)
		if err != nil {
			t.Fatal(err)
		}
		last, body := oidctest.LogIn(t, b, resp, bob.Email, bob.Password)
		if last.StatusCode != http.StatusOK || !strings.Contains(body, "you are logged in") {
			t.Fatalf("the loopback's answer: %d %s\ndex:\n%s", last.StatusCode, body, l.dex.Log())
		}
		if code := cmd.wait(t); code != 0 {
			o, e := cmd.outputs()
			t.Fatalf("vmgate login --sso: exit %d\n%s\n%s", code, o, e)
		}
		if _, e := cmd.outputs(); !strings.Contains(e, "logged in to "+l.base+" as bob@example.com") {
			t.Fatalf("login said:\n%s", e)
		}
	}
	ssoLogin()
	me := runCLI(t, env, "", "me", "-o", "json").want(t, 0, "me after the SSO login")
	if !strings.Contains(me.stdout, `"email": "bob@example.com"`) ||
		!strings.Contains(me.stdout, fmt.Sprintf(`"clusterId": %d`, l.lab)) || !strings.Contains(me.stdout, `"operator"`) {
		t.Fatalf("me: %s", me.stdout)
	}
	// A scoped mapped grant: --grant CLUSTER=ROLE:pool=P:tag=T, shown back the same way.
	id := table(list.stdout)[1][0]
	runCLI(t, adminEnv, "", "group-mapping", "set", id, "ops", "--grant", "lab=viewer:pool=team-a:tag=web").
		want(t, 0, "group-mapping set with a scope")
	if rows := table(runCLI(t, adminEnv, "", "group-mapping", "list", "-o", "table").want(t, 0, "list").stdout); len(rows) != 2 ||
		rows[1][3] != fmt.Sprintf("%d=viewer:pool=team-a:tag=web", l.lab) {
		t.Fatalf("group-mapping list after the scoped set: %v", rows)
	}
	// At the next sign-on the grant is the mapping's, scope and all: a guest of
	// pool staging is listed, one outside it is not.
	runCLI(t, adminEnv, "", "group-mapping", "set", id, "ops", "--grant", "lab=viewer:pool=staging").
		want(t, 0, "group-mapping set to pool staging")
	ssoLogin()
	vms := runCLI(t, env, "", "vm", "list", "--cluster", "lab", "-o", "table").want(t, 0, "vm list with the scoped grant").stdout
	if !strings.Contains(vms, "db-staging") || strings.Contains(vms, "web1") {
		t.Fatalf("vm list with the grant scoped to pool staging:\n%s", vms)
	}
	runCLI(t, adminEnv, "", "group-mapping", "rm", table(list.stdout)[1][0]).want(t, 0, "group-mapping rm")
	if rows := table(runCLI(t, adminEnv, "", "group-mapping", "list", "-o", "table").want(t, 0, "list").stdout); len(rows) > 1 {
		t.Fatalf("a mapping left after rm: %v", rows)
	}
}
