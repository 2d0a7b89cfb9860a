package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/store"
)

// withRequestID sets the request id a test then finds in the audit record.
func withRequestID(r *http.Request, id string) *http.Request {
	r.Header.Set("X-Request-Id", id)
	return r
}

// recordOf returns the one record the request id req carries, failing otherwise.
func (e *testEnv) recordOf(req, action string) store.AuditRecord {
	e.t.Helper()
	e.trail.Flush(e.t.Context())
	recs, err := e.store.QueryAudit(e.t.Context(), store.AuditFilter{Action: action, Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	var found []store.AuditRecord
	for _, r := range recs {
		if r.RequestID == req {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		e.t.Fatalf("%d %s records of request %s: %+v", len(found), action, req, found)
	}
	return found[0]
}

// TestSecurityRecordsCarryEveryField (docs/security.md items 24, 30): each security event
// over HTTP — a failed login (unknown e-mail, wrong password), a lockout, a login,
// token reuse, a denial of an admin route and of a cluster, a logout, a session
// ended by its user, and an admin's revocation of a user's sessions — is audited
// with its actor (user id and e-mail, none for the login failures), session,
// client address, request id, action, target, result and reason, and no record
// holds a password or a token.
func TestSecurityRecordsCarryEveryField(t *testing.T) {
	e := newTestEnvWith(t, auth.Config{Argon2: auth.Params{Memory: 8, Time: 1, Threads: 1, KeyLen: 32, SaltLen: 16},
		PerAddressRate: rate.Inf, PerAddressBurst: 1, FailuresBeforeBackoff: 2})
	sim := e.addSim("lab")
	root := e.addUser("root", accounts.RoleAdmin)
	ann := e.addUser("ann", accounts.RoleUser)
	e.addUser("carl", accounts.RoleUser) // whose logins the wrong passwords delay
	secrets := []string{envPassword, "wrong guess 1234"}
	send := func(req string, r *http.Request) *httptest.ResponseRecorder {
		return e.send(withRequestID(r, req))
	}
	login := func(req, email, password string) *httptest.ResponseRecorder {
		return send(req, bearerReq("POST", "/api/v1/user/login", "", fmt.Sprintf(`{"email":%q,"password":%q}`, email, password)))
	}

	// Logins and their failures.
	login("r-unknown", "nobody@example.org", "wrong guess 1234")
	login("r-wrong1", "carl@example.org", "wrong guess 1234")
	login("r-wrong2", "carl@example.org", "wrong guess 1234") // the second in a row: the delay starts
	w := login("r-login", "root@example.org", envPassword)
	var tok struct {
		Token string `json:"token"`
	}
	json.Unmarshal(envelopeOf(t, w).Data, &tok)
	secrets = append(secrets, tok.Token)
	rootSID := e.current(tok.Token)

	// Token reuse: T0 → T1 → T2, then T0 again.
	t0 := e.loginAs("ann@example.org", "reuse")
	t1, _ := e.refreshHTTP(t0)
	e.refreshHTTP(t1)
	annSID := e.current(e.tokens["ann"])
	reuseSID := ""
	for _, s := range mustSessions(t, e, e.tokens["ann"]) {
		if s.UserAgent == "reuse" {
			reuseSID = s.ID
		}
	}
	send("r-reuse", bearerReq("POST", "/api/v1/user/refresh", t0, ""))
	secrets = append(secrets, t0, t1)

	// Denials: an admin route and a cluster without a grant.
	send("r-denied", bearerReq("GET", "/api/v1/users", e.tokens["ann"], ""))
	send("r-nogrant", bearerReq("GET", "/api/v1/pve/clusters/"+strconv.FormatInt(sim.id, 10)+"/nodes", e.tokens["ann"], ""))

	// Revocations: a logout, a session ended from the list, an admin disabling ann.
	other := e.loginAs("ann@example.org", "other")
	otherSID := e.current(other)
	send("r-end", bearerReq("DELETE", "/api/v1/user/sessions/"+otherSID, e.tokens["ann"], ""))
	bye := e.loginAs("root@example.org", "bye")
	byeSID := e.current(bye)
	send("r-logout", bearerReq("POST", "/api/v1/user/logout", bye, ""))
	send("r-disable", bearerReq("PATCH", "/api/v1/users/"+strconv.FormatInt(ann.ID, 10), tok.Token, `{"disabled":true}`))

	type want struct {
		req, action    string
		user           int64
		email, session string
		target, result string
		reasonContains string
		cluster        int64
	}
	rootEmail, annEmail := root.Email, ann.Email
	for _, c := range []want{
		{"r-unknown", "auth.login_failed", 0, "", "", "user:nobody@example.org", "bad_credentials", "unknown_email", 0},
		{"r-wrong1", "auth.login_failed", 0, "", "", "user:carl@example.org", "bad_credentials", "wrong_password", 0},
		{"r-wrong2", "auth.lockout", 0, "", "", "user:carl@example.org", "locked", "2 wrong passwords", 0},
		{"r-login", "auth.login", root.ID, rootEmail, rootSID, "session:" + rootSID, "ok", "", 0},
		{"r-reuse", "auth.token_reuse", ann.ID, "", reuseSID, "session:" + reuseSID, "revoked", "rotated token", 0},
		{"r-denied", "access.denied", ann.ID, annEmail, annSID, "GET /api/v1/users", "denied", "admin role", 0},
		{"r-nogrant", "access.denied", ann.ID, annEmail, annSID, "GET /api/v1/pve/clusters/" + strconv.FormatInt(sim.id, 10) + "/nodes", "denied", "not found", sim.id},
		{"r-end", "auth.session_revoked", ann.ID, annEmail, annSID, "session:" + otherSID, "ok", "ended", 0},
		{"r-logout", "auth.logout", root.ID, rootEmail, byeSID, "session:" + byeSID, "ok", "logout", 0},
		{"r-disable", "auth.sessions_revoked", root.ID, rootEmail, rootSID, "user:" + strconv.FormatInt(ann.ID, 10), "ok", "admin", 0},
	} {
		r := e.recordOf(c.req, c.action)
		if r.UserID != c.user || (c.email != "" && r.UserEmail != c.email) || (c.user == 0 && r.UserEmail != "") ||
			r.SessionID != c.session {
			t.Errorf("%s %s: actor %d %q session %q, want %d %q %q", c.req, c.action, r.UserID, r.UserEmail, r.SessionID,
				c.user, c.email, c.session)
		}
		if r.Address != "192.0.2.1" || r.RequestID != c.req || r.Target != c.target || r.Result != c.result ||
			r.ClusterID != c.cluster {
			t.Errorf("%s %s: address %q request %q target %q result %q cluster %d; want 192.0.2.1 %q %q %q %d", c.req, c.action,
				r.Address, r.RequestID, r.Target, r.Result, r.ClusterID, c.req, c.target, c.result, c.cluster)
		}
		if (c.reasonContains == "") != (r.Reason == "") || !strings.Contains(r.Reason, c.reasonContains) {
			t.Errorf("%s %s: reason %q, want one containing %q", c.req, c.action, r.Reason, c.reasonContains)
		}
		if r.Count != 1 || r.Chain == "" {
			t.Errorf("%s %s: count %d chain %q", c.req, c.action, r.Count, r.Chain)
		}
	}
	// No secret in any field of any record.
	all, err := e.store.QueryAudit(t.Context(), store.AuditFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		text := fmt.Sprintf("%+v", r)
		for _, s := range secrets {
			if s != "" && strings.Contains(text, s) {
				t.Errorf("record %d (%s) holds a secret", r.ID, r.Action)
			}
		}
	}
	if _, err := audit.Verify(t.Context(), e.store, nil); err != nil {
		t.Errorf("the chain after the events: %v", err)
	}
}

func mustSessions(t *testing.T, e *testEnv, token string) []sessionOut {
	t.Helper()
	list, code := e.sessionsOf(token, "/api/v1/user/sessions")
	if code != 200 {
		t.Fatalf("sessions: %d", code)
	}
	return list
}

// TestRepeatedDenialsAreFoldedOverHTTP (docs/security.md item 30): a user hammering an admin
// route adds two rows a minute, not one per request, and the rows count every
// denial.
func TestRepeatedDenialsAreFoldedOverHTTP(t *testing.T) {
	e := newTestEnv(t)
	e.addUser("ann", accounts.RoleUser)
	for range 50 {
		if w := e.do("ann", "GET", "/api/v1/users", ""); w.Code != 403 {
			t.Fatalf("denial: %d", w.Code)
		}
	}
	e.trail.Flush(t.Context())
	recs, err := e.store.QueryAudit(t.Context(), store.AuditFilter{Action: "access.denied", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, r := range recs {
		total += r.Count
	}
	// The minute may turn during the loop: then a third row.
	if len(recs) < 2 || len(recs) > 3 || total != 50 {
		t.Fatalf("%d rows counting %d denials, want 2 (or 3) rows counting 50", len(recs), total)
	}
}

// TestAuditFiltersOverHTTP (docs/security.md item 30): GET /audit filters by user, action, cluster, result
// and time, pages by cursor, and refuses what it cannot read.
func TestAuditFiltersOverHTTP(t *testing.T) {
	e := newTestEnv(t)
	root := e.addUser("root", accounts.RoleAdmin)
	ann := e.addUser("ann", accounts.RoleUser)
	ctx := t.Context()
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range 6 {
		for _, u := range []accounts.User{root, ann} {
			e.trail.Append(ctx, store.AuditRecord{At: base.Add(time.Duration(i) * time.Hour), UserID: u.ID, UserEmail: u.Email,
				Action: "vm.start", ClusterID: int64(1 + i%2), Result: []string{"ok", "vm_running"}[i%2]})
		}
	}
	type rec struct {
		ID        int64  `json:"id"`
		UserID    int64  `json:"userId"`
		Action    string `json:"action"`
		ClusterID int64  `json:"clusterId"`
		Result    string `json:"result"`
		Reason    string `json:"reason"`
		At        string `json:"at"`
		Count     int64  `json:"count"`
	}
	get := func(q string) ([]rec, int) {
		t.Helper()
		w := e.do("root", "GET", "/api/v1/audit?"+q, "")
		if w.Code != 200 {
			return nil, w.Code
		}
		var out []rec
		json.Unmarshal(envelopeOf(t, w).Data, &out)
		return out, 200
	}
	got, _ := get("user=" + strconv.FormatInt(ann.ID, 10) + "&action=vm.start&cluster=2&result=vm_running")
	if len(got) != 3 {
		t.Fatalf("ann's vm_running starts on cluster 2: %+v", got)
	}
	for _, r := range got {
		if r.UserID != ann.ID || r.ClusterID != 2 || r.Result != "vm_running" || r.Reason != "vm_running" || r.Count != 1 {
			t.Errorf("record %+v", r)
		}
	}
	got, _ = get("action=vm.start&from=2026-01-02T04:04:05Z&to=2026-01-02T06:04:05Z")
	if len(got) != 4 {
		t.Errorf("two hours of starts: %d records", len(got))
	}
	// Cursor paging with the same filter: pages of 5 until a short one.
	var ids []int64
	cursor := ""
	for page := 0; page < 5; page++ {
		got, _ := get("action=vm.start&limit=5" + cursor)
		for _, r := range got {
			ids = append(ids, r.ID)
		}
		if len(got) < 5 {
			break
		}
		cursor = "&before=" + strconv.FormatInt(got[len(got)-1].ID, 10)
	}
	if len(ids) != 12 {
		t.Errorf("paged %d records, want 12", len(ids))
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] >= ids[i-1] {
			t.Errorf("page order: %v", ids)
			break
		}
	}
	for _, bad := range []string{"user=0", "user=x", "cluster=-1", "action=VM.Start", "action=vm..start", "result=a%20b",
		"from=yesterday", "from=2026-01-02T05:00:00Z&to=2026-01-02T05:00:00Z", "user=1&user=2", "action=a&action=b",
		"limit=0", "limit=1001", "sort=id", "to=2026-01-02"} {
		if _, code := get(bad); code != 400 {
			t.Errorf("%s: %d, want 400", bad, code)
		}
	}
	if w := e.do("ann", "GET", "/api/v1/audit", ""); w.Code != 403 {
		t.Errorf("a user reading the audit: %d", w.Code)
	}
}
