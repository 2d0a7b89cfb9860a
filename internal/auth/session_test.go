package auth

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// docs/security.md item 6: login makes a new session; refresh returns generation+1 in the
// same session, and the old token fails at once, at Authenticate and at Refresh.
func TestRefreshRotatesAndOldTokenFailsAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.createUser("alice@example.com", alicePassword, "user")
	t0 := e.login("alice@example.com", alicePassword)
	again := e.login("alice@example.com", alicePassword)
	if t0.SessionID == again.SessionID || t0.Generation != 0 || again.Generation != 0 {
		t.Fatalf("logins share a session or start past gen 0: %+v %+v", t0, again)
	}
	e.clock.Advance(10 * time.Minute)
	t1, err := e.refresh(t0.Raw)
	if err != nil {
		t.Fatal(err)
	}
	if t1.SessionID != t0.SessionID || t1.Generation != 1 || t1.Raw == t0.Raw {
		t.Fatalf("refresh gave %+v", t1)
	}
	if want := e.clock.Now().Add(time.Hour); !t1.ExpiresAt.Equal(want) {
		t.Fatalf("refreshed token expires %v, want %v", t1.ExpiresAt, want)
	}
	e.authFails(t0.Raw)
	_, err = e.refresh(t0.Raw) // within the grace: refused, session kept
	wantTokenError(t, err)
	p := e.authOK(t1.Raw)
	if p.Generation != 1 || p.SessionID != t0.SessionID || p.Email != "alice@example.com" {
		t.Fatalf("principal %+v", p)
	}
	e.authOK(again.Raw)
}

// docs/security.md item 7: the chain T0→T1→T2 within one second, then T0 replayed at refresh:
// the whole session is revoked (T2 dies too) and an audit record says so.
func TestReplayOfRotatedTokenRevokesSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.createUser("alice@example.com", alicePassword, "user")
	t0 := e.login("alice@example.com", alicePassword)
	e.clock.Advance(300 * time.Millisecond)
	t1, err := e.refresh(t0.Raw)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(300 * time.Millisecond)
	t2, err := e.refresh(t1.Raw)
	if err != nil {
		t.Fatal(err)
	}
	e.authOK(t2.Raw)
	e.clock.Advance(300 * time.Millisecond)

	_, err = e.s.Refresh(context.Background(), t0.Raw, "198.51.100.7")
	wantTokenError(t, err)
	if s := e.st.session(t0.SessionID); s.RevokedAt.IsZero() || s.RevokedWhy != WhyReuse {
		t.Fatalf("session not revoked for reuse: %+v", s)
	}
	e.authFails(t2.Raw)
	_, err = e.refresh(t2.Raw)
	wantTokenError(t, err)
	recs := e.audit.actions("auth.token_reuse")
	if len(recs) != 1 || recs[0].SessionID != t0.SessionID || recs[0].UserID != 1 ||
		recs[0].Address != "198.51.100.7" || recs[0].Result != "revoked" {
		t.Fatalf("audit records %+v", recs)
	}
}

