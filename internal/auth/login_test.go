package auth

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// outcomes records Config.LoginOutcome.
type outcomes struct {
	mu   sync.Mutex
	seen []string
}

func (o *outcomes) add(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = append(o.seen, s)
}

func (o *outcomes) count(s string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, x := range o.seen {
		if x == s {
			n++
		}
	}
	return n
}

func TestLogin(t *testing.T) {
	t.Parallel()
	var out outcomes
	e := newEnv(t, func(c *Config) { c.LoginOutcome = out.add })
	alice := e.createUser("Alice@Example.com", alicePassword, store.RoleAdmin)
	if alice.Email != "alice@example.com" {
		t.Fatalf("e-mail stored as %q", alice.Email)
	}
	tok, u, err := e.s.Login(context.Background(), "  ALICE@example.COM ", alicePassword, "192.0.2.9")
	if err != nil {
		t.Fatal(err)
	}
	if u.ID != alice.ID || u.Email != "alice@example.com" {
		t.Fatalf("user %+v", u)
	}
	p := e.authOK(tok.Raw)
	if p.UserID != alice.ID || p.Role != store.RoleAdmin || p.Nickname != "nick" || p.SessionID != tok.SessionID || p.TokenID == "" {
		t.Fatalf("principal %+v", p)
	}
	s := e.st.session(tok.SessionID)
	if s.Address != "192.0.2.9" || !s.ExpiresAt.Equal(e.clock.Now().Add(24*time.Hour)) || s.Generation != 0 {
		t.Fatalf("session %+v", s)
	}
	recs := e.audit.actions("auth.login")
	if len(recs) != 1 || recs[0].UserID != alice.ID || recs[0].Address != "192.0.2.9" || recs[0].SessionID != tok.SessionID ||
		recs[0].Result != "ok" {
		t.Fatalf("audit %+v", recs)
	}
	if out.count(OutcomeOK) != 1 {
		t.Fatalf("outcomes %v", out.seen)
	}
}

// SECURITY.md 14: an unknown e-mail, a wrong password and a disabled user get the
// same error, the same outcome, and one hash each.
func TestLoginFailuresLookAlike(t *testing.T) {
	t.Parallel()
	var out outcomes
	e := newEnv(t, func(c *Config) { c.LoginOutcome = out.add })
	e.createUser("alice@example.com", alicePassword, store.RoleUser)
	bob := e.createUser("bob@example.com", bobPassword, store.RoleUser)
	bob.Disabled = true
	if _, err := e.st.UpdateUser(context.Background(), bob); err != nil {
		t.Fatal(err)
	}
	carol := e.createUser("carol@example.com", "quiet lantern morning", store.RoleUser)
	carol.PasswordHash = "" // unreadable: still one hash's worth of time
	if _, err := e.st.UpdateUser(context.Background(), carol); err != nil {
		t.Fatal(err)
	}
	var hashes atomic.Int64
	e.s.kdf = func(pw, salt []byte, p Params) []byte { hashes.Add(1); return argon2id(pw, salt, p) }
	cases := []struct{ name, email, password string }{
		{"unknown e-mail", "nobody@example.com", alicePassword},
		{"wrong password", "alice@example.com", bobPassword},
		{"disabled user, right password", "bob@example.com", bobPassword},
		{"not an e-mail", "correct horse battery", "x"},
		{"unreadable stored hash", "carol@example.com", "quiet lantern morning"},
	}
	for _, c := range cases {
		before := hashes.Load()
		_, _, err := e.s.Login(context.Background(), c.email, c.password, "192.0.2.1")
		wantCredentialsError(t, err)
		if n := hashes.Load() - before; n != 1 {
			t.Errorf("%s: %d hashes, want 1", c.name, n)
		}
	}
	if n := out.count(OutcomeBadCredentials); n != len(cases) {
		t.Fatalf("outcomes %v", out.seen)
	}
	for _, r := range e.audit.actions("auth.login_failed") {
		if strings.Contains(r.UserEmail, "horse") || strings.Contains(r.Params, "horse") {
			t.Fatalf("audit record holds what may be a password: %+v", r)
		}
	}
}

