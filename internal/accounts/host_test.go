package accounts

import (
	"context"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/errs"
)

// The rules of a new user hold whoever creates it — an admin through the API or
// the web UI, or the host's administrator (`vmgate admin user create`): the e-mail
// is a plain address stored trimmed and lower-cased, the nickname printable, the
// role one of two, the password the policy's (docs/security.md item 13), and a
// taken e-mail is Conflict (issue 18, docs/history.md: CreateUser and the e-mail
// rules live in accounts).
func TestCreateUserValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	root := e.user("root", RoleAdmin)
	p, _ := e.login(root)
	host := NewHost(HostConfig{Store: e.st, Auth: e.auth, Via: "cli"})
	cases := []struct {
		name                    string
		email, nick, pass, role string
		kind                    errs.Kind
	}{
		{"duplicate", " ROOT@example.org", "a", "purple elephant umbrella", RoleUser, errs.Conflict},
		{"bad e-mail", "bob", "a", "purple elephant umbrella", RoleUser, errs.Invalid},
		{"display name", "Bob <bob@example.org>", "a", "purple elephant umbrella", RoleUser, errs.Invalid},
		{"too long", strings.Repeat("b", 250) + "@example.org", "a", "purple elephant umbrella", RoleUser, errs.Invalid},
		{"bad role", "bob@example.org", "a", "purple elephant umbrella", "root", errs.Invalid},
		{"weak password", "bob@example.org", "a", "bob123456789", RoleUser, errs.Invalid},
		{"the e-mail as password", "bob.smith@example.org", "a", "Bob.Smith!!!", RoleUser, errs.Invalid},
		{"control in nickname", "bob@example.org", "a\x00b", "purple elephant umbrella", RoleUser, errs.Invalid},
		{"long nickname", "bob@example.org", strings.Repeat("n", 101), "purple elephant umbrella", RoleUser, errs.Invalid},
	}
	for _, c := range cases {
		in := NewUser{Email: c.email, Nickname: c.nick, Password: c.pass, Role: c.role}
		if _, err := e.svc.CreateUser(as(p, "req-"+c.name), p, in); errs.KindOf(err) != c.kind {
			t.Errorf("%s through the API: got %v, want kind %v", c.name, err, c.kind)
		}
		if _, err := host.CreateUser(context.Background(), in); errs.KindOf(err) != c.kind {
			t.Errorf("%s on the host: got %v, want kind %v", c.name, err, c.kind)
		}
	}
	u, err := host.CreateUser(context.Background(), NewUser{Email: "  Bob@Example.ORG ", Nickname: " Bob ",
		Password: "purple elephant umbrella"})
	if err != nil {
		t.Fatal(err)
	}
	if u.Email != "bob@example.org" || u.Nickname != "Bob" || u.Role != RoleUser {
		t.Fatalf("created %+v", u)
	}
	tok, _, err := e.auth.Login(context.Background(), "BOB@example.org", "purple elephant umbrella", "192.0.2.1")
	if err != nil || tok.Raw == "" {
		t.Fatalf("login as the user the host created: %v", err)
	}
}

// `vmgate admin user create` and `disable` go through the rules the API goes
// through (issue 18, docs/history.md): the host's administrator needs no login,
// but disabling the last enabled admin is 409 last_admin as through the API, a
// disable ends the user's sessions at once (docs/security.md item 11), and both
// are audited with the way in and no actor. auth.Offline, which the command uses
// where no server runs, ends the sessions; a running auth.Service refuses their
// tokens from the change feed.
func TestHostCreatesAndDisables(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	trail := audit.New(e.st, audit.Options{})
	off, err := auth.NewOffline(e.st, auth.OfflineConfig{Argon2: auth.Params{Memory: 8, Time: 1, Threads: 1, KeyLen: 32,
		SaltLen: 16}, Audit: trail.Record})
	if err != nil {
		t.Fatal(err)
	}
	host := NewHost(HostConfig{Store: e.st, Auth: off, Audit: trail, Via: "cli"})
	ctx := context.Background()

	root, err := host.CreateUser(ctx, NewUser{Email: "root@example.org", Password: password, Role: RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	if root.Role != RoleAdmin || root.Disabled {
		t.Fatalf("created %+v", root)
	}
	rec := e.last()
	if rec.Action != "user.create" || rec.Target != "user:root@example.org" || rec.UserID != 0 || rec.Result != "ok" ||
		rec.Params != `{"nickname":"","role":"admin","via":"cli"}` {
		t.Errorf("create record %+v", rec)
	}
	_, _, err = host.DisableUser(ctx, "root@example.org")
	wantReason(t, err, errs.Conflict, errs.ReasonLastAdmin)
	if rec := e.last(); rec.Action != "user.create" {
		t.Errorf("a refused disable was audited: %+v", rec)
	}

	carol := e.user("carol", RoleUser)
	_, t1 := e.login(carol)
	_, t2 := e.login(carol)
	if !e.live(t1) || !e.live(t2) {
		t.Fatal("carol's sessions do not authenticate")
	}
	u, ended, err := host.DisableUser(ctx, " Carol@example.org")
	if err != nil || ended != 2 || !u.Disabled || u.ID != carol.ID {
		t.Fatalf("disable carol: %+v, %d sessions ended, %v; want disabled, 2", u, ended, err)
	}
	if e.live(t1) || e.live(t2) {
		t.Error("a session of the disabled user still authenticates")
	}
	if rec := e.last(); rec.Action != "user.disable" || rec.Target != "user:"+itoa(carol.ID) || rec.UserID != 0 ||
		rec.Params != `{"via":"cli"}` || rec.Result != "ok" {
		t.Errorf("disable record %+v", rec)
	}
	if got := e.records("auth.sessions_revoked"); len(got) != 1 || got[0].Reason != auth.WhyDisabled {
		t.Errorf("sessions_revoked records %+v", got)
	}
	if _, _, err := host.DisableUser(ctx, "nobody@example.org"); errs.KindOf(err) != errs.NotFound {
		t.Errorf("an unknown e-mail: %v, want not found", err)
	}

	// With a second enabled admin the first may go; the second is then the last.
	if _, err := host.CreateUser(ctx, NewUser{Email: "second@example.org", Password: password, Role: RoleAdmin}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := host.DisableUser(ctx, "root@example.org"); err != nil {
		t.Fatalf("disable one of two admins: %v", err)
	}
	_, _, err = host.DisableUser(ctx, "second@example.org")
	wantReason(t, err, errs.Conflict, errs.ReasonLastAdmin)
}