// docs/security.md item 7, the web UI's path: CheckReuse is Refresh's rule for a token
// Authenticate refused (the UI asks it about every refused cookie). A rotated
// token past the grace revokes the session and is audited as at Refresh (with
// via "ui"); the generation just rotated within the grace, the newest
// generation, an ended session, an API token and anything that is not a token
// of ours change nothing.
func TestCheckReuseIsRefreshsRule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := []struct {
		name        string
		present     func(e *env) Token // the token shown (Raw), after whatever happened to its session
		wantRevoked bool
	}{
		{"rotated, past the grace", func(e *env) Token {
			t0 := e.login("alice@example.com", alicePassword)
			e.refresh(t0.Raw)
			e.clock.Advance(3 * time.Second)
			return t0
		}, true},
		{"rotated twice, within a second", func(e *env) Token {
			t0 := e.login("alice@example.com", alicePassword)
			t1, _ := e.refresh(t0.Raw)
			e.refresh(t1.Raw)
			return t0
		}, true},
		{"just rotated, within the grace", func(e *env) Token {
			t0 := e.login("alice@example.com", alicePassword)
			e.refresh(t0.Raw)
			e.clock.Advance(time.Second)
			return t0
		}, false},
		{"the newest, of a session logged out", func(e *env) Token {
			t0 := e.login("alice@example.com", alicePassword)
			e.s.Logout(ctx, e.authOK(t0.Raw))
			return t0
		}, false},
		{"rotated, of a session logged out", func(e *env) Token {
			t0 := e.login("alice@example.com", alicePassword)
			t1, _ := e.refresh(t0.Raw)
			e.s.Logout(ctx, e.authOK(t1.Raw))
			e.clock.Advance(3 * time.Second)
			return t0
		}, false},
		{"expired", func(e *env) Token {
			t0 := e.login("alice@example.com", alicePassword)
			e.refresh(t0.Raw)
			e.clock.Advance(2 * time.Hour)
			return t0
		}, false},
		{"an API token", func(e *env) Token {
			return Token{Raw: e.createToken(1, NewAPIToken{Name: "ci"}).Secret}
		}, false},
		{"not a token", func(e *env) Token { return Token{Raw: "eyJhbGciOiJIUzI1NiJ9.e30.x"} }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			e.createUser("alice@example.com", alicePassword, "user")
			tok := c.present(e)
			revoked, err := e.s.CheckReuse(ctx, tok.Raw, "198.51.100.7")
			if err != nil || revoked != c.wantRevoked {
				t.Fatalf("CheckReuse = %v, %v; want %v", revoked, err, c.wantRevoked)
			}
			recs := e.audit.actions("auth.token_reuse")
			if !c.wantRevoked {
				if len(recs) != 0 {
					t.Fatalf("audited %+v", recs)
				}
				return
			}
			if len(recs) != 1 || recs[0].Address != "198.51.100.7" || recs[0].Result != "revoked" ||
				!strings.Contains(recs[0].Params, `"via":"ui"`) {
				t.Fatalf("audit records %+v", recs)
			}
			if sess := e.st.session(tok.SessionID); sess.RevokedWhy != WhyReuse {
				t.Fatalf("session %+v not revoked for reuse", sess)
			}
			e.authFails(tok.Raw)
		})
	}
}

// The grace forgives only the generation just rotated, and only briefly.
func TestReuseGrace(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		wait       time.Duration
		wantRevoke bool
	}{
		{"double click", 500 * time.Millisecond, false},
		{"just inside", 1999 * time.Millisecond, false},
		{"at the grace", 2 * time.Second, true},
		{"later", time.Minute, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			e.createUser("alice@example.com", alicePassword, "user")
			t0 := e.login("alice@example.com", alicePassword)
			t1, err := e.refresh(t0.Raw)
			if err != nil {
				t.Fatal(err)
			}
			e.clock.Advance(c.wait)
			_, err = e.refresh(t0.Raw)
			wantTokenError(t, err)
			revoked := !e.st.session(t0.SessionID).RevokedAt.IsZero()
			if revoked != c.wantRevoke {
				t.Fatalf("revoked=%v, want %v", revoked, c.wantRevoke)
			}
			if revoked {
				e.authFails(t1.Raw)
			} else {
				e.authOK(t1.Raw)
			}
		})
	}
}

// docs/security.md item 8: 50 concurrent refreshes of one token issue at most one new token,
// and the losers (inside the grace) do not revoke the session.
func TestConcurrentRefreshIssuesOneToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.createUser("alice@example.com", alicePassword, "user")
	t0 := e.login("alice@example.com", alicePassword)
	const n = 50
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		mu      sync.Mutex
		issued  []Token
		refused int
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			tok, err := e.refresh(t0.Raw)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				issued = append(issued, tok)
				return
			}
			if errs.KindOf(err) != errs.Unauthenticated {
				t.Errorf("refresh: %v", err)
			}
			refused++
		}()
	}
	close(start)
	wg.Wait()
	if len(issued) != 1 || refused != n-1 {
		t.Fatalf("%d tokens issued, %d refused", len(issued), refused)
	}
	if s := e.st.session(t0.SessionID); s.Generation != 1 || !s.RevokedAt.IsZero() {
		t.Fatalf("session %+v", s)
	}
	e.authOK(issued[0].Raw)
	e.authFails(t0.Raw)
}