// SECURITY.md 14: the timing of an unknown e-mail matches a wrong password's,
// through the dummy hash. Medians of 100 interleaved samples each, with argon2 at
// a quarter of the default memory to keep the race-enabled run short; the same
// comparison without the dummy hash shows the test can see a leak.
func TestLoginTimingDoesNotRevealAccounts(t *testing.T) {
	params := Params{Memory: 4 * 1024, Time: 2, Threads: 1, KeyLen: 32, SaltLen: 16}
	samples := 100
	if testing.Short() {
		samples = 30
	}
	known, unknown := loginTimings(t, params, samples, false)
	if r := float64(known) / float64(unknown); r < 0.75 || r > 1.25 {
		t.Fatalf("median wrong password %v, unknown e-mail %v: ratio %.2f", known, unknown, r)
	}
	t.Logf("medians: wrong password %v, unknown e-mail %v", known, unknown)

	known, unknown = loginTimings(t, params, 20, true)
	if r := float64(unknown) / float64(known); r > 0.5 {
		t.Fatalf("without the dummy hash the medians should differ: %v vs %v", known, unknown)
	}
}

// With the production parameters, fewer samples (each hash is ~25 ms, ~130 ms
// under the race detector).
func TestLoginTimingRealParams(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	known, unknown := loginTimings(t, DefaultParams(), 15, false)
	if r := float64(known) / float64(unknown); r < 0.75 || r > 1.25 {
		t.Fatalf("median wrong password %v, unknown e-mail %v: ratio %.2f", known, unknown, r)
	}
	t.Logf("medians: wrong password %v, unknown e-mail %v", known, unknown)
}

// loginTimings returns the median durations of failed logins for a known e-mail
// with a wrong password and for an unknown e-mail, interleaved.
func loginTimings(t *testing.T, p Params, n int, noDummy bool) (known, unknown time.Duration) {
	t.Helper()
	e := newEnv(t, func(c *Config) { c.Argon2 = p; c.FailuresBeforeBackoff = 1 << 30 })
	e.createUser("alice@example.com", alicePassword, store.RoleUser)
	if noDummy {
		e.s.dummyHash = "" // unreadable: no hash at all
	}
	measure := func(email string) time.Duration {
		start := time.Now()
		_, _, err := e.s.Login(context.Background(), email, "wrong password here", "192.0.2.1")
		d := time.Since(start)
		wantCredentialsError(t, err)
		return d
	}
	measure("alice@example.com") // warm up
	var ks, us []time.Duration
	for i := range n { // alternate which goes first, so drift favours neither
		if i%2 == 0 {
			ks = append(ks, measure("alice@example.com"))
			us = append(us, measure("nobody@example.com"))
		} else {
			us = append(us, measure("nobody@example.com"))
			ks = append(ks, measure("alice@example.com"))
		}
	}
	return median(ks), median(us)
}

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

