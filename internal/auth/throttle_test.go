package auth

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// loginFrom logs in from addr and returns the error.
func (e *env) loginFrom(email, password, addr string) error {
	_, _, err := e.s.Login(context.Background(), email, password, addr)
	return err
}

// docs/security.md item 28: client networks are the address for IPv4 and the /64 for IPv6,
// both configurable; what is no address stands for itself.
func TestClientNetwork(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		addr   string
		v4, v6 int
		want   string
	}{
		{"192.0.2.7", 32, 64, "192.0.2.7"},
		{"192.0.2.7", 24, 64, "192.0.2.0/24"},
		{"::ffff:192.0.2.7", 32, 64, "192.0.2.7"},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", 32, 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2::1", 32, 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2::1", 32, 48, "2001:db8:1::/48"},
		{"2001:db8:1:2::1", 32, 128, "2001:db8:1:2::1"},
		{"_hidden-proxy.client", 32, 64, "_hidden-proxy.client"},
		{"", 32, 64, ""},
		{"fe80::1%eth0", 32, 64, "fe80::1%eth0"},
	} {
		if got := clientNetwork(c.addr, c.v4, c.v6); got != c.want {
			t.Errorf("clientNetwork(%q, %d, %d) = %q, want %q", c.addr, c.v4, c.v6, got, c.want)
		}
	}
}

// docs/security.md items 15, 28: after 5 consecutive wrong passwords for an account from one
// client network, that account's logins from that network wait 1 s, doubling with
// each further failure up to 15 min. A delayed login is not verified: the right
// password gets 429 too. Other networks are not delayed at all. Unknown e-mails
// are treated the same, so a delay does not reveal an account either.
func TestLoginBackoff(t *testing.T) {
	t.Parallel()
	for _, email := range []string{"alice@example.com", "nobody@example.com"} {
		t.Run(email, func(t *testing.T) {
			t.Parallel()
			var out outcomes
			var hashes int
			e := newEnv(t, func(c *Config) { c.LoginOutcome = out.add })
			e.createUser("alice@example.com", alicePassword, store.RoleUser)
			e.s.kdf = func(pw, salt []byte, p Params) []byte { hashes++; return Argon2ID(pw, salt, p) }
			try := func(pw string) error { return e.loginFrom(email, pw, "192.0.2.1") }
			for range 4 {
				wantCredentialsError(t, try("wrong password!"))
			}
			want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 900, 900}
			for _, delay := range want {
				delay *= time.Second
				wantCredentialsError(t, try("wrong password!")) // failure 5+i starts the delay
				before := hashes
				wantClientError(t, try(alicePassword), errThrottled(delay))
				e.clock.Advance(delay - time.Millisecond)
				wantClientError(t, try(alicePassword), errThrottled(time.Millisecond))
				if hashes != before {
					t.Fatalf("a delayed login was verified (%d hashes)", hashes-before)
				}
				if email == "alice@example.com" { // the neighbour 192.0.2.2 is not delayed at all
					if err := e.loginFrom(email, alicePassword, "192.0.2.2"); err != nil {
						t.Fatalf("from another network: %v", err)
					}
				}
				e.clock.Advance(time.Millisecond)
			}
			if n := out.count(OutcomeLocked); n != 2*len(want) {
				t.Fatalf("%d locked outcomes", n)
			}
			recs := e.audit.actions("auth.lockout")
			if len(recs) != len(want) {
				t.Fatalf("%d lockout audit records", len(recs))
			}
			var p struct {
				Scope, Network string
				Failures       int
				Seconds        float64
			}
			if err := json.Unmarshal([]byte(recs[0].Params), &p); err != nil || p.Scope != "network" ||
				p.Network != "192.0.2.1" || p.Failures != 5 || p.Seconds != 1 || recs[0].Address != "192.0.2.1" {
				t.Fatalf("lockout record %+v: %+v %v", recs[0], p, err)
			}
			if email != "alice@example.com" {
				return
			}
			wantCredentialsError(t, try(alicePassword+"?")) // the delay is over: one more failure...
			wantClientError(t, try(alicePassword), errThrottled(900*time.Second))
			e.clock.Advance(900 * time.Second)
			if err := try(alicePassword); err != nil { // ...and success resets the pair
				t.Fatal(err)
			}
			for range 4 {
				wantCredentialsError(t, try("wrong password!"))
			}
		})
	}
}