// docs/security.md item 9: no refresh past the session's absolute end, the last token's exp
// is capped at that end, and an expired token cannot be refreshed.
func TestSessionAbsoluteLifetime(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.createUser("alice@example.com", alicePassword, "user")
	login := e.clock.Now()
	end := login.Add(24 * time.Hour)
	tok := e.login("alice@example.com", alicePassword)
	// Refresh every 50 minutes as a client would, until the session's last hour.
	for e.clock.Now().Add(time.Hour).Before(end) {
		e.clock.Advance(50 * time.Minute)
		next, err := e.refresh(tok.Raw)
		if err != nil {
			t.Fatalf("refresh at +%v: %v", e.clock.Now().Sub(login), err)
		}
		tok = next
	}
	if !tok.ExpiresAt.Equal(end) {
		t.Fatalf("last token expires %v, want the session's end %v", tok.ExpiresAt, end)
	}
	e.clock.Advance(end.Sub(e.clock.Now()) - time.Second)
	e.authOK(tok.Raw)
	e.clock.Advance(time.Second)
	e.authFails(tok.Raw)
	_, err := e.refresh(tok.Raw)
	wantTokenError(t, err)
}

func TestExpiredTokenCannotBeRefreshed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.createUser("alice@example.com", alicePassword, "user")
	tok := e.login("alice@example.com", alicePassword)
	e.clock.Advance(time.Hour - time.Second)
	e.authOK(tok.Raw)
	e.clock.Advance(time.Second) // exp == now: over, no leeway on exp
	e.authFails(tok.Raw)
	_, err := e.refresh(tok.Raw)
	wantTokenError(t, err)
	if s := e.st.session(tok.SessionID); s.Generation != 0 || !s.RevokedAt.IsZero() {
		t.Fatalf("an expired token moved the session: %+v", s)
	}
}

// A session the store says has ended cannot be refreshed, whatever the token says.
func TestRefreshOfEndedSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.createUser("alice@example.com", alicePassword, "user")
	tok := e.login("alice@example.com", alicePassword)
	s := e.st.session(tok.SessionID)
	s.ExpiresAt = e.clock.Now()
	e.st.setSession(s)
	_, err := e.refresh(tok.Raw)
	wantTokenError(t, err)
}

// Token lifetime never exceeds the session's: with SessionMax under TokenTTL the
// first token ends with the session.
func TestTokenCappedBySessionMax(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.SessionMax = 30 * time.Minute })
	e.createUser("alice@example.com", alicePassword, "user")
	tok := e.login("alice@example.com", alicePassword)
	if want := e.clock.Now().Add(30 * time.Minute); !tok.ExpiresAt.Equal(want) {
		t.Fatalf("token expires %v, want %v", tok.ExpiresAt, want)
	}
}

// docs/security.md item 10: logout is immediate, and a second logout with the same token is 401.
func TestLogout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.createUser("alice@example.com", alicePassword, "user")
	tok := e.login("alice@example.com", alicePassword)
	p := e.authOK(tok.Raw)
	if err := e.s.Logout(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	e.authFails(tok.Raw)
	_, err := e.refresh(tok.Raw)
	wantTokenError(t, err)
	wantTokenError(t, e.s.Logout(context.Background(), p))
	if s := e.st.session(tok.SessionID); s.RevokedWhy != WhyLogout {
		t.Fatalf("session %+v", s)
	}
	if len(e.audit.actions("auth.logout")) != 1 {
		t.Fatalf("logout not audited once: %+v", e.audit.recs)
	}
}

