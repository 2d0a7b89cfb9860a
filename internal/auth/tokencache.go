package auth

import (
	"strings"
	"sync"
	"time"
)

// maxVerifiedTokens bounds the verified-token cache: a few megabytes at most (a
// token is about 400 bytes). Past it the cache starts over.
const maxVerifiedTokens = 10_000

// tokenCache remembers the tokens that passed every check of verify, by their
// exact text, so that the next request with the same token skips the base64,
// the JSON and the HMAC (most of what Authenticate cost). It is safe because
// the key is the whole token: a token that differs in any byte — a tampered
// claim, a signature re-encoded to the same bytes (docs/security.md item 1) — misses and
// is verified in full; and what a hit returns is only what the token says. What
// can change about a token that verified is checked again on every hit: its exp
// against the clock, and its kid against the keyring (a key retired or gone
// fails the hit and the token is verified, and refused, in full). Revocation is
// not the token's business: the session check after it answers from the session
// cache, which the change feed keeps true (docs/security.md item 5). Only tokens that
// verified are kept, so a flood of forged ones cannot fill it.
type tokenCache struct {
	mu sync.RWMutex
	m  map[string]verifiedToken
}

type verifiedToken struct {
	v   verified
	kid string
}

func newTokenCache() *tokenCache { return &tokenCache{m: map[string]verifiedToken{}} }

func (c *tokenCache) get(raw string) (verifiedToken, bool) {
	c.mu.RLock()
	t, ok := c.m[raw]
	c.mu.RUnlock()
	return t, ok
}

func (c *tokenCache) put(raw string, t verifiedToken) {
	raw = strings.Clone(raw) // not the request's header buffer
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxVerifiedTokens {
		clear(c.m)
	}
	c.m[raw] = t
}

// sweep forgets tokens past their exp.
func (c *tokenCache) sweep(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for raw, t := range c.m {
		if !now.Before(t.v.exp) {
			delete(c.m, raw)
		}
	}
}

func (c *tokenCache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}
