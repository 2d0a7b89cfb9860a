package auth

import (
	"math"
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

// addressLimiter is a token bucket of login attempts per client address
// (SECURITY.md 15). The table is bounded: a full bucket is the same as no entry, so
// those go first; when every entry is in use arbitrary ones go (an attacker who can
// fill the table from that many addresses is past what a per-address limit holds).
type addressLimiter struct {
	limit rate.Limit
	burst int
	max   int

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

func newAddressLimiter(limit rate.Limit, burst, max int) *addressLimiter {
	return &addressLimiter{limit: limit, burst: burst, max: max, buckets: make(map[string]*rate.Limiter)}
}

// allow takes one attempt from addr's bucket, or says how long until one is there.
func (a *addressLimiter) allow(addr string, now time.Time) (bool, time.Duration) {
	if a.limit == rate.Inf {
		return true, 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	b, ok := a.buckets[addr]
	if !ok {
		if len(a.buckets) >= a.max { // full buckets are the same as none: they go first
			shrink(a.buckets, a.max, func(b *rate.Limiter) bool { return b.TokensAt(now) >= float64(a.burst) })
		}
		b = rate.NewLimiter(a.limit, a.burst)
		a.buckets[addr] = b
	}
	if b.AllowN(now, 1) {
		return true, 0
	}
	if a.limit <= 0 {
		return false, time.Hour
	}
	missing := 1 - b.TokensAt(now)
	return false, time.Duration(missing / float64(a.limit) * float64(time.Second))
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

// accountBackoff counts consecutive login failures per e-mail, known or not (so a
// lockout does not tell which e-mails have accounts), and locks an account for
// base·2^(n-threshold), capped, after threshold failures (SECURITY.md 15).
type accountBackoff struct {
	threshold int
	base, max time.Duration
	memory    time.Duration
	maxKeys   int

	mu    sync.Mutex
	count map[string]*failures
}

type failures struct {
	n           int
	last        time.Time
	lockedUntil time.Time
}

func newAccountBackoff(c Config) *accountBackoff {
	return &accountBackoff{threshold: c.FailuresBeforeBackoff, base: c.BackoffBase, max: c.MaxBackoff,
		memory: c.FailureMemory, maxKeys: c.MaxTracked, count: make(map[string]*failures)}
}

// lockedFor returns how long the account stays locked (0 when it is not).
func (b *accountBackoff) lockedFor(key string, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if f, ok := b.count[key]; ok && now.Before(f.lockedUntil) {
		return f.lockedUntil.Sub(now)
	}
	return 0
}

// fail records a failure and returns the consecutive count and the lockout it
// starts (0 while under the threshold).
func (b *accountBackoff) fail(key string, now time.Time) (int, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f, ok := b.count[key]
	if ok && b.stale(f, now) {
		*f = failures{}
	}
	if !ok {
		if len(b.count) >= b.maxKeys { // stale entries go first, then unlocked ones
			shrink(b.count, b.maxKeys,
				func(f *failures) bool { return b.stale(f, now) },
				func(f *failures) bool { return !now.Before(f.lockedUntil) })
		}
		f = &failures{}
		b.count[key] = f
	}
	f.n++
	f.last = now
	if f.n < b.threshold {
		return f.n, 0
	}
	d := b.max
	if shift := f.n - b.threshold; shift < 62 && b.base <= time.Duration(math.MaxInt64>>shift) {
		d = min(b.base<<shift, b.max)
	}
	f.lockedUntil = now.Add(d)
	return f.n, d
}

// reset forgets the account's failures (a successful login or a new password).
func (b *accountBackoff) reset(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.count, key)
}

func (b *accountBackoff) stale(f *failures, now time.Time) bool {
	return !now.Before(f.lockedUntil) && now.Sub(f.last) >= b.memory
}

// sweep forgets stale accounts; Run calls it now and then.
func (b *accountBackoff) sweep(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, f := range b.count {
		if b.stale(f, now) {
			delete(b.count, k)
		}
	}
}