// docs/security.md item 28, as issue 9 (docs/history.md) states it: after 200 wrong passwords for the admin
// from 127.0.0.2, the right password from 127.0.0.3 gets a token at once — whether
// the attacker hammers without waiting (so most attempts are refused unverified)
// or waits out every delay (so all 200 are verified wrong passwords).
func TestLoginCrossNetworkLockout(t *testing.T) {
	t.Parallel()
	for _, waits := range []bool{false, true} {
		t.Run(fmt.Sprintf("attacker waits out delays=%v", waits), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, func(c *Config) { c.PerAddressRate, c.PerAddressBurst = rate.Every(6*time.Second), 10 })
			e.createUser("admin@example.com", alicePassword, store.RoleAdmin)
			wrong := 0
			for range 200 {
				err := e.loginFrom("admin@example.com", "a wrong guess!!", "127.0.0.2")
				for tries := 0; waits && errs.KindOf(err) == errs.RateLimited && tries < 10; tries++ {
					ee, _ := errs.As(err)
					e.clock.Advance(time.Duration(ee.RetryAfter) * time.Second)
					err = e.loginFrom("admin@example.com", "a wrong guess!!", "127.0.0.2")
				}
				if errs.KindOf(err) == errs.Unauthenticated {
					wrong++
				}
			}
			if waits && wrong != 200 {
				t.Fatalf("only %d of 200 wrong passwords were verified", wrong)
			}
			if _, _, err := e.s.Login(context.Background(), "admin@example.com", alicePassword, "127.0.0.3"); err != nil {
				t.Fatalf("the owner on another network after %d verified wrong passwords: %v", wrong, err)
			}
			err := e.loginFrom("admin@example.com", alicePassword, "127.0.0.2")
			wantKind(t, err, errs.RateLimited) // the attacker's network is still delayed
		})
	}
}

// docs/security.md item 28: over all networks, 100 failures an hour block the account for
// 15 min on every network it has not logged in from, never longer; a network it
// logged in from stays open; IPv6 addresses of one /64 count as one network.
func TestLoginAccountCeiling(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.createUser("admin@example.com", alicePassword, store.RoleAdmin)
	if err := e.loginFrom("admin@example.com", alicePassword, "2001:db8:0:1::10"); err != nil {
		t.Fatal(err) // the owner's own network: 2001:db8:0:1::/64
	}
	guess := func(i int) error {
		return e.loginFrom("admin@example.com", "a wrong guess!!", fmt.Sprintf("2001:db8:%x::1", 0x100+i))
	}
	for i := range 99 { // 99 networks, one guess each: no network reaches its own threshold
		wantCredentialsError(t, guess(i))
	}
	if err := e.loginFrom("admin@example.com", alicePassword, "198.51.100.1"); err != nil {
		t.Fatalf("before the ceiling: %v", err)
	}
	wantCredentialsError(t, guess(99)) // the 100th failure in the hour starts the block
	wantClientError(t, e.loginFrom("admin@example.com", alicePassword, "203.0.113.9"), errThrottled(MaxAccountBlock))
	wantClientError(t, guess(100), errThrottled(MaxAccountBlock))
	for _, own := range []string{"2001:db8:0:1::10", "2001:db8:0:1:ffff::1", "198.51.100.1"} {
		if err := e.loginFrom("admin@example.com", alicePassword, own); err != nil {
			t.Fatalf("from %s, where the owner logged in before: %v", own, err)
		}
	}
	recs := e.audit.actions("auth.lockout")
	if len(recs) != 1 || recs[0].Params == "" || !json.Valid([]byte(recs[0].Params)) {
		t.Fatalf("lockout records %+v", recs)
	}
	var p struct{ Scope, Network string }
	json.Unmarshal([]byte(recs[0].Params), &p)
	if p.Scope != "account" || p.Network != "2001:db8:163::/64" {
		t.Fatalf("account lockout record %+v", recs[0])
	}
	e.clock.Advance(MaxAccountBlock)
	if err := e.loginFrom("admin@example.com", alicePassword, "203.0.113.9"); err != nil {
		t.Fatalf("after 15 min: %v", err)
	}
	// The count leaks at 100 an hour: after 15 min, 25 more failures block again,
	// for 15 min again, never longer.
	for i := range 24 {
		wantCredentialsError(t, guess(200+i))
	}
	wantCredentialsError(t, guess(224))
	wantClientError(t, guess(225), errThrottled(MaxAccountBlock))
	e.clock.Advance(MaxAccountBlock - time.Second)
	wantClientError(t, guess(226), errThrottled(time.Second))
	e.clock.Advance(time.Second)
	wantCredentialsError(t, guess(227))
}

