package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/notify"
	"github.com/vmgate/vmgate/internal/store"
)

// errToken is the one answer to every token that does not authenticate: the
// cause goes to the log only (docs/security.md item 1).
func errToken(cause error) *errs.Error {
	return &errs.Error{Kind: errs.Unauthenticated, Reason: "unauthenticated", Message: "invalid or expired token", Err: cause}
}

// Method names how the user of a session proved who they are. Every login method
// starts its sessions through StartSession; a password is the only one so far
// (issue 23 adds single sign-on and second factors).
type Method string

// The login methods.
const (
	MethodPassword Method = "password" // Login: an e-mail and its password
)

// Client is what is known of the client a session starts for; it is kept with the
// session and shown in its owner's list (docs/security.md item 29).
type Client struct {
	// Address is the client's address after trusted-proxy resolution, or an
	// RFC 7239 obfuscated identifier.
	Address string
	// UserAgent is the client's User-Agent as sent: StartSession keeps it
	// printable and bounded.
	UserAgent string
}

// StartSession starts a session for u, who has just proved who they are by method,
// and returns its first token. It is the one way into a session: a login method
// checks its own proof (Login a password, with its throttling; later an identity
// provider's answer) and hands over here, so that what a session is — its absolute
// end (SessionMax), the cache, the last-seen writes, the auth.login record with the
// method — is the same whatever the method. A disabled user is refused with the
// same 401 as any failed login; the caller read u just before.
func (s *Service) StartSession(ctx context.Context, u store.User, method Method, c Client) (Token, error) {
	if method == "" || u.ID == 0 {
		return Token{}, fmt.Errorf("start session: no login method or no user (%q, %d)", method, u.ID)
	}
	if u.Disabled {
		return Token{}, errCredentials()
	}
	now := s.cfg.Now()
	sess := store.Session{ID: randomID(32), UserID: u.ID, CreatedAt: now, ExpiresAt: now.Add(s.cfg.SessionMax),
		RotatedAt: now, Address: c.Address, UserAgent: cleanUserAgent(c.UserAgent)}
	if err := s.st.CreateSession(ctx, sess); err != nil {
		return Token{}, fmt.Errorf("start session of user %d: %w", u.ID, err)
	}
	tok, err := s.issue(u.ID, sess.ID, 0, sess.ExpiresAt, now)
	if err != nil {
		return Token{}, err
	}
	s.cache.put(sess.ID, newSessionEntry(sess, u, now))
	s.seen.seen(sess.ID, now)
	s.audit(ctx, store.AuditRecord{Action: "auth.login", UserID: u.ID, UserEmail: u.Email, SessionID: sess.ID,
		Address: c.Address, Target: "session:" + sess.ID, Result: "ok",
		Params: jsonParams(map[string]any{"method": string(method)})})
	return tok, nil
}

// Refresh exchanges a valid token for the next generation of its session; the
// presented token stops working at once. A token one generation behind, presented
// within ReuseGrace of the rotation, is refused without further harm (a double
// click, or the losers of concurrent refreshes). Any other rotated token is taken
// as stolen: the whole session is revoked and the reuse audited (RFC 9700 §4.14).
// The new token never outlives the session's absolute end.
func (s *Service) Refresh(ctx context.Context, raw, addr string) (Token, error) {
	if IsAPIToken(raw) {
		// An API token has nothing to refresh; it gets the one answer every token
		// failure gets, so that /user/refresh tells nobody what kind a token is.
		return Token{}, errToken(errors.New("an API token is not refreshed"))
	}
	v, err := s.verifyLearning(ctx, raw)
	if err != nil {
		return Token{}, err
	}
	now := s.cfg.Now()
	sess, won, err := s.st.RotateSession(ctx, v.sid, v.gen, now)
	if errs.Is(err, errs.NotFound) {
		return Token{}, errToken(err)
	}
	if err != nil {
		return Token{}, fmt.Errorf("refresh: %w", err)
	}
	if sess.UserID != v.userID {
		return Token{}, errToken(errors.New("session of another user"))
	}
	if !won {
		_, err := s.rotatedToken(ctx, v, sess, addr, now, "refresh")
		return Token{}, err
	}
	u, err := s.st.UserByID(ctx, sess.UserID)
	if err != nil && !errs.Is(err, errs.NotFound) {
		return Token{}, fmt.Errorf("refresh: %w", err)
	}
	if err != nil || u.Disabled {
		// RevokeUser should have ended the session already; finish its work.
		if err := s.st.RevokeSession(ctx, sess.ID, now, WhyDisabled); err != nil {
			return Token{}, fmt.Errorf("refresh: %w", err)
		}
		s.cache.revoke(sess.ID)
		return Token{}, errToken(errors.New("user disabled or deleted"))
	}
	tok, err := s.issue(u.ID, sess.ID, sess.Generation, sess.ExpiresAt, now)
	if err != nil {
		return Token{}, err
	}
	s.cache.put(sess.ID, newSessionEntry(sess, u, now))
	s.seen.seen(sess.ID, now)
	return tok, nil
}

