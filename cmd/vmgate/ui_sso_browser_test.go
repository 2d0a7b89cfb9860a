package main

import (
	"context"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/oidctest"
)

// TestUIBrowserSingleSignOn (issue 23) in Chromium against a real Dex: an admin
// maps Dex's group ops to an operator grant on the Group mappings page and logs
// out; the log-in page's "Log in with Dex" leads to Dex's form; after it, the browser comes back
// through vmgate's callback and the bounce page (so that it sends the
// SameSite=Strict session cookie) to the page first asked for, logged in as the
// SSO user with the grant their group maps to; logging out ends the session. No
// console error, no CSP violation on vmgate's pages or Dex's.
func TestUIBrowserSingleSignOn(t *testing.T) {
	t.Parallel()
	chromiumPath(t)
	carol := oidctest.User{Email: "carol@example.com", Password: "carol's dex password", Name: "Carol", ID: "carol-1",
		Groups: []string{"ops"}}
	l := startSSOLab(t, carol)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	b := newBrowser(t, l.base, 1200, 900)
	b.open("/admin/group-mappings")
	b.waitPath("/login")
	b.login("root@example.com", ssoAdminPW)
	b.waitPath("/admin/group-mappings")
	b.typeInto("textbox", "Group", "ops")
	b.choose("Grant on lab", "operator")
	b.click("button", "Save mapping")
	b.waitText("Group mapping saved")
	b.shot("sso-group-mappings")
	ms, err := l.admin.GroupMappings(ctx)
	if err != nil || len(ms) != 1 || ms[0].Group != "ops" || len(ms[0].Grants) != 1 || ms[0].Grants[0].ClusterID != l.lab ||
		ms[0].Grants[0].Role != "operator" {
		t.Fatalf("the mapping saved from the page: %+v %v", ms, err)
	}
	b.click("button", "Log out")
	b.waitPath("/login")

	b.open("/vms")
	b.waitPath("/login")
	b.shot("sso-login")
	b.click("link", "Log in with Dex")
	b.waitPath("/dex/auth/local")
	b.shot("sso-dex-form")
	b.typeInto("textbox", "Email Address", carol.Email)
	b.typeInto("textbox", "Password", carol.Password)
	b.click("button", "Login")
	b.waitPath("/vms")
	b.waitText("carol@example.com")
	// The group's grant: the lab's VMs are listed, with their actions.
	b.waitText("lab")
	b.shot("sso-vms")
	b.open("/account")
	b.waitText("carol@example.com")
	b.click("button", "Log out")
	b.waitPath("/login")
	b.open("/vms")
	b.waitPath("/login")
}