// SECURITY.md 15: after 5 consecutive failures an account is locked for 1 s,
// doubling with each further failure up to 15 min; the right password during a
// lockout gets 429, not a token. Unknown e-mails are treated the same, so a
// lockout does not reveal an account either.
func TestLoginBackoff(t *testing.T) {
	t.Parallel()
	for _, email := range []string{"alice@example.com", "nobody@example.com"} {
		t.Run(email, func(t *testing.T) {
			t.Parallel()
			var out outcomes
			e := newEnv(t, func(c *Config) { c.LoginOutcome = out.add })
			e.createUser("alice@example.com", alicePassword, store.RoleUser)
			try := func(pw string) error {
				_, _, err := e.s.Login(context.Background(), email, pw, "192.0.2.1")
				return err
			}
			for range 4 {
				wantCredentialsError(t, try("wrong password!"))
			}
			want := []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 900, 900}
			for i, lock := range want {
				lock *= time.Second
				wantCredentialsError(t, try("wrong password!")) // failure 5+i starts the lock
				wantClientError(t, try(alicePassword), errThrottled(lock))
				e.clock.Advance(lock - time.Millisecond)
				wantClientError(t, try(alicePassword), errThrottled(time.Millisecond))
				e.clock.Advance(time.Millisecond)
				if i == len(want)-1 {
					break
				}
			}
			if n := out.count(OutcomeLocked); n != 2*len(want) {
				t.Fatalf("%d locked outcomes", n)
			}
			if n := len(e.audit.actions("auth.lockout")); n != len(want) {
				t.Fatalf("%d lockout audit records", n)
			}
			if email != "alice@example.com" {
				return
			}
			e.login(email, alicePassword) // the lock is over; success resets the count
			wantCredentialsError(t, try("wrong password!"))
			e.login(email, alicePassword)
		})
	}
}

// A quiet account forgets its failures after FailureMemory.
func TestLoginBackoffForgets(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	try := func() error {
		_, _, err := e.s.Login(context.Background(), "nobody@example.com", "wrong password!", "192.0.2.1")
		return err
	}
	for range 5 {
		wantCredentialsError(t, try())
	}
	wantKind(t, try(), errs.RateLimited)
	e.clock.Advance(24 * time.Hour)
	for range 4 {
		wantCredentialsError(t, try())
	}
}

// SECURITY.md 15: a token bucket per client address (10 a minute, burst 10).
func TestLoginPerAddressLimit(t *testing.T) {
	t.Parallel()
	var out outcomes
	e := newEnv(t, func(c *Config) {
		c.PerAddressRate, c.PerAddressBurst = rate.Every(6*time.Second), 10
		c.LoginOutcome = out.add
	})
	e.createUser("alice@example.com", alicePassword, store.RoleUser)
	try := func(addr string, i int) error {
		// a different unknown e-mail each time, so no account backoff starts
		_, _, err := e.s.Login(context.Background(), "u"+string(rune('a'+i))+"@example.com", "wrong password!", addr)
		return err
	}
	for i := range 10 {
		wantCredentialsError(t, try("203.0.113.1", i))
	}
	wantClientError(t, try("203.0.113.1", 10), errThrottled(6*time.Second))
	_, _, err := e.s.Login(context.Background(), "alice@example.com", alicePassword, "203.0.113.1")
	wantKind(t, err, errs.RateLimited) // the right password too
	wantCredentialsError(t, try("203.0.113.2", 11))
	e.clock.Advance(6 * time.Second)
	if _, _, err := e.s.Login(context.Background(), "alice@example.com", alicePassword, "203.0.113.1"); err != nil {
		t.Fatalf("a token came back after 6 s: %v", err)
	}
	wantKind(t, try("203.0.113.1", 12), errs.RateLimited)
	if n := out.count(OutcomeRateLimited); n != 3 {
		t.Fatalf("outcomes %v", out.seen)
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

func TestAccountBackoffBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxTracked = 32 })
	now := e.clock.Now()
	for i := range 500 {
		e.s.backoff.fail(string(rune(0x4e00+i)), now)
		if n := len(e.s.backoff.count); n > 32 {
			t.Fatalf("%d accounts tracked", n)
		}
	}
}

