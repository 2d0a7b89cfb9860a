package accounts

import (
	"context"
	"time"

	"github.com/vmgate/vmgate/internal/auth"
)

// Session is one live session of a user, as the user or an admin sees it
// (docs/security.md item 29).
type Session struct {
	ID         string
	CreatedAt  time.Time
	LastSeenAt time.Time // within a minute (auth.Config.SeenInterval)
	Address    string    // the client address at login
	UserAgent  string    // the User-Agent at login
	Current    bool      // the session of the caller's own token
}

func sessionViews(list []auth.SessionInfo, current string) []Session {
	out := make([]Session, 0, len(list))
	for _, s := range list {
		out = append(out, Session{ID: s.ID, CreatedAt: s.CreatedAt, LastSeenAt: s.LastSeenAt, Address: s.Address,
			UserAgent: s.UserAgent, Current: s.ID == current})
	}
	return out
}

// MySessions returns the caller's live sessions, the newest login first; the one
// their token belongs to is Current. Like every session route, only a login
// session may (403 for an API token: docs/security.md item 32).
func (s *Service) MySessions(ctx context.Context, p auth.Principal) ([]Session, error) {
	if err := s.RequireSession(ctx, p, "session.list"); err != nil {
		return nil, err
	}
	list, err := s.auth.Sessions(ctx, p.UserID)
	if err != nil {
		return nil, err
	}
	return sessionViews(list, p.SessionID), nil
}

// EndMySession ends one of the caller's sessions, their current one included (a
// logout by another name): its tokens fail at once. A session that is not theirs
// is 404, exactly like one that does not exist. Audited by auth.
func (s *Service) EndMySession(ctx context.Context, p auth.Principal, sid string) error {
	if err := s.RequireSession(ctx, p, "session.end"); err != nil {
		return err
	}
	return s.auth.EndSession(ctx, p.UserID, sid, auth.WhyEnded)
}

// UserSessions is admin p's view of user userID's live sessions (404 for a user
// that does not exist); Current marks the admin's own. Only an admin's login
// session may.
func (s *Service) UserSessions(ctx context.Context, p auth.Principal, userID int64) ([]Session, error) {
	if err := s.requireAdminSession(ctx, p, "session.list"); err != nil {
		return nil, err
	}
	if _, err := s.st.UserByID(ctx, userID); err != nil {
		return nil, err
	}
	list, err := s.auth.Sessions(ctx, userID)
	if err != nil {
		return nil, err
	}
	return sessionViews(list, p.SessionID), nil
}

// EndUserSession is admin p ending session sid of user userID: 404 for a user
// that does not exist and for a session that is not the user's or has ended.
// Only an admin's login session may (403 forbidden, 403 session_required).
// Audited by auth, attributed to the admin.
func (s *Service) EndUserSession(ctx context.Context, p auth.Principal, userID int64, sid string) error {
	if err := s.requireAdminSession(ctx, p, "session.end"); err != nil {
		return err
	}
	if _, err := s.st.UserByID(ctx, userID); err != nil {
		return err
	}
	return s.auth.EndSession(ctx, userID, sid, auth.WhyAdmin)
}
