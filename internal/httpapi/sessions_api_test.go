package httpapi

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/accounts"
)

// loginAs logs email in over HTTP with a User-Agent and returns the token and
// its session id (from the caller's own list).
func (e *testEnv) loginAs(email, agent string) string {
	e.t.Helper()
	r := bearerReq("POST", "/api/v1/user/login", "", `{"email":"`+email+`","password":"`+envPassword+`"}`)
	r.Header.Set("User-Agent", agent)
	w := e.send(r)
	if w.Code != 200 {
		e.t.Fatalf("login %s: %d %s", email, w.Code, w.Body)
	}
	var d struct {
		Token string `json:"token"`
	}
	json.Unmarshal(envelopeOf(e.t, w).Data, &d)
	return d.Token
}

type sessionOut struct {
	ID         string `json:"id"`
	CreatedAt  string `json:"createdAt"`
	LastSeenAt string `json:"lastSeenAt"`
	Address    string `json:"address"`
	UserAgent  string `json:"userAgent"`
	Current    bool   `json:"current"`
}

func (e *testEnv) sessionsOf(token, path string) ([]sessionOut, int) {
	e.t.Helper()
	w := e.send(bearerReq("GET", path, token, ""))
	if w.Code != 200 {
		return nil, w.Code
	}
	var out []sessionOut
	if err := json.Unmarshal(envelopeOf(e.t, w).Data, &out); err != nil {
		e.t.Fatal(err)
	}
	return out, w.Code
}

// current returns the id of the session token belongs to.
func (e *testEnv) current(token string) string {
	e.t.Helper()
	list, code := e.sessionsOf(token, "/api/v1/user/sessions")
	for _, s := range list {
		if s.Current {
			return s.ID
		}
	}
	e.t.Fatalf("no current session (%d)", code)
	return ""
}

// TestSessionsOverHTTP (docs/security.md item 29): a user lists and ends their own sessions,
// an admin anyone's; an ended session's token is 401 at once; someone else's
// session is 404 like a missing one; the ends are audited with the actor.
func TestSessionsOverHTTP(t *testing.T) {
	e := newTestEnv(t)
	root := e.addUser("root", accounts.RoleAdmin)
	ann := e.addUser("ann", accounts.RoleUser)
	e.addUser("bob", accounts.RoleUser)
	laptop := e.loginAs("ann@example.org", "Firefox/128.0")
	phone := e.loginAs("ann@example.org", "vmgate-cli/1.0")

	list, code := e.sessionsOf(phone, "/api/v1/user/sessions")
	if code != 200 || len(list) != 3 { // addUser's login, the laptop and the phone
		t.Fatalf("ann's sessions: %d %+v", code, list)
	}
	byAgent := map[string]sessionOut{}
	for _, s := range list {
		byAgent[s.UserAgent] = s
	}
	if p := byAgent["vmgate-cli/1.0"]; !p.Current || p.Address != "192.0.2.1" || p.LastSeenAt < p.CreatedAt {
		t.Errorf("the phone's session: %+v", p)
	}
	if l := byAgent["Firefox/128.0"]; l.Current || l.ID == "" {
		t.Errorf("the laptop's session: %+v", l)
	}
	laptopSID := byAgent["Firefox/128.0"].ID

	// Ending someone else's session, or a made-up one, is the same 404; a bad id 400.
	bobSID := e.current(e.tokens["bob"])
	for _, sid := range []string{bobSID, "no-such-session"} {
		w := e.send(bearerReq("DELETE", "/api/v1/user/sessions/"+sid, phone, ""))
		if w.Code != 404 || !strings.Contains(w.Body.String(), `"session not found"`) {
			t.Errorf("ending %s: %d %s", sid, w.Code, w.Body)
		}
	}
	if c := e.meStatus(e.tokens["bob"]); c != 200 {
		t.Errorf("bob after ann's attempt: %d", c)
	}
	if w := e.send(bearerReq("DELETE", "/api/v1/user/sessions/a.b", phone, "")); w.Code != 400 {
		t.Errorf("bad session id: %d", w.Code)
	}

	if w := e.send(bearerReq("DELETE", "/api/v1/user/sessions/"+laptopSID, phone, "")); w.Code != 200 {
		t.Fatalf("ending the laptop: %d %s", w.Code, w.Body)
	}
	if c := e.meStatus(laptop); c != 401 {
		t.Errorf("the laptop's token after its end: %d", c)
	}
	if c := e.meStatus(phone); c != 200 {
		t.Errorf("the phone's token: %d", c)
	}
	rec := e.lastAudit()
	if rec.Action != "auth.session_revoked" || rec.Target != "session:"+laptopSID || rec.UserID != ann.ID ||
		rec.SessionID == laptopSID || rec.SessionID == "" || rec.Address != "192.0.2.1" || rec.RequestID == "" {
		t.Errorf("audit of ann's end: %+v", rec)
	}

	// The admin's view and end.
	annPath := "/api/v1/users/" + strconv.FormatInt(ann.ID, 10) + "/sessions"
	if _, code := e.sessionsOf(phone, annPath); code != 403 {
		t.Errorf("ann reading her sessions through the admin route: %d", code)
	}
	list, code = e.sessionsOf(e.tokens["root"], annPath)
	if code != 200 || len(list) != 2 || list[0].Current || list[1].Current {
		t.Fatalf("root's view of ann: %d %+v", code, list)
	}
	if _, code := e.sessionsOf(e.tokens["root"], "/api/v1/users/99999/sessions"); code != 404 {
		t.Errorf("sessions of a missing user: %d", code)
	}
	phoneSID := e.current(phone)
	if w := e.send(bearerReq("DELETE", annPath+"/"+bobSID, e.tokens["root"], "")); w.Code != 404 {
		t.Errorf("ending bob's session as ann's: %d", w.Code)
	}
	if w := e.send(bearerReq("DELETE", annPath+"/"+phoneSID, e.tokens["ann"], "")); w.Code != 403 {
		t.Errorf("a user on the admin route: %d", w.Code)
	}
	if w := e.send(bearerReq("DELETE", annPath+"/"+phoneSID, e.tokens["root"], "")); w.Code != 200 {
		t.Fatalf("root ending ann's phone: %d %s", w.Code, w.Body)
	}
	if c := e.meStatus(phone); c != 401 {
		t.Errorf("the phone's token after root ended it: %d", c)
	}
	rec = e.lastAudit()
	if rec.Action != "auth.session_revoked" || rec.Target != "session:"+phoneSID || rec.UserID != root.ID ||
		!strings.Contains(rec.Params, `"why":"admin"`) {
		t.Errorf("audit of root's end: %+v", rec)
	}
	// Ending one's current session is a logout.
	cur := e.current(e.tokens["ann"])
	if w := e.send(bearerReq("DELETE", "/api/v1/user/sessions/"+cur, e.tokens["ann"], "")); w.Code != 200 {
		t.Fatalf("ending the current session: %d", w.Code)
	}
	if c := e.meStatus(e.tokens["ann"]); c != 401 {
		t.Errorf("after ending the current session: %d", c)
	}
}
