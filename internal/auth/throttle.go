package auth

import (
	"math"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// shrink shrinks a bounded table that is full to 15/16 of max entries, deleting
// first those the first predicate picks, then the next's, then arbitrary ones (map
// order). Evicting a batch keeps a table under constant pressure from scanning
// itself on every insert.
func shrink[K comparable, V any](m map[K]V, max int, prefer ...func(V) bool) {
	target := max - max/16 - 1
	for _, pick := range append(prefer, func(V) bool { return true }) {
		for k, v := range m {
			if len(m) <= target {
				return
			}
			if pick(v) {
				delete(m, k)
			}
		}
	}
}

// addressLimiter is a token bucket of login attempts per client network
// (docs/security.md items 15, 28). The table is bounded: a full bucket is the same as no entry, so
// those go first; when every entry is in use arbitrary ones go (an attacker who can
// fill the table from that many addresses is past what a per-address limit holds).
type addressLimiter struct {
	limit rate.Limit
	burst int
	max   int

	mu      sync.Mutex
	buckets map[string]*bucket
}

func newAddressLimiter(limit rate.Limit, burst, max int) *addressLimiter {
	return &addressLimiter{limit: limit, burst: burst, max: max, buckets: make(map[string]*bucket)}
}

// allow takes one attempt from the network's bucket, or says how long until one is
// there. giveBack returns the attempt to the bucket: a login that failed on
// vmgate's store, not on what the client sent, does not count (issue 17 (docs/history.md)).
func (a *addressLimiter) allow(network string, now time.Time) (ok bool, wait time.Duration, giveBack func(at time.Time)) {
	if a.limit == rate.Inf {
		return true, 0, func(time.Time) {}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	b, found := a.buckets[network]
	if !found {
		if len(a.buckets) >= a.max { // full buckets are the same as none: they go first
			shrink(a.buckets, a.max, func(b *bucket) bool { return b.TokensAt(now) >= float64(a.burst) })
		}
		b = newBucket(a.limit, a.burst, now)
		a.buckets[network] = b
	}
	if b.take(now) {
		return true, 0, func(at time.Time) {
			a.mu.Lock()
			defer a.mu.Unlock()
			b.giveBack(at)
		}
	}
	if a.limit <= 0 {
		return false, time.Hour, nil
	}
	missing := 1 - b.TokensAt(now)
	return false, time.Duration(missing / float64(a.limit) * float64(time.Second)), nil
}

// bucket is a token bucket that, unlike rate.Limiter, can take a token back
// after it was used. Its owner locks it.
type bucket struct {
	limit  rate.Limit // tokens a second; not rate.Inf
	burst  float64
	tokens float64
	last   time.Time // when tokens was counted
}

func newBucket(limit rate.Limit, burst int, now time.Time) *bucket {
	return &bucket{limit: limit, burst: float64(burst), tokens: float64(burst), last: now}
}

// TokensAt is how many tokens the bucket holds at now (a time before the last
// count adds none).
func (b *bucket) TokensAt(now time.Time) float64 {
	if !now.After(b.last) || b.limit <= 0 {
		return b.tokens
	}
	return min(b.burst, b.tokens+float64(b.limit)*now.Sub(b.last).Seconds())
}

func (b *bucket) advance(now time.Time) {
	b.tokens = b.TokensAt(now)
	if now.After(b.last) {
		b.last = now
	}
}

// take takes a token if the bucket holds one at now.
func (b *bucket) take(now time.Time) bool {
	b.advance(now)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// giveBack returns a token taken before.
func (b *bucket) giveBack(now time.Time) {
	b.advance(now)
	b.tokens = min(b.burst, b.tokens+1)
}

// exhausted reports, without taking anything, whether the network's bucket is
// empty, and how long until it holds one again: failed API token uses take from
// the bucket (allow), and a network whose failures emptied it is refused before
// its next token is looked at.
func (a *addressLimiter) exhausted(network string, now time.Time) (time.Duration, bool) {
	if a.limit == rate.Inf {
		return 0, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	b, ok := a.buckets[network]
	if !ok {
		return 0, false
	}
	missing := 1 - b.TokensAt(now)
	if missing <= 0 {
		return 0, false
	}
	if a.limit <= 0 {
		return time.Hour, true
	}
	return time.Duration(missing / float64(a.limit) * float64(time.Second)), true
}

// sweep forgets the full buckets; Run calls it now and then.
func (a *addressLimiter) sweep(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.dropFull(now)
}

// dropFull deletes the buckets that are full again: they are the same as no entry.
// The caller holds a.mu.
func (a *addressLimiter) dropFull(now time.Time) {
	for k, b := range a.buckets {
		if b.TokensAt(now) >= float64(a.burst) {
			delete(a.buckets, k)
		}
	}
}

// clientNetwork names the network addr belongs to, the unit of login throttling:
// the address masked to v4 bits for IPv4 (32 by default: the address itself) and to
// v6 bits for IPv6 (64: one subnet, which one customer usually holds whole, so that
// the addresses of one /64 count as one client). Something that is not an address
// (an RFC 7239 obfuscated identifier, or nothing) stands for itself.
func clientNetwork(addr string, v4, v6 int) string {
	a, err := netip.ParseAddr(addr)
	if err != nil || a.Zone() != "" {
		return addr
	}
	a = a.Unmap()
	bits := v6
	if a.Is4() {
		bits = v4
	}
	if bits >= a.BitLen() {
		return a.String()
	}
	p, _ := a.Prefix(bits)
	return p.String()
}

// Scopes of a login delay, in audit records and logs.
const (
	scopeNetwork = "network" // one account from one client network
	scopeAccount = "account" // one account from every network it has not logged in from
)

// loginThrottle slows down password guessing without handing anyone a way to lock
// an account's owner out (docs/security.md items 15, 28; OWASP's guidance on account lockout
// and device-bound throttling):
//
//   - Wrong passwords for an account from one client network delay further logins
//     for that account from that network: after threshold failures, base, doubling
//     with each further failure up to max. Other networks are not affected, so an
//     attacker on one network cannot lock the owner out on another.
//   - Over all networks together, an account may take accountLimit failures per
//     accountWindow (a leaky count) before it is blocked for accountBlock (at most
//     15 min). That ceiling holds a guesser with many networks to accountLimit
//     guesses an hour; the networks the account logged in from successfully within
//     knownFor are exempt from it, so even that guesser cannot keep the owner out of
//     the networks they use. known holds this process's; the store holds every
//     replica's, asked when a blocked login comes from a network not known here
//     (Service.knownNetwork), its no remembered in unknown until the block ends.
//
// A login refused by a delay is not verified: its password is never looked at, so
// the delay is no oracle, and the right password gets 429 like any other. Accounts
// are counted by e-mail whether they exist or not, so a delay reveals nothing. All
// three tables are bounded (maxKeys each); the successful networks are a table of
// their own so that failures cannot push them out.
type loginThrottle struct {
	threshold     int
	base, max     time.Duration
	memory        time.Duration
	accountLimit  float64
	accountWindow time.Duration
	accountBlock  time.Duration
	knownFor      time.Duration
	maxKeys       int

	mu       sync.Mutex
	pairs    map[pairKey]*pairFailures
	accounts map[string]*accountFailures
	known    map[pairKey]time.Time // until when a network counts as the account's own
	// unknown are networks the store said an account never logged in from
	// (Service.knownNetwork), until the account's block that asked ends.
	unknown map[pairKey]time.Time
}

// pairKey is an account (normalised e-mail) and a client network.
type pairKey struct{ account, network string }

// pairFailures counts one account's consecutive failures from one network.
type pairFailures struct {
	n     int
	last  time.Time // the last failure
	until time.Time // logins wait until then
}

// accountFailures is one account's failures from every network: a count that
// leaks accountLimit per accountWindow, and the block it started.
type accountFailures struct {
	level        float64
	at           time.Time // when level was last brought up to date
	blockedUntil time.Time
}

func newLoginThrottle(c Config) *loginThrottle {
	return &loginThrottle{threshold: c.FailuresBeforeBackoff, base: c.BackoffBase, max: c.MaxBackoff,
		memory: c.FailureMemory, accountLimit: float64(c.AccountFailureLimit), accountWindow: c.AccountFailureWindow,
		accountBlock: c.AccountBlock, knownFor: c.KnownNetworkMemory, maxKeys: c.MaxTracked,
		pairs: make(map[pairKey]*pairFailures), accounts: make(map[string]*accountFailures),
		known: make(map[pairKey]time.Time), unknown: make(map[pairKey]time.Time)}
}

// wait returns how long a login for account from network must wait, and whether
// the delay is the pair's or the account's (0 and "" when it may go ahead).
func (t *loginThrottle) wait(account, network string, now time.Time) (time.Duration, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := pairKey{account, network}
	if p, ok := t.pairs[k]; ok && now.Before(p.until) {
		return p.until.Sub(now), scopeNetwork
	}
	if a, ok := t.accounts[account]; ok && now.Before(a.blockedUntil) && !now.Before(t.known[k]) {
		return a.blockedUntil.Sub(now), scopeAccount
	}
	return 0, ""
}

// fail records a wrong password and returns the pair's consecutive count, the
// delay it starts for the pair (0 while under the threshold) and the block it
// starts for the account on every network but its own (0 unless it starts now).
func (t *loginThrottle) fail(account, network string, now time.Time) (n int, delay, block time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := pairKey{account, network}
	p, ok := t.pairs[k]
	if ok && t.pairStale(p, now) {
		*p = pairFailures{}
	}
	if !ok {
		if len(t.pairs) >= t.maxKeys {
			shrink(t.pairs, t.maxKeys,
				func(p *pairFailures) bool { return t.pairStale(p, now) },
				func(p *pairFailures) bool { return !now.Before(p.until) })
		}
		p = &pairFailures{}
		t.pairs[k] = p
	}
	p.n++
	p.last = now
	if p.n >= t.threshold {
		delay = t.max
		if shift := p.n - t.threshold; shift < 62 && t.base <= time.Duration(math.MaxInt64>>shift) {
			delay = min(t.base<<shift, t.max)
		}
		p.until = now.Add(delay)
	}
	a := t.account(account, now)
	a.level++
	if a.level >= t.accountLimit && !now.Before(a.blockedUntil) {
		block = t.accountBlock
		a.blockedUntil = now.Add(block)
	}
	return p.n, delay, block
}

// account returns account's failures from every network, leaked up to now. The
// caller holds t.mu.
func (t *loginThrottle) account(account string, now time.Time) *accountFailures {
	a, ok := t.accounts[account]
	if !ok {
		if len(t.accounts) >= t.maxKeys {
			shrink(t.accounts, t.maxKeys,
				func(a *accountFailures) bool { return t.accountStale(a, now) },
				func(a *accountFailures) bool { return !now.Before(a.blockedUntil) })
		}
		a = &accountFailures{at: now}
		t.accounts[account] = a
	}
	a.level = t.leaked(a, now)
	a.at = now
	return a
}

// leaked is a's level at now.
func (t *loginThrottle) leaked(a *accountFailures, now time.Time) float64 {
	if t.accountWindow <= 0 {
		return 0
	}
	drained := now.Sub(a.at).Seconds() / t.accountWindow.Seconds() * t.accountLimit
	return max(0, a.level-drained)
}

// succeeded forgets the pair's failures and remembers the network as the
// account's own. The account's count is left to leak: the owner logging in must
// not hand a guesser on other networks a fresh allowance.
func (t *loginThrottle) succeeded(account, network string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := pairKey{account, network}
	delete(t.pairs, k)
	delete(t.unknown, k)
	if _, ok := t.known[k]; !ok && len(t.known) >= t.maxKeys {
		shrink(t.known, t.maxKeys, func(until time.Time) bool { return !now.Before(until) })
	}
	t.known[k] = now.Add(t.knownFor)
}

// noteKnown remembers network as the account's own until until (the store said
// the account logged in from it).
func (t *loginThrottle) noteKnown(account, network string, now, until time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := pairKey{account, network}
	delete(t.unknown, k)
	if _, ok := t.known[k]; !ok && len(t.known) >= t.maxKeys {
		shrink(t.known, t.maxKeys, func(u time.Time) bool { return !now.Before(u) })
	}
	if until.After(t.known[k]) {
		t.known[k] = until
	}
}

// checkedUnknown reports whether the store said, during the account's block in
// force, that the account never logged in from network.
func (t *loginThrottle) checkedUnknown(account, network string, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	until, ok := t.unknown[pairKey{account, network}]
	return ok && now.Before(until)
}

// markUnknown remembers the store's no for network until until (the block's end).
// The table is bounded like the others; a full one drops what has run out first.
func (t *loginThrottle) markUnknown(account, network string, now, until time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := pairKey{account, network}
	if _, ok := t.unknown[k]; !ok && len(t.unknown) >= t.maxKeys {
		shrink(t.unknown, t.maxKeys, func(u time.Time) bool { return !now.Before(u) })
	}
	t.unknown[k] = until
}

// reset forgets every failure of account, on every network (a new password makes
// the old guesses moot). The networks it is known on stay known.
func (t *loginThrottle) reset(account string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.accounts, account)
	for k := range t.pairs {
		if k.account == account {
			delete(t.pairs, k)
		}
	}
}

func (t *loginThrottle) pairStale(p *pairFailures, now time.Time) bool {
	return !now.Before(p.until) && now.Sub(p.last) >= t.memory
}

func (t *loginThrottle) accountStale(a *accountFailures, now time.Time) bool {
	return !now.Before(a.blockedUntil) && t.leaked(a, now) == 0
}

// sweep forgets what no longer matters; Run calls it now and then.
func (t *loginThrottle) sweep(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, p := range t.pairs {
		if t.pairStale(p, now) {
			delete(t.pairs, k)
		}
	}
	for k, a := range t.accounts {
		if t.accountStale(a, now) {
			delete(t.accounts, k)
		}
	}
	for k, until := range t.known {
		if !now.Before(until) {
			delete(t.known, k)
		}
	}
	for k, until := range t.unknown {
		if !now.Before(until) {
			delete(t.unknown, k)
		}
	}
}

// sizes returns the number of entries of each table, for tests.
func (t *loginThrottle) sizes() (pairs, accounts, known, unknown int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pairs), len(t.accounts), len(t.known), len(t.unknown)
}
