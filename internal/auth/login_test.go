package auth

import (
	"bytes"
	"context"
	"fmt"
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

	"github.com/vmgate/vmgate/internal/testkit"
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

// docs/security.md item 14: an unknown e-mail, a wrong password and a disabled user get the
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
	carol.PasswordHash = "not-a-phc-string" // unreadable: still one hash's worth of time
	if _, err := e.st.UpdateUser(context.Background(), carol); err != nil {
		t.Fatal(err)
	}
	dave := e.createUser("dave@example.com", "quiet lantern evening", store.RoleUser)
	dave.PasswordHash = "" // a user of single sign-on has no password: one hash, no match
	if _, err := e.st.UpdateUser(context.Background(), dave); err != nil {
		t.Fatal(err)
	}
	var hashes atomic.Int64
	e.s.kdf = func(pw, salt []byte, p Params) []byte { hashes.Add(1); return Argon2ID(pw, salt, p) }
	cases := []struct{ name, email, password string }{
		{"unknown e-mail", "nobody@example.com", alicePassword},
		{"wrong password", "alice@example.com", bobPassword},
		{"disabled user, right password", "bob@example.com", bobPassword},
		{"not an e-mail", "correct horse battery", "x"},
		{"unreadable stored hash", "carol@example.com", "quiet lantern morning"},
		{"a user without a password", "dave@example.com", "quiet lantern evening"},
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

// docs/security.md item 14: an unknown e-mail costs what a wrong password costs, proven by
// counting rather than timing: each runs exactly one key derivation, with the same
// argon2 parameters, salt length and password. (BenchmarkLoginFailure times both.)
func TestLoginUnknownEmailHashesLikeWrongPassword(t *testing.T) {
	t.Parallel()
	params := Params{Memory: 256, Time: 3, Threads: 2, KeyLen: 32, SaltLen: 16}
	e := newEnv(t, func(c *Config) { c.Argon2 = params })
	e.createUser("alice@example.com", alicePassword, store.RoleUser)
	type call struct {
		pw      string
		saltLen int
		p       Params
	}
	var mu sync.Mutex
	var calls []call
	e.s.kdf = func(pw, salt []byte, p Params) []byte {
		mu.Lock()
		calls = append(calls, call{string(pw), len(salt), p})
		mu.Unlock()
		return Argon2ID(pw, salt, p)
	}
	derivations := func(email string) []call {
		mu.Lock()
		calls = nil
		mu.Unlock()
		_, _, err := e.s.Login(context.Background(), email, "wrong password here", "192.0.2.1")
		wantCredentialsError(t, err)
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(calls)
	}
	known, unknown := derivations("alice@example.com"), derivations("nobody@example.com")
	if len(known) != 1 || len(unknown) != 1 {
		t.Fatalf("derivations: wrong password %d, unknown e-mail %d; want 1 each", len(known), len(unknown))
	}
	if known[0] != unknown[0] {
		t.Fatalf("wrong password derives %+v, unknown e-mail %+v", known[0], unknown[0])
	}
	if known[0].p.Memory != params.Memory || known[0].p.Time != params.Time || known[0].p.Threads != params.Threads ||
		known[0].saltLen != int(params.SaltLen) {
		t.Fatalf("derivation %+v, want the configured parameters %+v", known[0], params)
	}
}

// heldHasher is a Config.Hasher whose derivations wait for a gate: tests count
// the hashes in flight (each one holds Argon2.Memory, so the peak of hashes in
// flight bounds the memory a flood can take) and see the order they started in.
type heldHasher struct {
	gate     chan struct{} // each derivation takes one value to finish
	started  chan string   // the password of each derivation, as it starts
	running  atomic.Int64
	peak     atomic.Int64
	finished atomic.Int64
}

func newHeldHasher() *heldHasher {
	return &heldHasher{gate: make(chan struct{}), started: make(chan string, 1000)}
}

func (h *heldHasher) derive(pw, salt []byte, p Params) []byte {
	n := h.running.Add(1)
	for old := h.peak.Load(); n > old && !h.peak.CompareAndSwap(old, n); old = h.peak.Load() {
	}
	h.started <- string(pw)
	<-h.gate
	h.running.Add(-1)
	h.finished.Add(1)
	return Argon2ID(pw, salt, p)
}

// docs/security.md item 16: at most MaxConcurrentHashes hashes run at once; further logins
// wait in the queue (never refused while it has room), a login that finds it full
// gets 429 with Retry-After, and token checks go on meanwhile.
func TestLoginHashConcurrencyBounded(t *testing.T) {
	t.Parallel()
	var out outcomes
	const slots, queue, logins = 3, 4, 10
	e := newEnv(t, func(c *Config) { c.MaxConcurrentHashes, c.HashQueue, c.LoginOutcome = slots, queue, out.add })
	e.createUser("alice@example.com", alicePassword, store.RoleUser)
	tok := e.login("alice@example.com", alicePassword)

	h := newHeldHasher()
	e.s.kdf = h.derive
	results := make(chan error, logins)
	for range slots + queue {
		go func() {
			_, _, err := e.s.Login(context.Background(), "alice@example.com", alicePassword, "192.0.2.1")
			results <- err
		}()
	}
	testkit.Until(t, "the slots are taken and the queue is full", func() bool {
		busy, waiting := e.s.hashes.stats()
		return busy == slots && waiting == queue
	})
	for range logins - slots - queue {
		_, _, err := e.s.Login(context.Background(), "alice@example.com", alicePassword, "192.0.2.1")
		wantKind(t, err, errs.RateLimited)
		if e, _ := errs.As(err); e.RetryAfter < 1 {
			t.Fatalf("429 without Retry-After: %+v", e)
		}
	}
	e.authOK(tok.Raw) // token checks need no slot
	testkit.Until(t, "the slot holders are hashing", func() bool { return h.running.Load() == slots })
	for range slots + queue {
		h.gate <- struct{}{}
	}
	for range slots + queue {
		if err := <-results; err != nil {
			t.Fatalf("a queued login: %v", err)
		}
	}
	if p := h.peak.Load(); p != slots {
		t.Fatalf("%d hashes ran at once, want %d", p, slots)
	}
	if n := out.count(OutcomeBusy); n != logins-slots-queue {
		t.Fatalf("outcomes %v", out.seen)
	}
	if busy, waiting := e.s.hashes.stats(); busy != 0 || waiting != 0 {
		t.Fatalf("after the flood: %d slots busy, %d waiting", busy, waiting)
	}
}

// Logins get their slots in the order they came: strict FIFO, with no newcomer
// overtaking a waiter when a slot frees.
func TestLoginHashQueueIsFIFO(t *testing.T) {
	t.Parallel()
	const waiters = 8
	e := newEnv(t, func(c *Config) { c.MaxConcurrentHashes, c.HashQueue = 1, waiters })
	h := newHeldHasher()
	e.s.kdf = h.derive
	login := func(i int, done chan<- error) {
		_, _, err := e.s.Login(context.Background(), fmt.Sprintf("u%d@example.com", i),
			fmt.Sprintf("password number %d", i), "192.0.2.1")
		done <- err
	}
	done := make(chan error, waiters+1)
	go login(0, done)
	if got := <-h.started; got != "password number 0" {
		t.Fatalf("first hash: %q", got)
	}
	for i := 1; i <= waiters; i++ { // queue them one at a time, so the order is known
		go login(i, done)
		testkit.Until(t, fmt.Sprintf("login %d is queued", i), func() bool { _, n := e.s.hashes.stats(); return n == i })
	}
	for i := 1; i <= waiters; i++ {
		h.gate <- struct{}{} // finish the running hash: the head of the queue starts
		if got, want := <-h.started, fmt.Sprintf("password number %d", i); got != want {
			t.Fatalf("hash %d was %q, want %q", i, got, want)
		}
	}
	h.gate <- struct{}{}
	for range waiters + 1 {
		wantCredentialsError(t, <-done)
	}
}

// The queue's length follows HashWait, the slots and the measured hold of a slot:
// a newcomer is admitted while the logins ahead of it take at most HashWait, one
// round of waiters always is, and a negative HashWait means no queue.
func TestHashQueueDerivedLength(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		slots       int
		wait, hold  time.Duration
		admitted    int
		retrySecond int
	}{
		{"1 s of 100 ms hashes, 2 slots", 2, time.Second, 100 * time.Millisecond, 20, 1},
		{"1 s of 25 ms hashes, 1 slot", 1, time.Second, 25 * time.Millisecond, 40, 1},
		{"hashes longer than the wait", 2, time.Second, 3 * time.Second, 2, 3},
		{"no queue", 2, -1, 25 * time.Millisecond, 0, 1},
		{"very fast hashes: capped", 2, time.Second, time.Millisecond, maxDerivedQueue, 1},
	} {
		q := newHashQueue(c.slots, 0, c.wait, c.hold)
		q.busy = c.slots
		for !q.full() {
			q.waiting.PushBack(make(chan struct{}))
		}
		if n := q.waiting.Len(); n != c.admitted {
			t.Errorf("%s: %d admitted, want %d", c.name, n, c.admitted)
		}
		if got := retrySeconds(q.backIn()); got != c.retrySecond {
			t.Errorf("%s: Retry-After %d, want %d", c.name, got, c.retrySecond)
		}
	}
}

// A login waiting in the queue leaves it when its context ends, and the slot goes
// on to the next one.
func TestLoginHashWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxConcurrentHashes = 1 })
	e.createUser("alice@example.com", alicePassword, store.RoleUser)
	release, _, ok := e.s.hashes.acquire(context.Background())
	if !ok {
		t.Fatal("no slot")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, _, err := e.s.Login(ctx, "alice@example.com", alicePassword, "192.0.2.1")
		done <- err
	}()
	testkit.Until(t, "the login is queued", func() bool { _, n := e.s.hashes.stats(); return n == 1 })
	cancel()
	wantKind(t, <-done, errs.RateLimited)
	if _, n := e.s.hashes.stats(); n != 0 {
		t.Fatalf("%d still queued", n)
	}
	release()
	e.login("alice@example.com", alicePassword)
	if busy, _ := e.s.hashes.stats(); busy != 0 {
		t.Fatalf("%d slots busy after all logins ended", busy)
	}
}

