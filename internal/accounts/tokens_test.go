package accounts

import (
	"context"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// TestTokensOfAUser (docs/security.md item 32): a user makes, lists and deletes API tokens
// from a login session only; grants may not exceed the user's own; an admin lists
// and deletes anyone's; a token sees itself as no more than its grants.
func TestTokensOfAUser(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	op := e.user("op", RoleUser)
	admin := e.user("admin", RoleAdmin)
	c1, err := e.st.CreateCluster(ctx, store.Cluster{Name: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := e.st.CreateCluster(ctx, store.Cluster{Name: "c2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.PutGrant(ctx, store.Grant{UserID: op.ID, ClusterID: c1.ID, Role: store.GrantViewer}); err != nil {
		t.Fatal(err)
	}
	p, _ := e.login(op)

	for _, bad := range [][]Grant{
		{{ClusterID: c2.ID, Role: "viewer"}},   // no grant there
		{{ClusterID: c1.ID, Role: "operator"}}, // more than the own viewer
	} {
		_, err := e.svc.CreateMyToken(as(p, "r1"), p, NewToken{Name: "x", Grants: bad})
		if !errs.Is(err, errs.Forbidden) {
			t.Fatalf("grants %+v beyond the user's: %v", bad, err)
		}
	}
	tok, err := e.svc.CreateMyToken(as(p, "r2"), p, NewToken{Name: "ci", ExpiresInDays: 7,
		Grants: []Grant{{ClusterID: c1.ID, Role: "viewer"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok.Secret, "vmg_") || tok.Expired || len(tok.Grants) != 1 {
		t.Fatalf("created: %+v", tok.Token)
	}
	tp, err := e.auth.Authenticate(ctx, tok.Secret)
	if err != nil {
		t.Fatal(err)
	}
	me, err := e.svc.Me(ctx, tp)
	if err != nil || me.Role != RoleUser || len(me.Grants) != 1 || me.Grants[0] != (Grant{ClusterID: c1.ID, Role: "viewer"}) {
		t.Fatalf("me through the token: %+v %v", me, err)
	}

	// Through the token itself: nothing about tokens, passwords or sessions.
	for what, err := range map[string]error{
		"create": func() error { _, err := e.svc.CreateMyToken(ctx, tp, NewToken{Name: "y"}); return err }(),
		"list":   func() error { _, err := e.svc.MyTokens(ctx, tp); return err }(),
		"delete": e.svc.DeleteMyToken(ctx, tp, tok.ID),
		"passwd": e.svc.ChangePassword(ctx, tp, password, password+"x"),
		"sess":   func() error { _, err := e.svc.MySessions(ctx, tp); return err }(),
	} {
		if !errs.Is(err, errs.Forbidden) {
			t.Fatalf("%s through a token: %v", what, err)
		}
	}

	list, err := e.svc.MyTokens(ctx, p)
	if err != nil || len(list) != 1 || list[0].ID != tok.ID || list[0].Name != "ci" {
		t.Fatalf("my tokens: %+v %v", list, err)
	}
	ap, _ := e.login(admin)
	list, err = e.svc.UserTokens(as(ap, "r3"), ap, op.ID)
	if err != nil || len(list) != 1 {
		t.Fatalf("an admin's view: %+v %v", list, err)
	}
	if _, err := e.svc.UserTokens(ctx, ap, op.ID+100); !errs.Is(err, errs.NotFound) {
		t.Fatalf("tokens of nobody: %v", err)
	}
	if err := e.svc.DeleteUserToken(as(ap, "r4"), ap, admin.ID, tok.ID); !errs.Is(err, errs.NotFound) {
		t.Fatalf("deleting op's token as the admin's own: %v", err)
	}
	if err := e.svc.DeleteUserToken(as(ap, "r5"), ap, op.ID, tok.ID); err != nil {
		t.Fatal(err)
	}
	if e.live(tok.Secret) {
		t.Fatal("a deleted token still authenticates")
	}

	// An admin's token without grants is an admin; with grants it is not.
	full, err := e.svc.CreateMyToken(as(ap, "r6"), ap, NewToken{Name: "full"})
	if err != nil {
		t.Fatal(err)
	}
	fp, err := e.auth.Authenticate(ctx, full.Secret)
	if err != nil || e.svc.RequireAdmin(ctx, fp, "GET /api/v1/users") != nil {
		t.Fatalf("an admin's full token: %v", err)
	}
	lim, err := e.svc.CreateMyToken(as(ap, "r7"), ap, NewToken{Name: "lim", Grants: []Grant{{ClusterID: c2.ID, Role: "operator"}}})
	if err != nil {
		t.Fatal(err)
	}
	lp, err := e.auth.Authenticate(ctx, lim.Secret)
	if err != nil || !errs.Is(e.svc.RequireAdmin(ctx, lp, "GET /api/v1/users"), errs.Forbidden) {
		t.Fatalf("an admin's limited token passed as admin: %v", err)
	}
}