// docs/security.md item 28: the networks an account logged in from are its own on every
// replica and after a restart — the store remembers them (NoteLoginNetwork) — for
// KnownNetworkMemory (30 days): a guesser who drives the account past its ceiling
// through one replica cannot keep the owner out, on that replica, of a network the
// owner logged in from through another, or before the replica restarted. A
// network not the owner's stays blocked and costs one store read per block. A
// store that cannot answer exempts nobody.
func TestKnownNetworksAreSharedAndSurviveRestarts(t *testing.T) {
	t.Parallel()
	st, clock := newFakeStore(), newTestClock()
	replica := func() *env {
		return newEnvOn(t, st, clock, func(c *Config) { c.AccountFailureLimit = 5 })
	}
	a, b := replica(), replica()
	a.createUser("admin@example.com", alicePassword, store.RoleAdmin)
	for _, own := range []string{"192.0.2.10", "2001:db8:0:1::10"} {
		if err := a.loginFrom("admin@example.com", alicePassword, own); err != nil {
			t.Fatal(err)
		}
	}
	guesses := 0
	block := func(e *env) { // five wrong guesses from five networks: the account's ceiling
		t.Helper()
		for range 5 {
			guesses++
			wantCredentialsError(t, e.loginFrom("admin@example.com", "a wrong guess!!", fmt.Sprintf("198.51.100.%d", guesses)))
		}
		wantKind(t, e.loginFrom("admin@example.com", alicePassword, "203.0.113.9"), errs.RateLimited)
	}

	block(b)
	for _, own := range []string{"192.0.2.10", "2001:db8:0:1:ffff::1"} { // the address, and another of the /64
		if err := b.loginFrom("admin@example.com", alicePassword, own); err != nil {
			t.Fatalf("on the other replica, from %s where the owner logged in through the first: %v", own, err)
		}
	}
	reads := st.networkReads.Load()
	for range 3 {
		wantKind(t, b.loginFrom("admin@example.com", alicePassword, "203.0.113.9"), errs.RateLimited)
	}
	if n := st.networkReads.Load() - reads; n != 0 {
		t.Fatalf("a blocked network read the store %d more times during one block", n)
	}

	c := replica() // a restart: nothing in memory
	block(c)
	if err := c.loginFrom("admin@example.com", alicePassword, "192.0.2.10"); err != nil {
		t.Fatalf("after a restart, from the owner's network: %v", err)
	}

	clock.Advance(29 * 24 * time.Hour) // the last logins from both networks were 29 days ago
	d := replica()
	block(d)
	if err := d.loginFrom("admin@example.com", alicePassword, "2001:db8:0:1::99"); err != nil {
		t.Fatalf("29 days after the owner's login from there: %v", err)
	}
	clock.Advance(2 * 24 * time.Hour)
	e := replica()
	block(e)
	wantKind(t, e.loginFrom("admin@example.com", alicePassword, "192.0.2.10"), errs.RateLimited) // its last login: 31 days ago
	if err := e.loginFrom("admin@example.com", alicePassword, "2001:db8:0:1::99"); err != nil {
		t.Fatalf("2 days after the owner's login from there: %v", err)
	}

	f := replica()
	block(f)
	st.down.Store(true)
	wantKind(t, f.loginFrom("admin@example.com", alicePassword, "2001:db8:0:1::99"), errs.RateLimited)
	st.down.Store(false)
}

// A quiet (account, network) forgets its failures after FailureMemory.
func TestLoginBackoffForgets(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	try := func() error { return e.loginFrom("nobody@example.com", "wrong password!", "192.0.2.1") }
	for range 5 {
		wantCredentialsError(t, try())
	}
	wantKind(t, try(), errs.RateLimited)
	e.clock.Advance(24 * time.Hour)
	for range 4 {
		wantCredentialsError(t, try())
	}
}