// docs/security.md item 12: a hash made with other parameters is replaced at login, with a
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

// A new account's password meets the policy (docs/security.md item 13), the
// e-mail's local part included whatever its case and spaces, and its hash
// verifies, on a Service (in a hashing slot) and Offline alike. The rules of the
// e-mail and the nickname are internal/accounts'.
func TestHashNewPassword(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	off, err := NewOffline(e.st, OfflineConfig{Argon2: cheapParams})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, w := range []struct {
		name string
		hash func(ctx context.Context, email, password string) (string, error)
	}{{"service", e.s.HashNewPassword}, {"offline", off.HashNewPassword}} {
		name, hash := w.name, w.hash
		h, err := hash(ctx, "bob@example.com", bobPassword)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if ok, rehash, err := VerifyPassword(h, bobPassword, cheapParams); !ok || rehash || err != nil {
			t.Fatalf("%s: the hash does not verify: %v %v %v", name, ok, rehash, err)
		}
		for _, c := range []struct{ email, password string }{
			{"bob@example.com", "bob123456789"},
			{" Sebastian.Miller@Example.com ", "sebastianmiller"},
			{"bob@example.com", "short"},
		} {
			if _, err := hash(ctx, c.email, c.password); errs.KindOf(err) != errs.Invalid {
				t.Errorf("%s: %q for %q: %v, want invalid", name, c.password, c.email, err)
			}
		}
	}
}