// docs/security.md item 11: disabling, deleting, or an admin's revocation ends a user's
// sessions at once; other users are untouched.
func TestRevokeUser(t *testing.T) {
	t.Parallel()
	cases := []struct {
		why    string
		before func(e *env, id int64)
	}{
		{WhyDisabled, func(e *env, id int64) {
			u := e.st.user(id)
			u.Disabled = true
			if _, err := e.st.UpdateUser(context.Background(), u); err != nil {
				t.Fatal(err)
			}
		}},
		{WhyDeleted, nil},
		{WhyAdmin, nil},
	}
	for _, c := range cases {
		t.Run(c.why, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			alice := e.createUser("alice@example.com", alicePassword, "user")
			e.createUser("bob@example.com", bobPassword, "user")
			a1 := e.login("alice@example.com", alicePassword)
			a2 := e.login("alice@example.com", alicePassword)
			b := e.login("bob@example.com", bobPassword)
			e.authOK(a1.Raw)
			if c.before != nil {
				c.before(e, alice.ID)
			}
			if n, err := e.s.RevokeUser(context.Background(), alice.ID, c.why); err != nil || n != 2 {
				t.Fatalf("RevokeUser: %d sessions ended, %v; want 2", n, err)
			}
			if c.why == WhyDeleted {
				e.st.deleteUser(alice.ID)
			}
			e.authFails(a1.Raw)
			e.authFails(a2.Raw)
			_, err := e.refresh(a2.Raw)
			wantTokenError(t, err)
			e.authOK(b.Raw)
			if s := e.st.session(a1.SessionID); s.RevokedWhy != c.why {
				t.Fatalf("session %+v", s)
			}
		})
	}
}

// docs/security.md item 11: a password change ends the user's other sessions and keeps the
// one that made it; the old password stops working.
func TestChangePasswordEndsOtherSessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.createUser("alice@example.com", alicePassword, "user")
	here := e.login("alice@example.com", alicePassword)
	there := e.login("alice@example.com", alicePassword)
	p := e.authOK(here.Raw)
	e.authOK(there.Raw)
	const next = "a brand new passphrase"
	if err := e.s.ChangePassword(context.Background(), p, alicePassword, next); err != nil {
		t.Fatal(err)
	}
	e.authOK(here.Raw)
	e.authFails(there.Raw)
	if s := e.st.session(there.SessionID); s.RevokedWhy != WhyPassword {
		t.Fatalf("other session %+v", s)
	}
	_, _, err := e.s.Login(context.Background(), "alice@example.com", alicePassword, "192.0.2.1")
	wantCredentialsError(t, err)
	e.login("alice@example.com", next)
}

func TestChangePasswordChecks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.createUser("alice@example.com", alicePassword, "user")
	tok := e.login("alice@example.com", alicePassword)
	p := e.authOK(tok.Raw)
	err := e.s.ChangePassword(context.Background(), p, alicePassword, "short")
	wantKind(t, err, errs.Invalid)
	err = e.s.ChangePassword(context.Background(), p, "not my password", "a brand new passphrase")
	wantKind(t, err, errs.Forbidden)
	e.authOK(tok.Raw) // a wrong current password does not end the session
	e.login("alice@example.com", alicePassword)
}

// An admin's password reset ends every session of the user.
func TestSetPasswordEndsAllSessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	alice := e.createUser("alice@example.com", alicePassword, "user")
	tok := e.login("alice@example.com", alicePassword)
	wantKind(t, e.s.SetPassword(context.Background(), alice.ID, "alice-2026-04"), errs.Invalid)
	if err := e.s.SetPassword(context.Background(), alice.ID, "a brand new passphrase"); err != nil {
		t.Fatal(err)
	}
	e.authFails(tok.Raw)
	e.login("alice@example.com", "a brand new passphrase")
}

