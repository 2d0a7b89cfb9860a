package fleet

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// rootActor is user 1, an admin from a login session: who changes grants in these
// tests.
var rootActor = Actor{UserID: 1, Email: "root@example.org", Role: store.RoleAdmin}

// adminCtx is a request of user 1 (an admin) from 198.51.100.7, for the audit trail.
func adminCtx(requestID string) context.Context {
	ctx := audit.WithRequest(context.Background(), "198.51.100.7", requestID, "test-agent/1")
	return audit.WithActor(ctx, 1, "root@example.org", "sess-root")
}

// auditRecords returns the store's audit records, oldest first.
func auditRecords(t *testing.T, st store.Store) []store.AuditRecord {
	t.Helper()
	recs, err := st.ListAudit(context.Background(), 500, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, j := 0, len(recs)-1; i < j; i, j = i+1, j-1 {
		recs[i], recs[j] = recs[j], recs[i]
	}
	return recs
}

// lastRecord returns the newest audit record, failing when there is none.
func lastRecord(t *testing.T, st store.Store) store.AuditRecord {
	t.Helper()
	recs := auditRecords(t, st)
	if len(recs) == 0 {
		t.Fatal("no audit record")
	}
	return recs[len(recs)-1]
}

func attributedTo(t *testing.T, rec store.AuditRecord, requestID string) {
	t.Helper()
	if rec.UserID != 1 || rec.UserEmail != "root@example.org" || rec.SessionID != "sess-root" ||
		rec.Address != "198.51.100.7" || rec.RequestID != requestID || rec.At.IsZero() {
		t.Errorf("%s is not attributed to the request: %+v", rec.Action, rec)
	}
}

// TestClusterAuditRecords: registration, updates and deletion are audited by the
// fleet with the action, target, params and result the API has always recorded,
// never a secret, attributed to the request in the context.
func TestClusterAuditRecords(t *testing.T) {
	t.Parallel()
	s := newSim(t, 0)
	svc, st := newTestService(t)

	// A failed registration names the cluster by name and its reason.
	bad := s.spec("bad")
	bad.TLSFingerprint = s.eps[1].Fingerprint
	if _, err := svc.Register(adminCtx("r1"), bad); errs.KindOf(err) != errs.Invalid {
		t.Fatalf("wrong fingerprint: %v", err)
	}
	rec := lastRecord(t, st)
	if rec.Action != "cluster.create" || rec.Result != ReasonTLSMismatch || rec.Target != "cluster:bad" || rec.ClusterID != 0 {
		t.Errorf("failed create record %+v", rec)
	}
	attributedTo(t, rec, "r1")

	c, err := svc.Register(adminCtx("r2"), s.spec("prod"))
	if err != nil {
		t.Fatal(err)
	}
	id := strconv.FormatInt(c.ID, 10)
	rec = lastRecord(t, st)
	want := `{"caCert":false,"endpoints":["` + s.eps[0].URL + `"],"insecureSkipVerify":false,"name":"prod","tlsFingerprint":"` +
		s.eps[0].Fingerprint + `","tokenId":"` + s.tokenID + `"}`
	if rec.Action != "cluster.create" || rec.Result != "ok" || rec.Target != "cluster:"+id || rec.ClusterID != c.ID || rec.Params != want {
		t.Errorf("create record %+v\nwant params %s", rec, want)
	}
	attributedTo(t, rec, "r2")

	name := "renamed"
	if _, err := svc.Update(adminCtx("r3"), c.ID, ClusterPatch{Name: &name}); err != nil {
		t.Fatal(err)
	}
	if rec := lastRecord(t, st); rec.Action != "cluster.update" || rec.Params != `{"name":"renamed"}` || rec.Result != "ok" ||
		rec.Target != "cluster:"+id || rec.ClusterID != c.ID {
		t.Errorf("update record %+v", rec)
	}
	secret := s.secret
	if _, err := svc.Update(adminCtx("r4"), c.ID, ClusterPatch{TokenSecret: &secret}); err != nil {
		t.Fatal(err)
	}
	if rec := lastRecord(t, st); rec.Params != `{"tokenSecret":"(changed)"}` {
		t.Errorf("secret update record %+v", rec)
	}
	// A patch that changes nothing is refused and not audited.
	n := len(auditRecords(t, st))
	if _, err := svc.Update(adminCtx("r5"), c.ID, ClusterPatch{}); errs.KindOf(err) != errs.Invalid {
		t.Errorf("empty patch: %v", err)
	}
	if len(auditRecords(t, st)) != n {
		t.Error("an empty patch was audited")
	}

	if err := svc.Delete(adminCtx("r6"), c.ID); err != nil {
		t.Fatal(err)
	}
	rec = lastRecord(t, st)
	if rec.Action != "cluster.delete" || rec.Result != "ok" || rec.Target != "cluster:"+id || rec.ClusterID != c.ID {
		t.Errorf("delete record %+v", rec)
	}
	attributedTo(t, rec, "r6")
	if err := svc.Delete(adminCtx("r7"), c.ID); errs.KindOf(err) != errs.NotFound {
		t.Errorf("second delete: %v", err)
	}
	if rec := lastRecord(t, st); rec.Action != "cluster.delete" || rec.Result != "not_found" {
		t.Errorf("failed delete record %+v", rec)
	}
	for _, r := range auditRecords(t, st) {
		if strings.Contains(r.Params, s.secret) {
			t.Errorf("%s holds the token secret: %s", r.Action, r.Params)
		}
	}
}

// TestGrantAuditRecords: putting and removing grants is audited, failures with their
// reason; a role that is no grant role is refused before and not audited.
func TestGrantAuditRecords(t *testing.T) {
	t.Parallel()
	svc, st := newTestService(t)
	c := storeCluster(t, svc, "c1")
	u := storeUser(t, st, "bob@x", store.RoleUser)
	uid := "user:" + strconv.FormatInt(u.ID, 10)

	g, err := svc.PutGrant(adminCtx("g1"), rootActor, u.ID, c.ID, GrantViewer)
	if err != nil || g.Role != GrantViewer || g.UserID != u.ID || g.ClusterID != c.ID || g.CreatedAt.IsZero() {
		t.Fatalf("put: %+v (%v)", g, err)
	}
	rec := lastRecord(t, st)
	if rec.Action != "grant.put" || rec.ClusterID != c.ID || rec.Target != uid || rec.Params != `{"role":"viewer"}` || rec.Result != "ok" {
		t.Errorf("put record %+v", rec)
	}
	attributedTo(t, rec, "g1")

	n := len(auditRecords(t, st))
	if _, err := svc.PutGrant(adminCtx("g2"), rootActor, u.ID, c.ID, "owner"); errs.KindOf(err) != errs.Invalid {
		t.Errorf("bad role: %v", err)
	}
	if len(auditRecords(t, st)) != n {
		t.Error("a bad role was audited")
	}
	if _, err := svc.PutGrant(adminCtx("g3"), rootActor, 999, c.ID, GrantOperator); errs.KindOf(err) != errs.NotFound {
		t.Errorf("missing user: %v", err)
	}
	if rec := lastRecord(t, st); rec.Action != "grant.put" || rec.Target != "user:999" || rec.Result != "not_found" {
		t.Errorf("failed put record %+v", rec)
	}

	if err := svc.DeleteGrant(adminCtx("g4"), rootActor, u.ID, c.ID); err != nil {
		t.Fatal(err)
	}
	rec = lastRecord(t, st)
	if rec.Action != "grant.delete" || rec.ClusterID != c.ID || rec.Target != uid || rec.Result != "ok" || rec.Params != "" {
		t.Errorf("delete record %+v", rec)
	}
	attributedTo(t, rec, "g4")
	if err := svc.DeleteGrant(adminCtx("g5"), rootActor, u.ID, c.ID); errs.KindOf(err) != errs.NotFound {
		t.Errorf("second delete: %v", err)
	}
	if rec := lastRecord(t, st); rec.Action != "grant.delete" || rec.Result != "not_found" {
		t.Errorf("failed delete record %+v", rec)
	}
}

// TestRequireAuditsRefusals: Require answers like Authorize and records each refusal
// (no grant, no such cluster, a viewer's write) as access.denied with the attempt
// and the need; an allowed action leaves no record.
func TestRequireAuditsRefusals(t *testing.T) {
	t.Parallel()
	svc, st := newTestService(t)
	c := storeCluster(t, svc, "c1")
	viewer := storeUser(t, st, "viewer@x", store.RoleUser)
	if _, err := svc.PutGrant(context.Background(), rootActor, viewer.ID, c.ID, GrantViewer); err != nil {
		t.Fatal(err)
	}
	a := Actor{UserID: viewer.ID, Email: viewer.Email, Role: store.RoleUser}
	ctx := audit.WithActor(audit.WithRequest(context.Background(), "192.0.2.4", "q1", ""), viewer.ID, viewer.Email, "s1")

	n := len(auditRecords(t, st))
	if err := svc.Require(ctx, a, c.ID, GrantViewer, "GET /x"); err != nil {
		t.Fatalf("viewer read: %v", err)
	}
	if len(auditRecords(t, st)) != n {
		t.Error("an allowed action was audited")
	}
	for i, tc := range []struct {
		cluster int64
		need    string
		kind    errs.Kind
	}{
		{c.ID, GrantOperator, errs.Forbidden},
		{c.ID + 100, GrantViewer, errs.NotFound},
	} {
		// A session's second denial within a minute would be folded into a
		// counted row (internal/audit): each case asks from a session of its own.
		sid := "s" + strconv.Itoa(i+1)
		ctx := audit.WithActor(ctx, viewer.ID, viewer.Email, sid)
		err := svc.Require(ctx, a, tc.cluster, tc.need, "POST /y")
		if errs.KindOf(err) != tc.kind {
			t.Fatalf("cluster %d need %s: %v, want %s", tc.cluster, tc.need, err, tc.kind)
		}
		rec := lastRecord(t, st)
		if rec.Action != "access.denied" || rec.Result != "denied" || rec.ClusterID != tc.cluster || rec.Target != "POST /y" ||
			rec.Params != `{"need":"`+tc.need+`"}` || rec.UserID != viewer.ID || rec.SessionID != sid ||
			rec.Address != "192.0.2.4" || rec.RequestID != "q1" || rec.Reason != audit.Reason(err) || rec.Reason == "" {
			t.Errorf("denial record %+v", rec)
		}
	}
}

// TestReadable: an admin reads every cluster's tasks; anyone else those of the
// clusters they hold a grant on, whatever its role, and none without a grant.
func TestReadable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc, st := newTestService(t)
	c1, c2 := storeCluster(t, svc, "c1"), storeCluster(t, svc, "c2")
	storeCluster(t, svc, "c3")
	admin := storeUser(t, st, "admin@x", store.RoleAdmin)
	bob := storeUser(t, st, "bob@x", store.RoleUser)
	none := storeUser(t, st, "none@x", store.RoleUser)
	for c, role := range map[int64]string{c1.ID: GrantViewer, c2.ID: GrantOperator} {
		if _, err := svc.PutGrant(ctx, rootActor, bob.ID, c, role); err != nil {
			t.Fatal(err)
		}
	}
	if ids, all, err := svc.Readable(ctx, Actor{UserID: admin.ID, Role: store.RoleAdmin}); err != nil || !all || ids != nil {
		t.Errorf("admin: %v %v %v", ids, all, err)
	}
	if ids, all, err := svc.Readable(ctx, Actor{UserID: bob.ID, Role: store.RoleUser}); err != nil || all ||
		len(ids) != 2 || ids[0] != c1.ID || ids[1] != c2.ID {
		t.Errorf("bob: %v %v %v", ids, all, err)
	}
	if ids, all, err := svc.Readable(ctx, Actor{UserID: none.ID, Role: store.RoleUser}); err != nil || all || ids == nil || len(ids) != 0 {
		t.Errorf("no grant: %v %v %v", ids, all, err)
	}
}

