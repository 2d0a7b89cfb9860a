package accounts

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/time/rate"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
)

const password = "violet-Harbor-lantern-drift-42"

// env is the service on a fresh SQLite store with a real auth.Service (cheap
// hashing, no login rate limit) and the audit trail in the same store.
type env struct {
	t    *testing.T
	st   store.Store
	auth *auth.Service
	svc  *Service
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	trail := audit.New(st, audit.Options{})
	sealer, err := seal.New(bytes.Repeat([]byte{1}, seal.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	au, err := auth.New(ctx, st, auth.Config{
		Sealer:         sealer,
		Argon2:         auth.Params{Memory: 8, Time: 1, Threads: 1, KeyLen: 32, SaltLen: 16},
		PerAddressRate: rate.Inf, PerAddressBurst: 1, Audit: trail.Record,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, st: st, auth: au, svc: New(Config{Store: st, Auth: au, Audit: trail})}
}

// user creates a user under the rules of CreateUser, without a caller or an
// audit row, and returns it.
func (e *env) user(name, role string) store.User {
	e.t.Helper()
	u, err := newUser(context.Background(), e.st, e.auth, NewUser{Email: name + "@example.org", Nickname: name,
		Password: password, Role: role})
	if err != nil {
		e.t.Fatal(err)
	}
	return u
}

// login starts a session of u and returns its principal.
func (e *env) login(u store.User) (auth.Principal, string) {
	e.t.Helper()
	tok, _, err := e.auth.Login(context.Background(), u.Email, password, "192.0.2.1")
	if err != nil {
		e.t.Fatal(err)
	}
	p, err := e.auth.Authenticate(context.Background(), tok.Raw)
	if err != nil {
		e.t.Fatal(err)
	}
	return p, tok.Raw
}

// as is a context carrying the request facts of p asking from 198.51.100.7.
func as(p auth.Principal, requestID string) context.Context {
	ctx := audit.WithRequest(context.Background(), "198.51.100.7", requestID, "test-agent/1")
	return audit.WithActor(ctx, p.UserID, p.Email, p.SessionID)
}

// live reports whether a token still authenticates.
func (e *env) live(token string) bool {
	_, err := e.auth.Authenticate(context.Background(), token)
	return err == nil
}

// records returns the audit records of action, oldest first.
func (e *env) records(action string) []store.AuditRecord {
	e.t.Helper()
	all, err := e.st.ListAudit(context.Background(), 500, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []store.AuditRecord
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].Action == action {
			out = append(out, all[i])
		}
	}
	return out
}

// last returns the newest audit record.
func (e *env) last() store.AuditRecord {
	e.t.Helper()
	recs, err := e.st.ListAudit(context.Background(), 1, 0)
	if err != nil || len(recs) == 0 {
		e.t.Fatalf("no audit record (%v)", err)
	}
	return recs[0]
}

func wantReason(t *testing.T, err error, kind errs.Kind, reason string) {
	t.Helper()
	e, ok := errs.As(err)
	if !ok || e.Kind != kind || e.ReasonOrDefault() != reason {
		t.Fatalf("error %v, want %s/%s", err, kind, reason)
	}
}

func ptr[T any](v T) *T { return &v }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestLastAdminGuard: the last enabled admin can be neither disabled, demoted nor
// deleted; a second enabled admin lifts the guard, a disabled one does not.
func TestLastAdminGuard(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	root := e.user("root", RoleAdmin)
	p, _ := e.login(root)
	ctx := as(p, "req-guard")
	before := len(e.records("user.update"))

	for name, ch := range map[string]UserChange{
		"disable": {Disabled: ptr(true)},
		"demote":  {Role: ptr(RoleUser)},
	} {
		_, err := e.svc.UpdateUser(ctx, p, root.ID, ch)
		wantReason(t, err, errs.Conflict, "last_admin")
		if u, _ := e.st.UserByID(context.Background(), root.ID); u.Disabled || u.Role != RoleAdmin {
			t.Errorf("%s: the refused change was written: %+v", name, u)
		}
	}
	wantReason(t, e.svc.DeleteUser(ctx, p, root.ID), errs.Conflict, "last_admin")
	// Harmless changes of the last admin pass.
	if _, err := e.svc.UpdateUser(ctx, p, root.ID, UserChange{Nickname: ptr("Root"), Disabled: ptr(false)}); err != nil {
		t.Errorf("renaming the last admin: %v", err)
	}

	// A disabled admin is no second admin.
	other := e.user("other", RoleAdmin)
	if _, err := e.svc.UpdateUser(ctx, p, other.ID, UserChange{Disabled: ptr(true)}); err != nil {
		t.Fatalf("disabling the other admin: %v", err)
	}
	wantReason(t, e.svc.DeleteUser(ctx, p, root.ID), errs.Conflict, "last_admin")

	// An enabled second admin lets the first go.
	if _, err := e.svc.UpdateUser(ctx, p, other.ID, UserChange{Disabled: ptr(false)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.UpdateUser(ctx, p, root.ID, UserChange{Role: ptr(RoleUser)}); err != nil {
		t.Errorf("demoting one of two admins: %v", err)
	}
	// Refusals are not audited as changes; the four changes that passed are.
	if n := len(e.records("user.update")) - before; n != 4 {
		t.Errorf("%d user.update records, want 4", n)
	}
}

// TestChangesEndSessions: disabling, a role change, a password reset and deletion
// each end every session of the user at once, with the reason recorded.
func TestChangesEndSessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	root := e.user("root", RoleAdmin)
	p, rootTok := e.login(root)
	ctx := as(p, "req-1")
	update := func(ch UserChange) func(int64) error {
		return func(id int64) error {
			_, err := e.svc.UpdateUser(ctx, p, id, ch)
			return err
		}
	}
	for _, c := range []struct {
		name string
		do   func(id int64) error
		why  string
	}{
		{"disable", update(UserChange{Disabled: ptr(true)}), auth.WhyAdmin},
		{"demote", update(UserChange{Role: ptr(RoleUser)}), auth.WhyAdmin},
		{"password reset", update(UserChange{Password: ptr("a brand new long passphrase")}), auth.WhyPassword},
		{"delete", func(id int64) error { return e.svc.DeleteUser(ctx, p, id) }, auth.WhyDeleted},
	} {
		role := RoleUser
		if c.name == "demote" {
			role = RoleAdmin
		}
		u := e.user("u-"+c.name[:3], role)
		_, tok1 := e.login(u)
		_, tok2 := e.login(u)
		if err := c.do(u.ID); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if e.live(tok1) || e.live(tok2) {
			t.Errorf("%s: a session of the user survived", c.name)
		}
		revoked := e.records("auth.sessions_revoked")
		rec := revoked[len(revoked)-1]
		var params struct {
			Why      string `json:"why"`
			Sessions int    `json:"sessions"`
		}
		json.Unmarshal([]byte(rec.Params), &params)
		// The admin who asked is the actor, the user's sessions the target.
		if rec.UserID != root.ID || rec.SessionID != p.SessionID || rec.RequestID != "req-1" || rec.Address != "198.51.100.7" ||
			rec.Target != "user:"+strconv.FormatInt(u.ID, 10) || params.Why != c.why || params.Sessions != 2 {
			t.Errorf("%s: revocation record %+v, want actor %d, target user %d, why %q, 2 sessions", c.name, rec, root.ID, u.ID, c.why)
		}
	}
	// Nobody else lost a session.
	if !e.live(rootTok) {
		t.Error("the admin's own session ended")
	}
	// A nickname alone ends nothing.
	u := e.user("nick", RoleUser)
	_, tok := e.login(u)
	if _, err := e.svc.UpdateUser(ctx, p, u.ID, UserChange{Nickname: ptr("Nick")}); err != nil || !e.live(tok) {
		t.Errorf("renaming ended the session (%v)", err)
	}
}

// TestUserAuditRecords: each change is recorded with the action, target, params and
// result the API has always written, attributed to the caller from the context.
func TestUserAuditRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	root := e.user("root", RoleAdmin)
	p, _ := e.login(root)
	ctx := as(p, "req-audit")
	attributed := func(rec store.AuditRecord) {
		t.Helper()
		if rec.UserID != root.ID || rec.UserEmail != root.Email || rec.SessionID != p.SessionID ||
			rec.Address != "198.51.100.7" || rec.RequestID != "req-audit" || rec.At.IsZero() {
			t.Errorf("%s not attributed to the caller: %+v", rec.Action, rec)
		}
	}

	u, err := e.svc.CreateUser(ctx, p, NewUser{Email: "New@Example.org", Nickname: "N", Password: "a good long passphrase"})
	if err != nil {
		t.Fatal(err)
	}
	rec := e.last()
	if rec.Action != "user.create" || rec.Target != "user:new@example.org" || rec.Params != `{"nickname":"N","role":"user"}` || rec.Result != "ok" {
		t.Errorf("create record %+v", rec)
	}
	attributed(rec)
	if u.Email != "new@example.org" || u.Role != RoleUser {
		t.Errorf("created %+v", u)
	}
	// A refused creation is recorded with its reason; a bad role is refused before.
	if _, err := e.svc.CreateUser(ctx, p, NewUser{Email: "new@example.org", Password: "a good long passphrase"}); errs.KindOf(err) != errs.Conflict {
		t.Errorf("duplicate: %v", err)
	}
	if rec := e.last(); rec.Action != "user.create" || rec.Result != "conflict" {
		t.Errorf("duplicate's record %+v", rec)
	}
	n := len(e.records("user.create"))
	_, err = e.svc.CreateUser(ctx, p, NewUser{Email: "x@example.org", Password: "a good long passphrase", Role: "root"})
	wantReason(t, err, errs.Invalid, "invalid_request")
	if len(e.records("user.create")) != n {
		t.Error("a bad role was audited")
	}

	if _, err := e.svc.UpdateUser(ctx, p, u.ID, UserChange{Nickname: ptr("M"), Disabled: ptr(true), Password: ptr("another long passphrase")}); err != nil {
		t.Fatal(err)
	}
	rec = e.last()
	if rec.Action != "user.update" || rec.Target != "user:"+itoa(u.ID) || rec.Result != "ok" ||
		rec.Params != `{"disabled":true,"nickname":"M","password":"(changed)"}` {
		t.Errorf("update record %+v", rec)
	}
	attributed(rec)

	if err := e.svc.DeleteUser(ctx, p, u.ID); err != nil {
		t.Fatal(err)
	}
	rec = e.last()
	if rec.Action != "user.delete" || rec.Target != "user:"+itoa(u.ID) || rec.Params != `{"email":"new@example.org"}` || rec.Result != "ok" {
		t.Errorf("delete record %+v", rec)
	}
	attributed(rec)
	if _, err := e.svc.User(ctx, u.ID); errs.KindOf(err) != errs.NotFound {
		t.Errorf("deleted user: %v", err)
	}

	// A password change is recorded whatever its outcome.
	wantReason(t, e.svc.ChangePassword(ctx, p, "not the password at all", "yet another long passphrase"), errs.Forbidden, "forbidden")
	if rec := e.last(); rec.Action != "user.password_change" || rec.Result != "forbidden" || rec.Target != "user:"+itoa(root.ID) {
		t.Errorf("failed password change record %+v", rec)
	}
	if err := e.svc.ChangePassword(ctx, p, password, "yet another long passphrase"); err != nil {
		t.Fatal(err)
	}
	rec = e.last()
	if rec.Action != "user.password_change" || rec.Result != "ok" {
		t.Errorf("password change record %+v", rec)
	}
	attributed(rec)
}

// TestRequireAdmin: admins pass; anyone else gets 403 and an access.denied record
// naming the attempt.
func TestRequireAdmin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	root, _ := e.login(e.user("root", RoleAdmin))
	if err := e.svc.RequireAdmin(as(root, "r1"), root, "GET /api/v1/users"); err != nil {
		t.Fatalf("admin refused: %v", err)
	}
	bob, _ := e.login(e.user("bob", RoleUser))
	wantReason(t, e.svc.RequireAdmin(as(bob, "r2"), bob, "GET /api/v1/users"), errs.Forbidden, "forbidden")
	rec := e.last()
	if rec.Action != "access.denied" || rec.Target != "GET /api/v1/users" || rec.Result != "denied" ||
		rec.UserID != bob.UserID || rec.RequestID != "r2" || rec.Address != "198.51.100.7" {
		t.Errorf("denial record %+v", rec)
	}
}

// TestMe: the caller's account with their grants, never nil.
func TestMe(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ann := e.user("ann", RoleUser)
	p, _ := e.login(ann)
	me, err := e.svc.Me(context.Background(), p)
	if err != nil || me.ID != ann.ID || me.Email != ann.Email || me.Grants == nil || len(me.Grants) != 0 {
		t.Fatalf("me %+v (%v)", me, err)
	}
	ctx := context.Background()
	c, err := e.st.CreateCluster(ctx, store.Cluster{Name: "c1", TokenID: "vmgate@pve!gw", TokenSecretSealed: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.PutGrant(ctx, store.Grant{UserID: ann.ID, ClusterID: c.ID, Role: store.GrantViewer}); err != nil {
		t.Fatal(err)
	}
	me, _ = e.svc.Me(ctx, p)
	if len(me.Grants) != 1 || me.Grants[0] != (Grant{ClusterID: c.ID, Role: store.GrantViewer}) {
		t.Errorf("grants %+v", me.Grants)
	}
}