// Steady state: once a session is cached, authenticating costs no store read.
func TestAuthenticateSteadyStateReadsNoStore(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.createUser("alice@example.com", alicePassword, "user")
	tok := e.login("alice@example.com", alicePassword) // login fills the cache
	sessions, users := e.st.sessionReads.Load(), e.st.userReads.Load()
	for range 100 {
		e.authOK(tok.Raw)
	}
	e.clock.Advance(59 * time.Second)
	e.authOK(tok.Raw)
	if ds, du := e.st.sessionReads.Load()-sessions, e.st.userReads.Load()-users; ds != 0 || du != 0 {
		t.Fatalf("101 authentications read %d sessions and %d users from the store", ds, du)
	}
	e.clock.Advance(time.Second) // SessionRecheck: read once more
	e.authOK(tok.Raw)
	e.authOK(tok.Raw)
	if ds := e.st.sessionReads.Load() - sessions; ds != 1 {
		t.Fatalf("recheck read the session %d times, want 1", ds)
	}
}

// A cold cache is filled by one store read however many requests wait for it:
// those that come while the read is in flight share it, and those that missed the
// cache just before it was filled but reach the load after the read ended find the
// answer in the cache (a goroutine descheduled between the two on a busy machine
// used to read again).
func TestAuthenticateColdCacheReadsOnce(t *testing.T) {
	t.Parallel()
	a := newEnv(t, nil)
	a.createUser("alice@example.com", alicePassword, "user")
	tok := a.login("alice@example.com", alicePassword)
	b := newEnvOn(t, a.st, a.clock, nil) // a replica that has never seen the session

	gate := make(chan struct{})
	entered := make(chan struct{}, 64)
	a.st.mu.Lock()
	a.st.afterSessionRead = func() { entered <- struct{}{}; <-gate }
	a.st.mu.Unlock()
	const n = 20
	var wg sync.WaitGroup
	ready := make(chan struct{}, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ready <- struct{}{}
			if _, err := b.s.Authenticate(context.Background(), tok.Raw); err != nil {
				t.Errorf("Authenticate: %v", err)
			}
		}()
	}
	for range n {
		<-ready
	}
	<-entered
	// Give the other goroutines every chance to reach the store if they were going to.
	for range 100 {
		runtime.Gosched()
	}
	close(gate)
	wg.Wait()
	if got := a.st.sessionReads.Load(); got != 1 {
		t.Fatalf("%d concurrent authentications read the session %d times, want 1", n, got)
	}
}

// A load that read a session just before it was revoked elsewhere must not put the
// live session back into the cache after the change feed dropped it.
func TestLoadRacingRevocationDoesNotResurrect(t *testing.T) {
	t.Parallel()
	a := newEnv(t, nil)
	a.createUser("alice@example.com", alicePassword, "user")
	tok := a.login("alice@example.com", alicePassword)
	b := newEnvOn(t, a.st, a.clock, nil)

	gate, entered := make(chan struct{}), make(chan struct{})
	a.st.mu.Lock()
	a.st.afterSessionRead = func() { close(entered); <-gate }
	a.st.mu.Unlock()
	done := make(chan error)
	go func() {
		_, err := b.s.Authenticate(context.Background(), tok.Raw)
		done <- err
	}()
	<-entered // b's load has read the live session and is held
	a.st.mu.Lock()
	a.st.afterSessionRead = nil
	a.st.mu.Unlock()
	if err := a.s.Logout(context.Background(), a.authOK(tok.Raw)); err != nil {
		t.Fatal(err) // the store hands the revocation to b's cache too, while b's load is held
	}
	close(gate)
	<-done // began before the logout: either answer is linearisable
	b.authFails(tok.Raw)
}