// TestGrantsNeedAnAdminsLoginSession (docs/security.md item 32, docs/decisions/0038): the
// fleet itself refuses a grant change to an API token, an admin's too (403
// session_required), and to a user or an admin's token narrowed by grants (403
// forbidden); each refusal is audited as access.denied and changes nothing.
func TestGrantsNeedAnAdminsLoginSession(t *testing.T) {
	t.Parallel()
	svc, st := newTestService(t)
	c := storeCluster(t, svc, "c1")
	u := storeUser(t, st, "bob@x", store.RoleUser)
	if _, err := svc.PutGrant(adminCtx("setup"), rootActor, u.ID, c.ID, GrantViewer); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		actor  Actor
		reason string
	}{
		{"an admin's token", Actor{UserID: 1, Role: store.RoleAdmin, APITokenID: "tok123456789"}, errs.ReasonSessionRequired},
		{"an admin's narrowed token", Actor{UserID: 1, Role: store.RoleAdmin, APITokenID: "tok123456789",
			Limit: map[int64]string{c.ID: GrantOperator}}, "forbidden"},
		{"a user's session", Actor{UserID: u.ID, Role: store.RoleUser}, "forbidden"},
	}
	// A request with no session in its facts: each refusal is a record of its
	// own, not folded into its session's (internal/audit).
	ctx := audit.WithRequest(context.Background(), "198.51.100.7", "r1", "test-agent/1")
	for _, tc := range cases {
		for name, call := range map[string]func() error{
			"put":    func() error { _, err := svc.PutGrant(ctx, tc.actor, u.ID, c.ID, GrantOperator); return err },
			"delete": func() error { return svc.DeleteGrant(ctx, tc.actor, u.ID, c.ID) },
		} {
			err := call()
			if e, ok := errs.As(err); !ok || e.Kind != errs.Forbidden || e.ReasonOrDefault() != tc.reason {
				t.Errorf("%s, %s: %v, want 403 %s", tc.name, name, err, tc.reason)
			}
			if rec := lastRecord(t, st); rec.Action != "access.denied" || rec.Target != "grant."+name || rec.ClusterID != c.ID {
				t.Errorf("%s, %s: refusal record %+v", tc.name, name, rec)
			}
		}
	}
	gs, err := svc.UserGrants(context.Background(), u.ID)
	if err != nil || len(gs) != 1 || gs[0].Role != GrantViewer {
		t.Fatalf("the grant changed: %+v %v", gs, err)
	}
}