// rotatedToken decides about a token whose generation is not its session's,
// presented at Refresh or in a browser's cookie (CheckReuse) — one rule for both
// (RFC 9700 §4.14): the generation just rotated, within ReuseGrace of the
// rotation, is forgiven (a double click, a race's losers, a request in flight
// when the cookie was renewed); any other older generation of a live session
// means two parties hold the session, so it is revoked and the reuse audited
// (auth.token_reuse, with where the token was presented: via). It returns the
// error Refresh answers with, and whether the session was revoked.
func (s *Service) rotatedToken(ctx context.Context, v verified, sess store.Session, addr string, now time.Time,
	via string) (revoked bool, err error) {
	switch {
	case !sess.Active(now):
		s.cache.revoke(sess.ID)
		return false, errToken(errors.New("session revoked or ended"))
	case sess.Generation == v.gen+1 && now.Sub(sess.RotatedAt) < s.cfg.ReuseGrace:
		s.log.LogAttrs(ctx, slog.LevelInfo, "a just-rotated token forgiven", slog.String("session", sess.ID),
			slog.String("address", addr), slog.String("via", via))
		return false, errToken(errors.New("token just rotated"))
	case sess.Generation > v.gen:
		if err := s.st.RevokeSession(ctx, sess.ID, now, WhyReuse); err != nil {
			return false, fmt.Errorf("revoke reused session: %w", err)
		}
		s.cache.revoke(sess.ID)
		s.log.LogAttrs(ctx, slog.LevelWarn, "rotated token reused: session revoked", slog.Int64("user", sess.UserID),
			slog.String("session", sess.ID), slog.String("address", addr), slog.Int64("gen", v.gen),
			slog.Int64("current", sess.Generation), slog.String("via", via))
		// The notification is written with the audit record (issue 24).
		nctx := store.WithOutbox(ctx, notify.AuthTokenReuse(sess.UserID, addr, via, now))
		s.audit(nctx, store.AuditRecord{Action: "auth.token_reuse", UserID: sess.UserID, SessionID: sess.ID,
			Address: addr, Target: "session:" + sess.ID, Result: "revoked",
			Reason: "a rotated token was presented again: the session is taken as stolen",
			Params: jsonParams(map[string]any{"gen": v.gen, "current": sess.Generation, "via": via})})
		return true, errToken(errors.New("rotated token reused"))
	default: // a generation ahead of the store: not one we issued
		return false, errToken(errors.New("generation ahead of session"))
	}
}

