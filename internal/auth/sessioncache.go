package auth

import (
	"sync"
	"time"

	"github.com/vmgate/vmgate/internal/store"
)

// sessionEntry is what Authenticate needs to know of a session and its user; it
// is copied in and out of the cache, never shared.
type sessionEntry struct {
	userID    int64
	gen       int64
	expiresAt time.Time
	revoked   bool
	email     string
	nickname  string
	role      string
	disabled  bool // or deleted
	loadedAt  time.Time
	// tokenID and grants are set for an API token's entry (apitokens.go), kept in
	// the same cache under a key of the secret's hash; expiresAt is then the
	// token's. grants is nil for a token with all of its owner's grants; it is
	// shared and read-only.
	tokenID string
	grants  map[int64]string
}

func newSessionEntry(s store.Session, u store.User, now time.Time) sessionEntry {
	return sessionEntry{
		userID: s.UserID, gen: s.Generation, expiresAt: s.ExpiresAt, revoked: !s.RevokedAt.IsZero(),
		email: u.Email, nickname: u.Nickname, role: u.Role, disabled: u.Disabled || u.ID != s.UserID,
		loadedAt: now,
	}
}

// accepts reports whether a token of userID at generation gen is good for this
// session at now: only the newest generation of a live session of an enabled user.
func (e sessionEntry) accepts(now time.Time, userID, gen int64) bool {
	return !e.revoked && !e.disabled && now.Before(e.expiresAt) && e.userID == userID && e.gen == gen
}

// sessionCache maps session IDs to entries so that checking a token costs no store
// round trip in the steady state (docs/design.md §3.1).
//
// Every change made through the cache moves epoch forward. A load from the store
// notes the epoch before it reads and fills the cache only if the epoch has not
// moved meanwhile: otherwise a load that read a session just before a logout could
// put the live session back after the logout marked it revoked.
type sessionCache struct {
	max int

	mu    sync.RWMutex
	m     map[string]sessionEntry
	epoch uint64
}

func newSessionCache(max int) *sessionCache {
	return &sessionCache{max: max, m: make(map[string]sessionEntry)}
}

func (c *sessionCache) get(sid string) (sessionEntry, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.m[sid]
	return e, ok
}

// currentEpoch is read before a load from the store.
func (c *sessionCache) currentEpoch() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.epoch
}

// fill stores what a load read, unless the cache changed since epoch.
func (c *sessionCache) fill(sid string, e sessionEntry, epoch uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch == epoch {
		c.insert(sid, e)
	}
}

// put stores what this process just wrote to the store (login, refresh).
func (c *sessionCache) put(sid string, e sessionEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	c.insert(sid, e)
}

// revoke marks cached sessions revoked after this process revoked them in the store.
func (c *sessionCache) revoke(sids ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	for _, sid := range sids {
		if e, ok := c.m[sid]; ok {
			e.revoked = true
			c.m[sid] = e
		}
	}
}

// drop forgets sessions that changed elsewhere; the next use reads the store.
func (c *sessionCache) drop(sids ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	for _, sid := range sids {
		delete(c.m, sid)
	}
}

// dropUser forgets every session and API token of a user that changed (disabled,
// deleted, role or password changed, a token deleted): each entry holds a copy of
// the user. Users change rarely
// (an admin's action), so a scan is cheaper than an index kept on every login.
func (c *sessionCache) dropUser(userID int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	for sid, e := range c.m {
		if e.userID == userID {
			delete(c.m, sid)
		}
	}
}

// dropAll forgets everything, after the change feed may have lost changes.
func (c *sessionCache) dropAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	clear(c.m)
}

// sweep forgets sessions past their end: their tokens fail on the token's own
// exp (capped at the session's end) before the cache is asked.
func (c *sessionCache) sweep(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for sid, e := range c.m {
		if !now.Before(e.expiresAt) {
			delete(c.m, sid)
		}
	}
}

func (c *sessionCache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}

// insert adds e, making room first: dead sessions go before live ones. The caller
// holds c.mu.
func (c *sessionCache) insert(sid string, e sessionEntry) {
	if _, ok := c.m[sid]; !ok && len(c.m) >= c.max {
		shrink(c.m, c.max, func(old sessionEntry) bool {
			return old.revoked || old.disabled || !e.loadedAt.Before(old.expiresAt)
		})
	}
	c.m[sid] = e
}
