package auth

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// Authenticate returns the caller a token stands for. The token must pass every
// check of its own (verify) and be the newest generation of a live session of an
// enabled user. The session check is answered from the in-process cache; a miss
// reads the store once however many requests are waiting for it. Every failure is
// the same 401 "invalid or expired token".
func (s *Service) Authenticate(ctx context.Context, raw string) (Principal, error) {
	if IsAPIToken(raw) {
		return s.authenticateAPIToken(ctx, raw)
	}
	v, err := s.verifyLearning(ctx, raw)
	if err != nil {
		return Principal{}, err
	}
	e, err := s.session(ctx, v.sid, v.gen)
	if err != nil {
		return Principal{}, err
	}
	now := s.cfg.Now()
	if !e.accepts(now, v.userID, v.gen) {
		return Principal{}, errToken(errors.New("session revoked, expired or rotated"))
	}
	s.seen.note(v.sid, now, "")
	return Principal{UserID: e.userID, Email: e.email, Nickname: e.nickname, Role: e.role,
		SessionID: v.sid, Generation: v.gen, TokenID: v.jti, ExpiresAt: v.exp}, nil
}

// session returns what is known of session sid, reading the store when the cache
// has nothing, something old, or an older generation than the token's (the session
// was refreshed on another replica).
func (s *Service) session(ctx context.Context, sid string, gen int64) (sessionEntry, error) {
	cached := func() (sessionEntry, bool) {
		e, ok := s.cache.get(sid)
		return e, ok && gen <= e.gen && s.cfg.Now().Sub(e.loadedAt) < s.cfg.SessionRecheck
	}
	return s.cachedLoad(ctx, sid, cached, "read session", func(ctx context.Context) (sessionEntry, error) {
		return s.readSession(ctx, sid)
	})
}

// cachedLoad returns the cache's entry under key while cached says it serves, and
// otherwise reads it with read and fills the cache. Loads are shared per key and
// cache epoch: a request that comes after a change never takes the answer of a
// read that started before it. The read outlives a caller that gives up (ctx
// ends): the others waiting for it still get its answer. what names the read in
// the error of a caller that gave up.
func (s *Service) cachedLoad(ctx context.Context, key string, cached func() (sessionEntry, bool), what string,
	read func(context.Context) (sessionEntry, error)) (sessionEntry, error) {
	if e, ok := cached(); ok {
		return e, nil
	}
	epoch := s.cache.currentEpoch()
	ch := s.loads.DoChan(key+"\x00"+strconv.FormatUint(epoch, 10), func() (any, error) {
		// A request that missed the cache just before another load filled it
		// gets here after that load ended: the cache has the answer now.
		if e, ok := cached(); ok {
			return e, nil
		}
		e, err := read(context.WithoutCancel(ctx))
		if err == nil {
			s.cache.fill(key, e, epoch)
		}
		return e, err
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return sessionEntry{}, r.Err
		}
		return r.Val.(sessionEntry), nil
	case <-ctx.Done():
		return sessionEntry{}, fmt.Errorf("%s: %w", what, ctx.Err())
	}
}

func (s *Service) readSession(ctx context.Context, sid string) (sessionEntry, error) {
	now := s.cfg.Now()
	sess, err := s.st.SessionByID(ctx, sid)
	if errs.Is(err, errs.NotFound) {
		return sessionEntry{}, errToken(err)
	}
	if err != nil {
		return sessionEntry{}, fmt.Errorf("read session: %w", err)
	}
	u, err := s.st.UserByID(ctx, sess.UserID)
	if errs.Is(err, errs.NotFound) {
		u = store.User{} // deleted: newSessionEntry marks it disabled
	} else if err != nil {
		return sessionEntry{}, fmt.Errorf("read session user: %w", err)
	}
	return newSessionEntry(sess, u, now), nil
}
