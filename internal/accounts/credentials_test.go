package accounts

import (
	"context"
	"slices"
	"testing"

	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/errs"
)

// TestNoTokenManagesCredentials (docs/security.md item 32, docs/decisions/0038): every use
// case that creates, changes or deletes a user, or lists, makes or ends API
// tokens and sessions, refuses an admin's API token itself (403
// session_required), whatever a front end checked before, audits the refusal as
// access.denied, and changes nothing: the admin's password, sessions and tokens,
// the users and their roles are as they were. The same calls from the admin's
// login session pass (the last row of each case), so the refusal is the token's.
func TestNoTokenManagesCredentials(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	root := e.user("root", RoleAdmin)
	ann := e.user("ann", RoleUser)
	rootP, rootTok := e.login(root)
	annP, annTok := e.login(ann)
	made, err := e.svc.CreateMyToken(as(rootP, "setup"), rootP, NewToken{Name: "script"})
	if err != nil {
		t.Fatal(err)
	}
	tokP, err := e.auth.Authenticate(ctx, made.Secret)
	if err != nil || !tokP.IsAdmin() || tokP.APITokenID == "" {
		t.Fatalf("an admin's token without grants: %+v %v", tokP, err)
	}
	annMade, err := e.svc.CreateMyToken(as(annP, "setup"), annP, NewToken{Name: "ann's"})
	if err != nil {
		t.Fatal(err)
	}

	type useCase struct {
		name string
		call func(p auth.Principal) error
	}
	calls := []useCase{
		{"create an admin", func(p auth.Principal) error {
			_, err := e.svc.CreateUser(ctx, p, NewUser{Email: "mallory@example.org", Password: "a good long passphrase", Role: RoleAdmin})
			return err
		}},
		{"reset the owner's password", func(p auth.Principal) error {
			_, err := e.svc.UpdateUser(ctx, p, root.ID, UserChange{Password: ptr("mallory's long passphrase")})
			return err
		}},
		{"promote a user", func(p auth.Principal) error {
			_, err := e.svc.UpdateUser(ctx, p, ann.ID, UserChange{Role: ptr(RoleAdmin)})
			return err
		}},
		{"disable a user", func(p auth.Principal) error {
			_, err := e.svc.UpdateUser(ctx, p, ann.ID, UserChange{Disabled: ptr(true)})
			return err
		}},
		{"rename a user", func(p auth.Principal) error {
			_, err := e.svc.UpdateUser(ctx, p, ann.ID, UserChange{Nickname: ptr("Mallory")})
			return err
		}},
		{"delete a user", func(p auth.Principal) error { return e.svc.DeleteUser(ctx, p, ann.ID) }},
		{"change the own password", func(p auth.Principal) error {
			return e.svc.ChangePassword(ctx, p, password, "mallory's long passphrase")
		}},
		{"make a token", func(p auth.Principal) error {
			_, err := e.svc.CreateMyToken(ctx, p, NewToken{Name: "more"})
			return err
		}},
		{"list the own tokens", func(p auth.Principal) error { _, err := e.svc.MyTokens(ctx, p); return err }},
		{"delete the own token", func(p auth.Principal) error { return e.svc.DeleteMyToken(ctx, p, "nosuchtoken0") }},
		{"list a user's tokens", func(p auth.Principal) error { _, err := e.svc.UserTokens(ctx, p, ann.ID); return err }},
		{"delete a user's token", func(p auth.Principal) error { return e.svc.DeleteUserToken(ctx, p, ann.ID, annMade.ID) }},
		{"list the own sessions", func(p auth.Principal) error { _, err := e.svc.MySessions(ctx, p); return err }},
		{"end the own session", func(p auth.Principal) error { return e.svc.EndMySession(ctx, p, rootP.SessionID) }},
		{"list a user's sessions", func(p auth.Principal) error { _, err := e.svc.UserSessions(ctx, p, ann.ID); return err }},
		{"end a user's session", func(p auth.Principal) error { return e.svc.EndUserSession(ctx, p, ann.ID, annP.SessionID) }},
	}
	for _, c := range calls {
		denied := len(e.records("access.denied"))
		err := c.call(tokP)
		if got, ok := errs.As(err); !ok || got.Kind != errs.Forbidden || got.Reason != errs.ReasonSessionRequired {
			t.Errorf("%s through the admin's token: %v, want 403 %s", c.name, err, errs.ReasonSessionRequired)
			continue
		}
		recs := e.records("access.denied")
		if len(recs) != denied+1 || recs[len(recs)-1].Result != "denied" {
			t.Errorf("%s through the admin's token: the refusal is not audited (%d records before, %d after)", c.name, denied, len(recs))
		}
	}

	// Nothing changed: the same principal, passwords, sessions, tokens and users.
	if !e.live(rootTok) || !e.live(annTok) {
		t.Fatal("a session ended")
	}
	if _, _, err := e.auth.Login(ctx, root.Email, password, "192.0.2.1"); err != nil {
		t.Fatalf("the owner's password changed: %v", err)
	}
	users, err := e.svc.Users(ctx)
	if err != nil || len(users) != 2 || users[1].Role != RoleUser || users[1].Disabled || users[1].Nickname != "ann" {
		t.Fatalf("users changed: %+v %v", users, err)
	}
	for _, id := range []int64{root.ID, ann.ID} {
		toks, err := e.svc.UserTokens(ctx, rootP, id)
		if err != nil || len(toks) != 1 {
			t.Fatalf("tokens of user %d changed: %+v %v", id, toks, err)
		}
	}

	// The admin's login session may do each of the admin's ones; a user's login
	// session is refused them as no admin (403 forbidden), not as a token. In
	// this order, so that none ends what a later one needs.
	adminOnly := []string{"list a user's tokens", "delete a user's token", "list a user's sessions",
		"end a user's session", "create an admin", "rename a user", "promote a user", "delete a user"}
	for _, c := range calls {
		if !slices.Contains(adminOnly, c.name) {
			continue
		}
		if err := c.call(annP); errs.KindOf(err) != errs.Forbidden || reasonOf(err) != "forbidden" {
			t.Errorf("%s from a user's session: %v, want 403 forbidden", c.name, err)
		}
	}
	for _, name := range adminOnly {
		i := slices.IndexFunc(calls, func(c useCase) bool { return c.name == name })
		if err := calls[i].call(rootP); err != nil {
			t.Errorf("%s from the admin's session: %v", name, err)
		}
	}
}

func reasonOf(err error) string {
	if e, ok := errs.As(err); ok {
		return e.ReasonOrDefault()
	}
	return ""
}