// docs/security.md item 17 (the auth part): nothing this package logs or audits holds a
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
	if !strings.Contains(logged, "rotated token reused") || !strings.Contains(logged, "login lockout") {
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

// A refused login is held for RefusalPause, at most its Retry-After, before the
// 429 (so a flood's clients that retry at once sleep instead of spinning), and no
// more than maxPausedRefusals are held at once: the rest are answered at once.
func TestLoginRefusalsArePaused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) {
		c.RefusalPause = time.Second
		c.PerAddressRate, c.PerAddressBurst = rate.Every(time.Minute), 1
	})
	var mu sync.Mutex
	var pauses []time.Duration
	release := make(chan struct{})
	e.s.pause = func(ctx context.Context, d time.Duration) {
		mu.Lock()
		pauses = append(pauses, d)
		mu.Unlock()
		<-release
	}
	wantCredentialsError(t, e.loginFrom("a@example.com", "wrong password!", "192.0.2.1")) // a 401 is not paused
	const extra = 10
	done := make(chan error, maxPausedRefusals+extra)
	for range maxPausedRefusals {
		go func() { done <- e.loginFrom("a@example.com", "wrong password!", "192.0.2.1") }()
	}
	testkit.Until(t, "every held refusal is pausing", func() bool { return e.s.paused.Load() == maxPausedRefusals })
	for range extra { // beyond the bound: answered at once, unpaused
		wantKind(t, e.loginFrom("a@example.com", "wrong password!", "192.0.2.1"), errs.RateLimited)
	}
	close(release)
	for range maxPausedRefusals {
		wantKind(t, <-done, errs.RateLimited)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(pauses) != maxPausedRefusals {
		t.Fatalf("%d pauses, want %d", len(pauses), maxPausedRefusals)
	}
	for _, d := range pauses {
		if d != time.Second {
			t.Fatalf("paused %v, want RefusalPause (1 s; the bucket says 60 s)", d)
		}
	}
	if n := e.s.paused.Load(); n != 0 {
		t.Fatalf("%d still counted as paused", n)
	}
	// A refusal told to come back sooner than RefusalPause is held only that long.
	e.clock.Advance(time.Minute - 200*time.Millisecond)
	pauses = pauses[:0]
	mu.Unlock()
	wantKind(t, e.loginFrom("a@example.com", "wrong password!", "192.0.2.1"), errs.RateLimited)
	mu.Lock()
	if len(pauses) != 1 || pauses[0] != 200*time.Millisecond {
		t.Fatalf("pauses %v, want [200ms]", pauses)
	}
}
