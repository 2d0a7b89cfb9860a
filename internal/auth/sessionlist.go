package auth

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// SessionInfo is one live session as its owner or an admin sees it (docs/security.md
// 29): when it began and was last used, and from where. LastSeenAt is as fresh as
// Config.SeenInterval (a minute) allows.
type SessionInfo struct {
	ID         string
	CreatedAt  time.Time
	LastSeenAt time.Time
	ExpiresAt  time.Time
	Address    string // the client address at login
	UserAgent  string // the User-Agent at login
}

// Sessions returns the live sessions of user userID, the newest login first.
func (s *Service) Sessions(ctx context.Context, userID int64) ([]SessionInfo, error) {
	list, err := s.st.UserSessions(ctx, userID, s.cfg.Now())
	if err != nil {
		return nil, fmt.Errorf("sessions of user %d: %w", userID, err)
	}
	out := make([]SessionInfo, 0, len(list))
	for _, sess := range list {
		seen := sess.LastSeenAt
		if seen.Before(sess.CreatedAt) {
			seen = sess.CreatedAt
		}
		out = append(out, SessionInfo{ID: sess.ID, CreatedAt: sess.CreatedAt, LastSeenAt: seen, ExpiresAt: sess.ExpiresAt,
			Address: sess.Address, UserAgent: sess.UserAgent})
	}
	return out, nil
}

// errNoSession is the one answer for a session that is not the user's, never
// existed or has ended: which of them is nobody's business.
func errNoSession() error { return errs.E(errs.NotFound, "session not found") }

// EndSession ends session sid of user userID for why (WhyEnded when the user ends
// one of theirs, WhyAdmin when an admin does): from now on its tokens fail on every
// route, on this replica at once and on the others when the change feed reaches
// them. A session that is not userID's, or has already ended, is NotFound. The end
// is audited as auth.session_revoked, attributed to whoever asked (ctx).
func (s *Service) EndSession(ctx context.Context, userID int64, sid, why string) error {
	now := s.cfg.Now()
	sess, err := s.st.SessionByID(ctx, sid)
	if errs.Is(err, errs.NotFound) {
		return errNoSession()
	}
	if err != nil {
		return fmt.Errorf("end session: %w", err)
	}
	if sess.UserID != userID || !sess.Active(now) {
		return errNoSession()
	}
	if err := s.st.RevokeSession(ctx, sid, now, why); err != nil {
		if errs.Is(err, errs.NotFound) {
			return errNoSession() // pruned meanwhile
		}
		return fmt.Errorf("end session: %w", err)
	}
	s.cache.revoke(sid)
	s.audit(ctx, store.AuditRecord{Action: "auth.session_revoked", Target: "session:" + sid, Result: "ok", Reason: why,
		Params: jsonParams(map[string]any{"userId": userID, "why": why})})
	return nil
}

// WaitSeen blocks until the sessions' and API tokens' uses noted so far are
// written (tests).
func (s *Service) WaitSeen() {
	s.seen.wait()
	s.apiTokenUses.wait()
}

// maxUserAgent bounds the User-Agent kept with a session.
const maxUserAgent = 256

// cleanUserAgent is a client's User-Agent cut to maxUserAgent bytes and to
// printable characters: it is shown to people.
func cleanUserAgent(ua string) string {
	ua = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return -1
		}
		return r
	}, ua)
	for len(ua) > maxUserAgent {
		_, n := utf8.DecodeLastRuneInString(ua)
		ua = ua[:len(ua)-n]
	}
	return ua
}
