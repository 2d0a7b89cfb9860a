package storetest

import (
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/store"
)

// testSessionActivity: a user's live sessions, newest first, with their User-Agent
// and when each was last seen; TouchSessions and a refresh move LastSeenAt forward,
// never back, and feed nothing.
func testSessionActivity(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mkUser(t, s, "act@example.com")
	other := mkUser(t, s, "other@example.com")
	for i, id := range []string{"a", "b", "c"} {
		sess := store.Session{ID: id, UserID: u.ID, Generation: 1, CreatedAt: at(time.Duration(i) * time.Minute),
			ExpiresAt: at(24 * time.Hour), Address: "192.0.2.1", UserAgent: "agent-" + id}
		ok(t, s.CreateSession(ctx, sess), "create "+id)
	}
	mkSession(t, s, "x", other.ID, at(24*time.Hour))
	mkSession(t, s, "expired", u.ID, at(time.Hour))
	ok(t, s.RevokeSession(ctx, "c", at(5*time.Minute), "logout"), "revoke c")

	list, err := s.UserSessions(ctx, u.ID, at(2*time.Hour))
	ok(t, err, "user sessions")
	var ids []string
	for _, sess := range list {
		ids = append(ids, sess.ID)
	}
	same(t, ids, []string{"b", "a"}, "live sessions, newest first")
	if list[0].UserAgent != "agent-b" || !list[0].LastSeenAt.Equal(list[0].CreatedAt) || list[0].Address != "192.0.2.1" {
		t.Fatalf("session b: %+v", list[0])
	}
	none, err := s.UserSessions(ctx, u.ID+1000, at(2*time.Hour))
	ok(t, err, "sessions of nobody")
	same(t, len(none), 0, "sessions of nobody")

	head := feedHead(t, s)
	ok(t, s.TouchSessions(ctx, []store.SessionSeen{{ID: "a", At: at(3 * time.Hour)}, {ID: "b", At: at(time.Hour)},
		{ID: "missing", At: at(time.Hour)}}), "touch")
	ok(t, s.TouchSessions(ctx, []store.SessionSeen{{ID: "a", At: at(2 * time.Hour)}}), "touch back in time")
	ok(t, s.TouchSessions(ctx, nil), "touch nothing")
	a, err := s.SessionByID(ctx, "a")
	ok(t, err, "read a")
	same(t, a.LastSeenAt, at(3*time.Hour), "a's last use never moves back")
	same(t, feedHead(t, s), head, "feed head after touches")

	_, won, err := s.RotateSession(ctx, "b", 1, at(4*time.Hour))
	ok(t, err, "rotate b")
	if !won {
		t.Fatal("rotate b lost")
	}
	b, err := s.SessionByID(ctx, "b")
	ok(t, err, "read b")
	same(t, b.LastSeenAt, at(4*time.Hour), "b's last use after a refresh")
}