// SECURITY.md 16: at most MaxConcurrentHashes hashes run at once; beyond that a
// login gets 429 with Retry-After 1 at once, and token checks go on meanwhile.
func TestLoginHashConcurrencyBounded(t *testing.T) {
	t.Parallel()
	var out outcomes
	const slots, logins = 3, 8
	e := newEnv(t, func(c *Config) { c.MaxConcurrentHashes, c.HashWait, c.LoginOutcome = slots, -1, out.add })
	e.createUser("alice@example.com", alicePassword, store.RoleUser)
	tok := e.login("alice@example.com", alicePassword)

	var running, peak atomic.Int64
	gate, entered := make(chan struct{}), make(chan struct{}, logins)
	e.s.kdf = func(pw, salt []byte, p Params) []byte {
		n := running.Add(1)
		for {
			old := peak.Load()
			if n <= old || peak.CompareAndSwap(old, n) {
				break
			}
		}
		entered <- struct{}{}
		<-gate
		running.Add(-1)
		return argon2id(pw, salt, p)
	}
	results := make(chan error, logins)
	for range logins {
		go func() {
			_, _, err := e.s.Login(context.Background(), "alice@example.com", alicePassword, "192.0.2.1")
			results <- err
		}()
	}
	opened := false
	defer func() {
		if !opened {
			close(gate)
		}
	}()
	for range slots {
		<-entered
	}
	// The rest are turned away while the slots are held; were there no bound they
	// would be waiting on the gate, so the wait has a deadline.
	deadline := time.After(10 * time.Second)
	for range logins - slots {
		select {
		case err := <-results:
			wantClientError(t, err, errBusy())
		case <-deadline:
			t.Fatalf("logins beyond the %d slots were not turned away; %d hashes running", slots, running.Load())
		}
	}
	e.authOK(tok.Raw) // token checks need no slot
	close(gate)
	opened = true
	for range slots {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	if p := peak.Load(); p != slots {
		t.Fatalf("%d hashes ran at once, want %d", p, slots)
	}
	if n := out.count(OutcomeBusy); n != logins-slots {
		t.Fatalf("outcomes %v", out.seen)
	}
}

// A login waits up to HashWait for a slot, and no longer than its context.
func TestLoginHashWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxConcurrentHashes, c.HashWait = 1, time.Hour })
	e.createUser("alice@example.com", alicePassword, store.RoleUser)
	release, ok := e.s.slots.acquire(context.Background())
	if !ok {
		t.Fatal("no slot")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, _, err := e.s.Login(ctx, "alice@example.com", alicePassword, "192.0.2.1")
		done <- err
	}()
	cancel()
	wantClientError(t, <-done, errBusy())
	release()
	e.login("alice@example.com", alicePassword)
}

// SECURITY.md 12: a hash made with other parameters is replaced at login, with a
// fresh 16-byte salt; then it is left alone.
func TestLoginRehashesWhenParamsChange(t *testing.T) {
	t.Parallel()
	old := newEnv(t, nil)
	alice := old.createUser("alice@example.com", alicePassword, store.RoleUser)
	before := old.st.user(alice.ID).PasswordHash

	stronger := Params{Memory: 128, Time: 2, Threads: 1, KeyLen: 32, SaltLen: 16}
	e := newEnvOn(t, old.st, old.clock, func(c *Config) { c.Argon2 = stronger })
	e.login("alice@example.com", alicePassword)
	after := e.st.user(alice.ID).PasswordHash
	if after == before || !strings.HasPrefix(after, "$argon2id$v=19$m=128,t=2,p=1$") {
		t.Fatalf("hash not replaced: %q", after)
	}
	p, salt, _, err := decodeHash(after)
	if err != nil || len(salt) != 16 || p.Memory != 128 {
		t.Fatalf("new hash %+v salt %d: %v", p, len(salt), err)
	}
	if ok, rehash, err := VerifyPassword(after, alicePassword, stronger); !ok || rehash || err != nil {
		t.Fatalf("verify new hash: %v %v %v", ok, rehash, err)
	}
	e.login("alice@example.com", alicePassword)
	if again := e.st.user(alice.ID).PasswordHash; again != after {
		t.Fatal("hash replaced although the parameters are current")
	}
	old.login("alice@example.com", alicePassword) // a replica still on the old params moves it back
}