// Cross-replica: a logout, refresh, revocation or change of the user on one
// replica holds on another as soon as the store's feed hands it over (on
// PostgreSQL through NOTIFY); a newer generation is accepted at once.
func TestChangesReachOtherReplicas(t *testing.T) {
	t.Parallel()
	a := newEnv(t, nil)
	alice := a.createUser("alice@example.com", alicePassword, "user")
	carol := a.createUser("carol@example.com", "quiet lantern morning", "user")
	dave := a.createUser("dave@example.com", "silver kettle evening", store.RoleAdmin)
	b := newEnvOn(t, a.st, a.clock, nil)
	ctx := context.Background()

	// Refresh on a: b accepts the new generation at once and drops the old.
	t0 := a.login("alice@example.com", alicePassword)
	b.authOK(t0.Raw)
	t1, err := a.refresh(t0.Raw)
	if err != nil {
		t.Fatal(err)
	}
	b.authOK(t1.Raw)
	b.authFails(t0.Raw)

	// Logout on a, delivered while b had the session cached.
	l := a.login("alice@example.com", alicePassword)
	b.authOK(l.Raw)
	a.st.holdChanges()
	if err := a.s.Logout(ctx, a.authOK(l.Raw)); err != nil {
		t.Fatal(err)
	}
	a.st.releaseChanges()
	b.authFails(l.Raw)

	// Disabling a user on a (RevokeUser feeds the sessions).
	c := a.login("carol@example.com", "quiet lantern morning")
	b.authOK(c.Raw)
	u := a.st.user(carol.ID)
	u.Disabled = true
	if _, err := a.st.UpdateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	if _, err := a.s.RevokeUser(ctx, carol.ID, WhyDisabled); err != nil {
		t.Fatal(err)
	}
	b.authFails(c.Raw)

	// A demotion on a: b's cached session holds the user's role, and the user's
	// change drops it.
	d := a.login("dave@example.com", "silver kettle evening")
	if p := b.authOK(d.Raw); p.Role != store.RoleAdmin {
		t.Fatalf("role %q before the demotion", p.Role)
	}
	u = a.st.user(dave.ID)
	u.Role = store.RoleUser
	if _, err := a.st.UpdateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	if p := b.authOK(d.Raw); p.Role != store.RoleUser {
		t.Fatalf("role %q on the other replica after the demotion", p.Role)
	}

	// A deleted user: the deletion's one entry drops the user's sessions.
	c2 := a.login("alice@example.com", alicePassword)
	b.authOK(c2.Raw)
	a.st.deleteUser(alice.ID)
	b.authFails(c2.Raw)
}

// Without a feed entry (a user disabled but not revoked, or an entry missed), a
// cached session is read again after SessionRecheck.
func TestRecheckCatchesMissedChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	alice := e.createUser("alice@example.com", alicePassword, "user")
	tok := e.login("alice@example.com", alicePassword)
	e.authOK(tok.Raw)
	u := e.st.user(alice.ID)
	u.Disabled = true
	e.st.setUserUnfed(u)
	e.authOK(tok.Raw) // nothing said the cached session changed
	e.clock.Advance(time.Minute)
	e.authFails(tok.Raw)
}

// A resync (the store's listener reconnected and may have lost changes) drops
// every cached session: one revoked while nobody listened fails at once.
func TestResyncDropsEverything(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.createUser("alice@example.com", alicePassword, "user")
	tok := e.login("alice@example.com", alicePassword)
	other := e.login("alice@example.com", alicePassword)
	e.authOK(tok.Raw)
	e.authOK(other.Raw)
	s := e.st.session(tok.SessionID)
	s.RevokedAt, s.RevokedWhy = e.clock.Now(), WhyLogout
	e.st.setSession(s) // a revocation whose notification was lost
	e.authOK(tok.Raw)
	reads := e.st.sessionReads.Load()
	e.st.resync()
	e.authFails(tok.Raw)
	e.authOK(other.Raw)
	if n := e.st.sessionReads.Load() - reads; n != 2 {
		t.Fatalf("%d session reads after the resync, want each session read once", n)
	}
}

// Close ends the subscription: a closed service hears no more changes.
func TestCloseUnsubscribes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.s.Close()
	e.st.mu.Lock()
	n := len(e.st.subs)
	e.st.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d subscribers after Close", n)
	}
}

func TestActiveSessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.createUser("alice@example.com", alicePassword, "user")
	e.login("alice@example.com", alicePassword)
	tok := e.login("alice@example.com", alicePassword)
	if n := e.s.ActiveSessions(context.Background()); n != 2 {
		t.Fatalf("%d active sessions", n)
	}
	if err := e.s.Logout(context.Background(), e.authOK(tok.Raw)); err != nil {
		t.Fatal(err)
	}
	if n := e.s.ActiveSessions(context.Background()); n != 1 {
		t.Fatalf("%d active sessions after logout", n)
	}
}