// CheckReuse applies Refresh's reuse detection to a session token that
// Authenticate refused, for a client that holds only its session's newest token
// and renews it through Refresh: the web UI's cookie. Such a client presents an
// older generation only when someone else rotated the token — a thief who
// refreshed a stolen cookie at /user/refresh — so the UI asks here, and the
// session is revoked and the reuse audited exactly as at Refresh (rotatedToken,
// via "ui"), the generation just rotated within ReuseGrace excepted. A token that
// is not a session token of ours, of an ended session, or of the session's
// newest generation (refused for another reason) changes nothing. It reports
// whether the session was revoked; an error is the store's.
//
// The API does not call it on its routes: an API client may have a request in
// flight with the old token while it refreshes, and a late answer is no theft.
func (s *Service) CheckReuse(ctx context.Context, raw, addr string) (bool, error) {
	if IsAPIToken(raw) {
		return false, nil
	}
	v, err := s.verifyLearning(ctx, raw)
	if err != nil {
		return false, nil // not a token of ours, or expired: nothing to tell
	}
	sess, err := s.st.SessionByID(ctx, v.sid)
	if errs.Is(err, errs.NotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("check token reuse: %w", err)
	}
	if sess.UserID != v.userID || sess.Generation <= v.gen {
		return false, nil
	}
	revoked, err := s.rotatedToken(ctx, v, sess, addr, s.cfg.Now(), "ui")
	if errs.KindOf(err) == errs.Unauthenticated {
		err = nil
	}
	return revoked, err
}

// Logout ends p's session: from now on every token of it fails, on this replica at
// once and on the others when they next read the change feed. Logging out of a
// session that already ended is 401.
func (s *Service) Logout(ctx context.Context, p Principal) error {
	if err := RequireLoginSession(p); err != nil {
		return err
	}
	e, err := s.session(ctx, p.SessionID, p.Generation)
	if err != nil {
		return err
	}
	now := s.cfg.Now()
	if !e.accepts(now, p.UserID, p.Generation) {
		return errToken(errors.New("session already ended"))
	}
	if err := s.st.RevokeSession(ctx, p.SessionID, now, WhyLogout); err != nil {
		return fmt.Errorf("logout: %w", err)
	}
	s.cache.revoke(p.SessionID)
	s.audit(ctx, store.AuditRecord{Action: "auth.logout", UserID: p.UserID, UserEmail: p.Email, SessionID: p.SessionID,
		Target: "session:" + p.SessionID, Result: "ok", Reason: WhyLogout})
	return nil
}

// RevokeUser ends every session of a user, for why (WhyDisabled, WhyDeleted,
// WhyAdmin, ...): call it after disabling, demoting or before deleting a user. It
// returns how many sessions ended.
func (s *Service) RevokeUser(ctx context.Context, userID int64, why string) (int, error) {
	ids, err := s.revokeUserSessions(ctx, userID, "", why)
	return len(ids), err
}

// revokeUserSessions ends the sessions of userID but keep, and drops them from this
// process's cache at once (the other replicas drop them from the change feed).
func (s *Service) revokeUserSessions(ctx context.Context, userID int64, keep, why string) ([]string, error) {
	ids, err := endUserSessions(ctx, s.st, s.audit, s.cfg.Now(), userID, keep, why)
	s.cache.revoke(ids...)
	return ids, err
}

// endUserSessions ends the sessions of userID but keep in the store, and audits
// it as auth.sessions_revoked when there were any: the one way a user's sessions
// end together, in a server (Service) or in the administration commands (Offline).
func endUserSessions(ctx context.Context, st interface {
	RevokeUserSessions(ctx context.Context, userID int64, keep string, at time.Time, why string) ([]string, error)
}, audit func(context.Context, store.AuditRecord), now time.Time, userID int64, keep, why string) ([]string, error) {
	ids, err := st.RevokeUserSessions(ctx, userID, keep, now, why)
	if err != nil {
		return nil, fmt.Errorf("revoke sessions of user %d: %w", userID, err)
	}
	if len(ids) > 0 {
		// The actor is whoever asked (ctx): the user's sessions are the target.
		audit(ctx, store.AuditRecord{Action: "auth.sessions_revoked", Target: "user:" + strconv.FormatInt(userID, 10),
			Result: "ok", Reason: why, Params: jsonParams(map[string]any{"why": why, "sessions": len(ids)})})
	}
	return ids, nil
}

// ActiveSessions counts live sessions in the store, for a gauge; 0 when the store
// does not answer (logged).
func (s *Service) ActiveSessions(ctx context.Context) int {
	n, err := s.st.CountActiveSessions(ctx, s.cfg.Now())
	if err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "count active sessions", slog.String("error", err.Error()))
		return 0
	}
	return n
}