// A wrong current password at ChangePassword counts towards the account's backoff.
func TestChangePasswordBackoff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.createUser("alice@example.com", alicePassword, store.RoleUser)
	p := e.authOK(e.login("alice@example.com", alicePassword).Raw)
	for range 5 {
		wantKind(t, e.s.ChangePassword(context.Background(), p, "guess guess guess", "a brand new passphrase"), errs.Forbidden)
	}
	wantKind(t, e.s.ChangePassword(context.Background(), p, alicePassword, "a brand new passphrase"), errs.RateLimited)
	_, _, err := e.s.Login(context.Background(), "alice@example.com", alicePassword, "192.0.2.1")
	wantKind(t, err, errs.RateLimited)
	if len(e.audit.actions("auth.lockout")) != 1 {
		t.Fatal("lockout not audited")
	}
}

func TestCreateUserValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	e.createUser("alice@example.com", alicePassword, store.RoleUser)
	cases := []struct {
		name                    string
		email, nick, pass, role string
		kind                    errs.Kind
	}{
		{"duplicate", "ALICE@example.com", "a", bobPassword, store.RoleUser, errs.Conflict},
		{"bad e-mail", "alice", "a", bobPassword, store.RoleUser, errs.Invalid},
		{"display name", "Bob <bob@example.com>", "a", bobPassword, store.RoleUser, errs.Invalid},
		{"bad role", "bob@example.com", "a", bobPassword, "root", errs.Invalid},
		{"weak password", "bob@example.com", "a", "bob123456789", store.RoleUser, errs.Invalid},
		{"control in nickname", "bob@example.com", "a\x00b", bobPassword, store.RoleUser, errs.Invalid},
	}
	for _, c := range cases {
		_, err := e.s.CreateUser(context.Background(), c.email, c.nick, c.pass, c.role)
		if errs.KindOf(err) != c.kind {
			t.Errorf("%s: got %v, want kind %v", c.name, err, c.kind)
		}
	}
}

// SECURITY.md 17 (the auth part): nothing this package logs or audits holds a
// token or a password.
func TestLogsAndAuditHoldNoSecrets(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	var mu sync.Mutex
	h := slog.NewJSONHandler(&lockedWriter{w: &buf, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug})
	e := newEnv(t, func(c *Config) { c.Logger = slog.New(h) })
	e.createUser("alice@example.com", alicePassword, store.RoleUser)
	ctx := context.Background()
	var secrets []string
	for range 6 {
		_, _, err := e.s.Login(ctx, "alice@example.com", "wrong password one", "192.0.2.1")
		if err == nil {
			t.Fatal("wrong password accepted")
		}
	}
	e.clock.Advance(time.Hour)
	t0 := e.login("alice@example.com", alicePassword)
	t1, err := e.refresh(t0.Raw)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	_, _ = e.refresh(t0.Raw) // reuse: revokes, logs, audits
	t2 := e.login("alice@example.com", alicePassword)
	_, _ = e.s.Authenticate(ctx, t2.Raw+"x")
	if err := e.s.ChangePassword(ctx, e.authOK(t2.Raw), alicePassword, "another fine passphrase"); err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, alicePassword, "wrong password one", "another fine passphrase", t0.Raw, t1.Raw, t2.Raw)
	mu.Lock()
	logged := buf.String()
	mu.Unlock()
	if !strings.Contains(logged, "rotated token reused") || !strings.Contains(logged, "account locked") {
		t.Fatalf("expected security events in the log:\n%s", logged)
	}
	var audited strings.Builder
	for _, r := range e.audit.recs {
		audited.WriteString(r.UserEmail + r.Params + r.Target + r.Result + r.SessionID + "\n")
	}
	for _, s := range secrets {
		for name, text := range map[string]string{"log": logged, "audit": audited.String()} {
			if strings.Contains(text, s) {
				t.Errorf("%s holds a secret %.12q...", name, s)
			}
		}
	}
	if strings.Contains(logged, "eyJ") || strings.Contains(audited.String(), "eyJ") {
		t.Error("something JWT-shaped was logged or audited")
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