// The session cache stays within its bound and prefers to drop dead sessions.
func TestSessionCacheBounded(t *testing.T) {
	t.Parallel()
	c := newSessionCache(32)
	now := time.Now()
	live := sessionEntry{expiresAt: now.Add(time.Hour), loadedAt: now}
	c.put("dead", sessionEntry{revoked: true, expiresAt: now.Add(time.Hour), loadedAt: now})
	for i := range 200 {
		c.put(string(rune(0x4e00+i)), live)
		if n := c.len(); n > 32 {
			t.Fatalf("cache holds %d entries", n)
		}
		if i == 31 {
			if _, ok := c.get("dead"); ok {
				t.Fatal("the revoked entry outlived a live one's eviction")
			}
		}
	}
}

// TestStoreDownIsUnavailable: a store that does not answer makes logins, token
// checks and refreshes fail as the store's Unavailable (503 store_unavailable),
// never as 401, which would log the caller out, nor as 500.
func TestStoreDownIsUnavailable(t *testing.T) {
	e := newEnv(t, nil)
	e.createUser("alice@example.com", alicePassword, store.RoleUser)
	tok := e.login("alice@example.com", alicePassword)
	other := newEnvOn(t, e.st, e.clock, nil) // a replica that has not seen the session yet

	e.st.down.Store(true)
	ctx := context.Background()
	_, _, loginErr := e.s.Login(ctx, "alice@example.com", alicePassword, "192.0.2.1")
	_, authErr := other.s.Authenticate(ctx, tok.Raw)
	_, refreshErr := e.refresh(tok.Raw)
	for what, err := range map[string]error{"login": loginErr, "authenticate": authErr, "refresh": refreshErr} {
		if e, ok := errs.As(err); !ok || e.Kind != errs.Unavailable || e.Reason != errs.ReasonStoreUnavailable {
			t.Errorf("%s with the store down: %v, want Unavailable %s", what, err, errs.ReasonStoreUnavailable)
		}
	}
}

// Offline ends a user's sessions as a Service does (the administration commands,
// docs/security.md item 11): in the store, audited as auth.sessions_revoked, and a
// running Service on the same store refuses their tokens from the change feed.
func TestOfflineRevokeUser(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	alice := e.createUser("alice@example.com", alicePassword, store.RoleUser)
	e.createUser("bob@example.com", bobPassword, store.RoleUser)
	a := e.login("alice@example.com", alicePassword)
	b := e.login("bob@example.com", bobPassword)
	e.authOK(a.Raw)
	var recs auditLog
	off, err := NewOffline(e.st, OfflineConfig{Argon2: cheapParams, Now: e.clock.Now, Audit: recs.add})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := off.RevokeUser(context.Background(), alice.ID, WhyDisabled); err != nil || n != 1 {
		t.Fatalf("RevokeUser: %d sessions ended, %v; want 1", n, err)
	}
	e.authFails(a.Raw)
	e.authOK(b.Raw)
	if s := e.st.session(a.SessionID); s.RevokedWhy != WhyDisabled {
		t.Fatalf("session %+v", s)
	}
	got := recs.actions("auth.sessions_revoked")
	if len(got) != 1 || got[0].Target != "user:"+strconv.FormatInt(alice.ID, 10) || got[0].Reason != WhyDisabled ||
		!got[0].At.Equal(e.clock.Now()) {
		t.Fatalf("audit %+v", got)
	}
	if n, err := off.RevokeUser(context.Background(), alice.ID, WhyDisabled); err != nil || n != 0 {
		t.Fatalf("RevokeUser again: %d, %v; want 0", n, err)
	}
	if got := recs.actions("auth.sessions_revoked"); len(got) != 1 {
		t.Fatalf("nothing ended, yet audited: %+v", got)
	}
}