// docs/security.md items 15, 28: a token bucket per client network (10 a minute, burst 10);
// the addresses of an IPv6 /64 share one.
func TestLoginPerAddressLimit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, first, sameNet, otherNet string }{
		{"IPv4", "203.0.113.1", "203.0.113.1", "203.0.113.2"},
		{"IPv6", "2001:db8:5:6::1", "2001:db8:5:6:ffff:ffff:ffff:ffff", "2001:db8:5:7::1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var out outcomes
			e := newEnv(t, func(cfg *Config) {
				cfg.PerAddressRate, cfg.PerAddressBurst = rate.Every(6*time.Second), 10
				cfg.LoginOutcome = out.add
			})
			e.createUser("alice@example.com", alicePassword, store.RoleUser)
			try := func(addr string, i int) error {
				// a different unknown e-mail each time, so no backoff starts
				return e.loginFrom(fmt.Sprintf("u%d@example.com", i), "wrong password!", addr)
			}
			for i := range 10 {
				wantCredentialsError(t, try(c.first, i))
			}
			wantClientError(t, try(c.sameNet, 10), errThrottled(6*time.Second))
			wantKind(t, e.loginFrom("alice@example.com", alicePassword, c.sameNet), errs.RateLimited) // the right password too
			wantCredentialsError(t, try(c.otherNet, 11))
			e.clock.Advance(6 * time.Second)
			if err := e.loginFrom("alice@example.com", alicePassword, c.first); err != nil {
				t.Fatalf("a token came back after 6 s: %v", err)
			}
			wantKind(t, try(c.sameNet, 12), errs.RateLimited)
			if n := out.count(OutcomeRateLimited); n != 3 {
				t.Fatalf("outcomes %v", out.seen)
			}
		})
	}
}

// The address table is bounded and keeps the buckets that are in use.
func TestAddressLimiterBounded(t *testing.T) {
	t.Parallel()
	a := newAddressLimiter(rate.Every(time.Minute), 1, 64)
	now := time.Now()
	for i := range 1000 {
		a.allow(string(rune(0x4e00+i)), now)
		if len(a.buckets) > 64 {
			t.Fatalf("%d buckets", len(a.buckets))
		}
	}
	later := now.Add(time.Hour)
	a.sweep(later)
	if len(a.buckets) != 0 {
		t.Fatalf("%d full buckets kept", len(a.buckets))
	}
}

// docs/security.md item 28: an attacker with many addresses cannot grow the throttling
// tables beyond MaxTracked entries each, and what is in force is kept: a running
// account block survives a flood of other accounts' failures, and the networks an
// account logged in from cannot be pushed out by failures at all.
func TestLoginThrottleTablesBounded(t *testing.T) {
	t.Parallel()
	const max = 32
	e := newEnv(t, func(c *Config) { c.MaxTracked, c.AccountFailureLimit = max, 3 })
	e.createUser("admin@example.com", alicePassword, store.RoleAdmin)
	if err := e.loginFrom("admin@example.com", alicePassword, "192.0.2.200"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // blocks the admin on other networks
		wantCredentialsError(t, e.loginFrom("admin@example.com", "a wrong guess!!", fmt.Sprintf("198.51.100.%d", i)))
	}
	for i := range 500 {
		e.loginFrom(fmt.Sprintf("u%d@example.com", i), "a wrong guess!!", fmt.Sprintf("2001:db8:%x::1", i))
		if pairs, accounts, known, _ := e.s.throttle.sizes(); pairs > max || accounts > max || known > max {
			t.Fatalf("after %d failures: %d pairs, %d accounts, %d known networks; at most %d each", i+1, pairs, accounts, known, max)
		}
	}
	for i := range 500 { // the blocked admin from many networks: each asks the store once, remembered, bounded
		wantKind(t, e.loginFrom("admin@example.com", alicePassword, fmt.Sprintf("2001:db8:f:%x::1", i)), errs.RateLimited)
		if _, _, _, unknown := e.s.throttle.sizes(); unknown > max {
			t.Fatalf("after %d blocked logins: %d networks known not to be the account's", i+1, unknown)
		}
	}
	wantKind(t, e.loginFrom("admin@example.com", alicePassword, "203.0.113.1"), errs.RateLimited)
	if err := e.loginFrom("admin@example.com", alicePassword, "192.0.2.200"); err != nil {
		t.Fatalf("the owner's network was pushed out: %v", err)
	}
	for i := range 500 { // logins that succeed fill the known table, bounded too
		e.s.throttle.succeeded(fmt.Sprintf("u%d@example.com", i), "203.0.113.7", e.clock.Now())
	}
	if _, _, known, _ := e.s.throttle.sizes(); known > max {
		t.Fatalf("%d known networks", known)
	}
	e.clock.Advance(31 * 24 * time.Hour)
	e.s.throttle.sweep(e.clock.Now())
	if pairs, accounts, known, unknown := e.s.throttle.sizes(); pairs+accounts+known+unknown != 0 {
		t.Fatalf("after a quiet month: %d pairs, %d accounts, %d known, %d unknown", pairs, accounts, known, unknown)
	}
}

