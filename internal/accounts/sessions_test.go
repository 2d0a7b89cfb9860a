package accounts

import (
	"testing"

	"github.com/vmgate/vmgate/internal/errs"
)

// TestSessionsRules (docs/security.md item 29): a user sees their own sessions with the
// current one marked and ends one of them; another user's session is NotFound; an
// admin sees and ends anyone's, and a missing user is NotFound.
func TestSessionsRules(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	root := e.user("root", RoleAdmin)
	ann := e.user("ann", RoleUser)
	bob := e.user("bob", RoleUser)
	rootP, _ := e.login(root)
	annP, annTok := e.login(ann)
	annP2, annTok2 := e.login(ann)
	bobP, bobTok := e.login(bob)

	mine, err := e.svc.MySessions(as(annP, "r1"), annP)
	if err != nil || len(mine) != 2 {
		t.Fatalf("ann's sessions: %v %+v", err, mine)
	}
	for _, s := range mine {
		if s.Current != (s.ID == annP.SessionID) {
			t.Errorf("current %v on %s", s.Current, s.ID)
		}
	}
	if err := e.svc.EndMySession(as(annP, "r2"), annP, bobP.SessionID); !errs.Is(err, errs.NotFound) {
		t.Errorf("ann ending bob's session: %v", err)
	}
	if !e.live(bobTok) {
		t.Error("bob's session ended")
	}
	if err := e.svc.EndMySession(as(annP, "r3"), annP, annP2.SessionID); err != nil {
		t.Fatal(err)
	}
	if e.live(annTok2) || !e.live(annTok) {
		t.Errorf("after ann ended her second session: second live %v, first live %v", e.live(annTok2), e.live(annTok))
	}

	if _, err := e.svc.UserSessions(as(rootP, "r4"), rootP, 9999); !errs.Is(err, errs.NotFound) {
		t.Errorf("sessions of a missing user: %v", err)
	}
	if err := e.svc.EndUserSession(as(rootP, "r5"), rootP, 9999, annP.SessionID); !errs.Is(err, errs.NotFound) {
		t.Errorf("ending a session of a missing user: %v", err)
	}
	if err := e.svc.EndUserSession(as(rootP, "r6"), rootP, bob.ID, annP.SessionID); !errs.Is(err, errs.NotFound) {
		t.Errorf("ending ann's session as bob's: %v", err)
	}
	list, err := e.svc.UserSessions(as(rootP, "r7"), rootP, ann.ID)
	if err != nil || len(list) != 1 || list[0].ID != annP.SessionID || list[0].Current {
		t.Fatalf("root's view of ann: %v %+v", err, list)
	}
	if err := e.svc.EndUserSession(as(rootP, "r8"), rootP, ann.ID, annP.SessionID); err != nil {
		t.Fatal(err)
	}
	if e.live(annTok) {
		t.Error("ann's session survived the admin")
	}
	recs := e.records("auth.session_revoked")
	if len(recs) != 2 || recs[1].UserID != root.ID || recs[1].RequestID != "r8" || recs[1].Target != "session:"+annP.SessionID {
		t.Errorf("audit: %+v", recs)
	}
}