// A wrong current password at ChangePassword counts like a failed login from the
// request's client network (the address its context carries).
func TestChangePasswordBackoff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.createUser("alice@example.com", alicePassword, store.RoleUser)
	p := e.authOK(e.login("alice@example.com", alicePassword).Raw)
	ctx := audit.WithRequest(context.Background(), "192.0.2.50", "req-1", "test")
	for range 5 {
		wantKind(t, e.s.ChangePassword(ctx, p, "guess guess guess", "a brand new passphrase"), errs.Forbidden)
	}
	wantKind(t, e.s.ChangePassword(ctx, p, alicePassword, "a brand new passphrase"), errs.RateLimited)
	wantKind(t, e.loginFrom("alice@example.com", alicePassword, "192.0.2.50"), errs.RateLimited)
	if err := e.loginFrom("alice@example.com", alicePassword, "192.0.2.51"); err != nil {
		t.Fatalf("another network: %v", err)
	}
	if recs := e.audit.actions("auth.lockout"); len(recs) != 1 || recs[0].Address != "192.0.2.50" {
		t.Fatalf("lockout not audited with the address: %+v", recs)
	}
}

// TestLockedTellsDelayFromThrottle: a login refused during the delay after wrong
// passwords is Locked, one refused by the network's bucket is not; the client sees
// the same answer for both (the web UI says which).
func TestLockedTellsDelayFromThrottle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.PerAddressRate, c.PerAddressBurst = rate.Every(time.Hour), 7 })
	e.createUser("alice@example.com", alicePassword, store.RoleUser)
	for range 5 {
		wantCredentialsError(t, e.loginFrom("alice@example.com", "wrong password!", "192.0.2.1"))
	}
	delayed := e.loginFrom("alice@example.com", alicePassword, "192.0.2.1")
	wantClientError(t, delayed, errThrottled(time.Second))
	if !Locked(delayed) {
		t.Fatalf("a delayed login is not Locked: %v", delayed)
	}
	wantCredentialsError(t, e.loginFrom("bob@example.com", "wrong password!", "192.0.2.1"))
	bucket := e.loginFrom("carol@example.com", "wrong password!", "192.0.2.1")
	wantKind(t, bucket, errs.RateLimited)
	if Locked(bucket) {
		t.Fatalf("a login refused by the network's bucket is Locked: %v", bucket)
	}
}

// TestLoginFailedOnTheStoreIsNotCounted: logins that fail because vmgate's
// store does not answer give their attempt back to the network's bucket: after
// more of them than the burst, the network's next login, once the store is
// back, is verified and succeeds (no 429), on the same clock instant; the
// bucket still refuses the attempt past the burst that the client did spend.
func TestLoginFailedOnTheStoreIsNotCounted(t *testing.T) {
	t.Parallel()
	const burst = 3
	e := newEnv(t, func(c *Config) { c.PerAddressRate, c.PerAddressBurst = rate.Every(time.Hour), burst })
	e.createUser("ann@example.com", alicePassword, store.RoleUser)
	e.st.down.Store(true)
	for i := range 2 * burst {
		err := e.loginFrom("ann@example.com", alicePassword, "192.0.2.9")
		if e, ok := errs.As(err); !ok || e.Kind != errs.Unavailable {
			t.Fatalf("login %d with the store down: %v, want it unavailable", i, err)
		}
	}
	e.st.down.Store(false)
	for i := range burst {
		if err := e.loginFrom("ann@example.com", alicePassword, "192.0.2.9"); err != nil {
			t.Fatalf("login %d of the burst after the store came back: %v", i, err)
		}
	}
	wantKind(t, e.loginFrom("ann@example.com", alicePassword, "192.0.2.9"), errs.RateLimited)
}
