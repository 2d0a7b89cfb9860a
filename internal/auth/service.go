package auth

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/mail"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/sync/singleflight"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// Store is the part of store.Store this package uses; every store.Store is one.
type Store interface {
	CreateUser(ctx context.Context, u store.User) (store.User, error)
	UserByID(ctx context.Context, id int64) (store.User, error)
	UserByEmail(ctx context.Context, email string) (store.User, error)
	UpdateUser(ctx context.Context, u store.User) (store.User, error)

	CreateSession(ctx context.Context, s store.Session) error
	SessionByID(ctx context.Context, id string) (store.Session, error)
	RotateSession(ctx context.Context, id string, from int64, at time.Time) (store.Session, bool, error)
	RevokeSession(ctx context.Context, id string, at time.Time, why string) error
	RevokeUserSessions(ctx context.Context, userID int64, keep string, at time.Time, why string) ([]string, error)
	CountActiveSessions(ctx context.Context, now time.Time) (int, error)
	UserSessions(ctx context.Context, userID int64, now time.Time) ([]store.Session, error)
	TouchSessions(ctx context.Context, seen []store.SessionSeen) error
	Subscribe(fn func(store.Change)) (cancel func())

	SigningKeys(ctx context.Context) ([]store.SigningKey, error)
	CreateSigningKey(ctx context.Context, k store.SigningKey) ([]store.SigningKey, error)
	DeleteSupersededSigningKeys(ctx context.Context, cutoff time.Time) (int, error)
	ResealSecrets(ctx context.Context, fn func(store.SealedSecret) ([]byte, error)) (int, error)

	CreateAPIToken(ctx context.Context, t store.APIToken) (store.APIToken, error)
	APITokenByHash(ctx context.Context, hash []byte) (store.APIToken, error)
	UserAPITokens(ctx context.Context, userID int64) ([]store.APIToken, error)
	DeleteAPIToken(ctx context.Context, userID int64, id string) error
	TouchAPITokens(ctx context.Context, uses []store.APITokenUse) error

	NoteLoginNetwork(ctx context.Context, account, network string, at time.Time) error
	LoginNetworkSeen(ctx context.Context, account, network string) (time.Time, error)
}

// Reasons a session is revoked (store.Session.RevokedWhy).
const (
	WhyLogout   = "logout"
	WhyReuse    = "reuse"
	WhyPassword = "password"
	WhyDisabled = "disabled"
	WhyDeleted  = "deleted"
	WhyAdmin    = "admin"
	WhyEnded    = "ended" // the user ended it from their list of sessions
)

// sweepEvery is how often Run forgets ended sessions and idle throttling entries.
const sweepEvery = time.Minute

// Service is accounts, sessions and tokens. It is safe for concurrent use; one per
// process, with Run going in the background.
type Service struct {
	cfg    Config
	st     Store
	log    *slog.Logger
	parser *jwt.Parser
	ring   atomic.Pointer[keyring] // the signing keys; loadKeys swaps it

	keyMu       sync.Mutex // one key load at a time; guards lastKeyLoad
	lastKeyLoad time.Time  // when an unknown kid last made learnKID reload
	// dummyHash is verified for unknown e-mails so they cost what a known one does.
	dummyHash string
	kdf       kdf

	hashes   *hashQueue
	paused   atomic.Int64 // refused logins being held (refuse)
	pause    func(ctx context.Context, d time.Duration)
	addrs    *addressLimiter
	throttle *loginThrottle
	cache    *sessionCache
	tokens   *tokenCache // tokens that verified, by their text
	loads    singleflight.Group
	seen     *seenWriter
	// apiTokenFails counts failed API token uses per client network;
	// apiTokenUses writes tokens' last use (apitokens.go).
	apiTokenFails *addressLimiter
	apiTokenUses  *seenWriter

	unsubscribe func()        // from the store's change feed
	keysDue     chan struct{} // the feed said the signing keys changed: Run reloads them

	sweepMu   sync.Mutex // guards lastSweep
	lastSweep time.Time
}

// New loads the signing keys, opening them with Config.Sealer (creating the first
// one when the store has none, settling on whichever key the store kept if replicas
// race, and sealing in place keys an older vmgate stored raw), computes the dummy
// hash, and subscribes to the store's change feed (Close ends that).
func New(ctx context.Context, st Store, cfg Config) (*Service, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Service{
		cfg: cfg, st: st, log: cfg.Logger, parser: newParser(cfg), kdf: cfg.Hasher, pause: sleep,
		addrs:    newAddressLimiter(cfg.PerAddressRate, cfg.PerAddressBurst, cfg.MaxTracked),
		throttle: newLoginThrottle(cfg),
		cache:    newSessionCache(cfg.SessionCacheSize),
		tokens:   newTokenCache(),
		keysDue:  make(chan struct{}, 1),
	}
	s.seen = newSeenWriter(cfg.SeenInterval, cfg.SessionCacheSize, func(ctx context.Context, uses []lastUse) error {
		seen := make([]store.SessionSeen, len(uses))
		for i, u := range uses {
			seen[i] = store.SessionSeen{ID: u.ID, At: u.At}
		}
		return st.TouchSessions(ctx, seen)
	}, cfg.Logger)
	s.apiTokenFails = newAddressLimiter(cfg.APITokenFailureRate, cfg.APITokenFailureBurst, cfg.MaxTracked)
	s.apiTokenUses = newSeenWriter(cfg.SeenInterval, cfg.SessionCacheSize, func(ctx context.Context, uses []lastUse) error {
		touched := make([]store.APITokenUse, len(uses))
		for i, u := range uses {
			touched[i] = store.APITokenUse{ID: u.ID, At: u.At, From: u.From}
		}
		return st.TouchAPITokens(ctx, touched)
	}, cfg.Logger)
	// Subscribed before the keys are read, so that no rotation falls in between.
	s.unsubscribe = st.Subscribe(s.changed)
	if err := s.loadKeys(ctx); err != nil {
		s.unsubscribe()
		return nil, err
	}
	start := time.Now() // the real clock: how long a hash takes on this machine
	if s.dummyHash, err = hashWith(s.kdf, randomID(24), cfg.Argon2); err != nil {
		s.unsubscribe()
		return nil, fmt.Errorf("dummy hash: %w", err)
	}
	s.hashes = newHashQueue(cfg.MaxConcurrentHashes, cfg.HashQueue, cfg.HashWait, time.Since(start))
	if cfg.Argon2.Memory >= reclaimAbove {
		r := newReclaimer()
		s.hashes.onIdle = r.idle
		r.idle() // the dummy hash's memory
	}
	return s, nil
}

// Close stops following the store's change feed.
func (s *Service) Close() { s.unsubscribe() }

// changed drops from the session cache what a change of the store's feed made
// stale: a session revoked or rotated, every session and API token of a user that
// changed (each entry holds the user's role and state), every API token of a user
// who deleted one, everything after a resync. A change of
// the signing keys (or a resync) makes Run reload them. It runs inside the store's
// writers and listener, so it only drops and signals; the store is read later.
func (s *Service) changed(c store.Change) {
	switch c.Kind {
	case store.ChangeSession:
		s.cache.drop(c.SessionID)
	case store.ChangeUser, store.ChangeAPIToken:
		s.cache.dropUser(c.UserID)
	case store.ChangeSigningKey:
		s.keysChanged()
	case store.ChangeResync:
		s.cache.dropAll()
		s.keysChanged()
	}
}

// keysChanged asks Run to reload the signing keys.
func (s *Service) keysChanged() {
	select {
	case s.keysDue <- struct{}{}:
	default: // one reload pending is enough
	}
}

// randomID returns n random bytes, base64url without padding.
func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand, Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

// The errors a client sees. One message for every login failure and one for every
// token failure (docs/security.md items 1, 14); the cause goes to the log only.
func errCredentials() *errs.Error {
	return errs.E(errs.Unauthenticated, "invalid credentials")
}

func errToken(cause error) *errs.Error {
	return &errs.Error{Kind: errs.Unauthenticated, Reason: "unauthenticated", Message: "invalid or expired token", Err: cause}
}

func errThrottled(wait time.Duration) *errs.Error {
	return &errs.Error{Kind: errs.RateLimited, Reason: "rate_limited", Message: "too many login attempts; try again later",
		RetryAfter: retrySeconds(wait)}
}

// errDelayed is the answer during the delay that wrong passwords start: the same
// answer as errThrottled, with a cause a front end can tell apart (Locked).
func errDelayed(wait time.Duration) *errs.Error {
	e := errThrottled(wait)
	e.Err = errLocked
	return e
}

// errLocked is the cause of a login refused during the delay of an account (from
// the client's network, or everywhere) after wrong passwords.
var errLocked = errors.New("delayed after wrong passwords")

// Locked reports whether err refused a login (or a password change) because wrong
// passwords paused the account, rather than because of too many attempts from one
// network or too many logins at once; RetryAfter says for how long. The API
// answers both alike; the web UI says which.
func Locked(err error) bool { return errors.Is(err, errLocked) }

func errBusy(wait time.Duration) *errs.Error {
	return &errs.Error{Kind: errs.RateLimited, Reason: "rate_limited", Message: "too many logins at once; try again later",
		RetryAfter: retrySeconds(wait)}
}

// Login checks an e-mail and password and starts a session. addr is the client's
// address (or an RFC 7239 obfuscated identifier); throttling counts its network
// (Config.IPv4Prefix, IPv6Prefix). In order: the network's token bucket, the
// delay of the (account, network) pair and the account's block on networks it has
// not logged in from (all 429, the right password too: a delayed login is not
// verified, so the delay is no oracle), a hashing slot (waiting its turn in the FIFO queue; 429 with Retry-After when the
// queue is full), then one argon2id verification, against the dummy hash for an
// unknown e-mail. A login that fails on vmgate's store (reading the user,
// writing the session) gives its attempt back to the network's bucket: the
// store's failure is not the client's. Every failure — unknown e-mail, wrong password, disabled user — is
// the same 401 "invalid credentials". A hash made with other parameters than
// Config.Argon2 is replaced.
func (s *Service) Login(ctx context.Context, email, password, addr string) (Token, store.User, error) {
	now := s.cfg.Now()
	email = normalizeEmail(email)
	network := s.network(addr)
	ok, wait, giveBack := s.addrs.allow(network, now)
	if !ok {
		s.cfg.LoginOutcome(OutcomeRateLimited)
		// Debug: under attack this is every request; LoginOutcome counts them.
		s.log.LogAttrs(ctx, slog.LevelDebug, "login rate-limited", slog.String("address", addr),
			slog.String("network", network))
		return Token{}, store.User{}, s.refuse(ctx, wait, errThrottled(wait))
	}
	if wait, scope := s.throttle.wait(email, network, now); wait > 0 && (scope != scopeAccount || !s.knownNetwork(ctx, email, network, now, wait)) {
		s.cfg.LoginOutcome(OutcomeLocked)
		s.log.LogAttrs(ctx, slog.LevelDebug, "login refused: delayed after wrong passwords", slog.String("address", addr),
			slog.String("network", network), slog.String("scope", scope), slog.Duration("remaining", wait))
		return Token{}, store.User{}, s.refuse(ctx, wait, errDelayed(wait))
	}
	// A place in line before the user is read: a login the queue turns away costs
	// no store read, and the read overlaps the wait.
	place, retry, ok := s.hashes.enter()
	if !ok {
		s.cfg.LoginOutcome(OutcomeBusy)
		return Token{}, store.User{}, s.refuse(ctx, retry, errBusy(retry))
	}
	u, err := s.st.UserByEmail(ctx, email)
	known := err == nil
	if err != nil && !errs.Is(err, errs.NotFound) {
		place.leave()
		giveBack(s.cfg.Now()) // the store failed, not the client
		return Token{}, store.User{}, fmt.Errorf("login: %w", err)
	}
	release, ok := place.wait(ctx)
	if !ok {
		s.cfg.LoginOutcome(OutcomeBusy)
		return Token{}, store.User{}, errBusy(0)
	}
	hash := s.dummyHash
	if known {
		hash = u.PasswordHash
	}
	match, rehash, err := verifyWith(s.kdf, hash, password, s.cfg.Argon2)
	if err != nil {
		s.log.LogAttrs(ctx, slog.LevelError, "stored password hash unreadable", slog.Int64("user", u.ID), slog.String("error", err.Error()))
		_, _, _ = verifyWith(s.kdf, s.dummyHash, password, s.cfg.Argon2) // spend what a hash costs
	}
	if match && known && !u.Disabled && rehash {
		// A failed rehash costs nothing but another try at the next login.
		if fresh, err := s.rehash(ctx, u, password); err != nil {
			s.log.LogAttrs(ctx, slog.LevelError, "rehash password", slog.Int64("user", u.ID), slog.String("error", err.Error()))
		} else {
			u = fresh
		}
	}
	release()
	if !match || !known || u.Disabled {
		s.cfg.LoginOutcome(OutcomeBadCredentials)
		s.passwordFailed(ctx, "auth.login_failed", loginFailure(known, match), email, u.ID, addr, now)
		return Token{}, store.User{}, errCredentials()
	}
	s.throttle.succeeded(email, network, now)
	// Every replica, and this one after a restart, exempts the network from the
	// account's ceiling (knownNetwork). A failed note costs the owner nothing here.
	if err := s.st.NoteLoginNetwork(ctx, email, network, now); err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "noting the login's network failed", slog.Int64("user", u.ID),
			slog.String("network", network), slog.String("error", err.Error()))
	}

	sess := store.Session{ID: randomID(32), UserID: u.ID, CreatedAt: now, ExpiresAt: now.Add(s.cfg.SessionMax),
		RotatedAt: now, Address: addr, UserAgent: userAgent(ctx)}
	if err := s.st.CreateSession(ctx, sess); err != nil {
		giveBack(s.cfg.Now()) // the store failed, not the client
		return Token{}, store.User{}, fmt.Errorf("login: create session: %w", err)
	}
	tok, err := s.issue(u.ID, sess.ID, 0, sess.ExpiresAt, now)
	if err != nil {
		return Token{}, store.User{}, err
	}
	s.cache.put(sess.ID, newSessionEntry(sess, u, now))
	s.seen.seen(sess.ID, now)
	s.cfg.LoginOutcome(OutcomeOK)
	s.audit(ctx, store.AuditRecord{Action: "auth.login", UserID: u.ID, UserEmail: u.Email, SessionID: sess.ID,
		Address: addr, Target: "session:" + sess.ID, Result: "ok"})
	return tok, u, nil
}

// knownNetwork reports whether account logged in successfully from network within
// KnownNetworkMemory as the store remembers it (store.NoteLoginNetwork): on
// another replica, or on this one before a restart, where this process's memory
// does not know it. Such a network is exempt from the account's ceiling
// (docs/security.md item 28), so a guesser with many networks cannot keep the owner out of
// the networks they use, whichever replica answers. The answer is remembered — a
// known network until its memory ends, an unknown one until the account's block
// (block) does — so each of a guesser's networks costs one store read per block.
// The read is the same for an account that exists and one that does not (accounts
// are e-mails here), so it tells nothing either. A store that cannot answer
// exempts nobody: the block is 15 minutes at most.
func (s *Service) knownNetwork(ctx context.Context, account, network string, now time.Time, block time.Duration) bool {
	if s.throttle.checkedUnknown(account, network, now) {
		return false
	}
	at, err := s.st.LoginNetworkSeen(ctx, account, network)
	if err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "reading a login network failed: the account's block holds",
			slog.String("network", network), slog.String("error", err.Error()))
		return false
	}
	if at.IsZero() || now.Sub(at) >= s.cfg.KnownNetworkMemory {
		s.throttle.markUnknown(account, network, now, now.Add(block))
		return false
	}
	s.throttle.noteKnown(account, network, now, at.Add(s.cfg.KnownNetworkMemory))
	return true
}

// refuse answers a refused login with err after holding it for RefusalPause (at
// most wait, the time it is told to come back after): a flood's clients that
// retry at once would otherwise spin on cheap 429s and take the cores that
// authenticated requests and the hashes need; held, each costs a sleeping
// goroutine. At most maxPausedRefusals are held at once, the rest answered at once.
func (s *Service) refuse(ctx context.Context, wait time.Duration, err error) error {
	d := min(s.cfg.RefusalPause, wait)
	if d <= 0 {
		return err
	}
	if s.paused.Add(1) > maxPausedRefusals {
		s.paused.Add(-1)
		return err
	}
	defer s.paused.Add(-1)
	s.pause(ctx, d)
	return err
}

// sleep waits d or until ctx ends, on the real clock: a refusal's pause paces
// clients, it decides nothing. Tests replace Service.pause to count the pauses.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// maxPausedRefusals bounds the refused logins held at once (each a goroutine and
// a connection).
const maxPausedRefusals = 1024

// loginFailure is the reason an audit record gives for a refused login; the
// client sees one answer for all of them.
func loginFailure(known, match bool) string {
	switch {
	case !known:
		return "unknown_email"
	case !match:
		return "wrong_password"
	}
	return "user_disabled"
}

// network is the client network addr belongs to, the unit of throttling.
func (s *Service) network(addr string) string {
	return clientNetwork(addr, s.cfg.IPv4Prefix, s.cfg.IPv6Prefix)
}

// passwordFailed counts a wrong password against the e-mail, known or not, from
// addr's network, and audits it as action (none when empty) for why, and the
// delays it may start: auth.lockout, with the network and the scope ("network":
// this account from this network; "account": this account from every network it
// has not logged in from). The records name no actor, nobody having
// authenticated: the account tried is their target, "user:" and the e-mail as
// typed (when it looks like one), with the user id in params when it exists.
func (s *Service) passwordFailed(ctx context.Context, action, why, email string, userID int64, addr string, now time.Time) {
	network := s.network(addr)
	n, delay, block := s.throttle.fail(email, network, now)
	s.log.LogAttrs(ctx, slog.LevelInfo, "wrong password", slog.String("address", addr), slog.String("network", network),
		slog.Int64("user", userID), slog.Int("failures", n))
	target := "user:" + auditEmail(email)
	params := func(m map[string]any) string {
		m["network"] = network
		if userID != 0 {
			m["userId"] = userID
		}
		return jsonParams(m)
	}
	if action != "" {
		s.audit(ctx, store.AuditRecord{Action: action, Target: target, Address: addr, Result: OutcomeBadCredentials,
			Reason: why, Params: params(map[string]any{})})
	}
	lockout := func(scope string, d time.Duration) {
		s.log.LogAttrs(ctx, slog.LevelWarn, "login lockout", slog.String("scope", scope), slog.String("address", addr),
			slog.String("network", network), slog.Int64("user", userID), slog.Int("failures", n), slog.Duration("for", d))
		s.audit(ctx, store.AuditRecord{Action: "auth.lockout", Target: target, Address: addr, Result: "locked",
			Reason: fmt.Sprintf("%d wrong passwords: logins wait %s (%s)", n, d.Round(time.Second), scope),
			Params: params(map[string]any{"scope": scope, "failures": n, "seconds": d.Seconds()})})
	}
	if delay > 0 {
		lockout(scopeNetwork, delay)
	}
	if block > 0 {
		lockout(scopeAccount, block)
	}
}

// rehash stores a new hash of password made with today's parameters.
func (s *Service) rehash(ctx context.Context, u store.User, password string) (store.User, error) {
	h, err := hashWith(s.kdf, password, s.cfg.Argon2)
	if err != nil {
		return u, err
	}
	return s.setHash(ctx, u.ID, u.PasswordHash, h)
}

// setHash writes a new password hash onto a fresh read of the user, so that a
// change an admin made meanwhile (disabled, role) is not written back over. With
// old set, it writes only if the stored hash is still old. The store has no
// compare-and-swap for users, so a change between the read and the write can still
// be lost; the window is one round trip instead of a whole argon2 computation.
func (s *Service) setHash(ctx context.Context, userID int64, old, hash string) (store.User, error) {
	u, err := s.st.UserByID(ctx, userID)
	if err != nil {
		return u, err
	}
	if old != "" && u.PasswordHash != old {
		return u, errs.E(errs.Conflict, "the password was changed meanwhile")
	}
	u.PasswordHash = hash
	return s.st.UpdateUser(ctx, u)
}

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
		s.audit(ctx, store.AuditRecord{Action: "auth.token_reuse", UserID: sess.UserID, SessionID: sess.ID,
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

// ChangePassword sets a new password for p's user after checking the current one,
// and ends the user's other sessions (p's own goes on). Wrong current passwords
// count towards the throttling like failed logins, from the client network of the
// request (the address ctx carries, internal/audit), so a stolen token is no way
// around it; the answer to one is 403, not 401, because the token is fine.
func (s *Service) ChangePassword(ctx context.Context, p Principal, current, next string) error {
	u, err := s.st.UserByID(ctx, p.UserID)
	if errs.Is(err, errs.NotFound) {
		return errToken(err)
	}
	if err != nil {
		return fmt.Errorf("change password: %w", err)
	}
	if err := CheckPasswordPolicy(u.Email, next); err != nil {
		return err
	}
	now := s.cfg.Now()
	key := normalizeEmail(u.Email)
	addr := audit.FactsFrom(ctx).Address
	if wait, _ := s.throttle.wait(key, s.network(addr), now); wait > 0 {
		return errDelayed(wait)
	}
	release, retry, ok := s.hashes.acquire(ctx)
	if !ok {
		return errBusy(retry)
	}
	match, _, err := verifyWith(s.kdf, u.PasswordHash, current, s.cfg.Argon2)
	var hash string
	if match {
		hash, err = hashWith(s.kdf, next, s.cfg.Argon2)
	}
	release()
	if !match {
		s.passwordFailed(ctx, "", "", key, u.ID, addr, now) // the accounts use case audits the change itself
		return errs.E(errs.Forbidden, "the current password is not correct")
	}
	if err != nil {
		return fmt.Errorf("change password: %w", err)
	}
	s.throttle.reset(key)
	if _, err := s.setHash(ctx, u.ID, u.PasswordHash, hash); err != nil {
		return fmt.Errorf("change password: %w", err)
	}
	return s.revokeUserSessions(ctx, u.ID, p.SessionID, WhyPassword)
}

// SetPassword is an admin's reset of a user's password: the policy holds, the
// account's failures are forgotten, and every session of the user ends.
func (s *Service) SetPassword(ctx context.Context, userID int64, password string) error {
	u, err := s.st.UserByID(ctx, userID)
	if err != nil {
		return fmt.Errorf("set password: %w", err)
	}
	if err := CheckPasswordPolicy(u.Email, password); err != nil {
		return err
	}
	hash, err := s.hash(ctx, password)
	if err != nil {
		return err
	}
	if _, err := s.setHash(ctx, userID, "", hash); err != nil {
		return fmt.Errorf("set password: %w", err)
	}
	s.throttle.reset(normalizeEmail(u.Email))
	return s.revokeUserSessions(ctx, userID, "", WhyPassword)
}

// RevokeUser ends every session of a user, for why (WhyDisabled, WhyDeleted,
// WhyAdmin, ...): call it after disabling, demoting or before deleting a user.
func (s *Service) RevokeUser(ctx context.Context, userID int64, why string) error {
	return s.revokeUserSessions(ctx, userID, "", why)
}

func (s *Service) revokeUserSessions(ctx context.Context, userID int64, keep, why string) error {
	ids, err := s.st.RevokeUserSessions(ctx, userID, keep, s.cfg.Now(), why)
	if err != nil {
		return fmt.Errorf("revoke sessions of user %d: %w", userID, err)
	}
	s.cache.revoke(ids...)
	if len(ids) > 0 {
		// The actor is whoever asked (ctx): the user's sessions are the target.
		s.audit(ctx, store.AuditRecord{Action: "auth.sessions_revoked", Target: "user:" + strconv.FormatInt(userID, 10),
			Result: "ok", Reason: why, Params: jsonParams(map[string]any{"why": why, "sessions": len(ids)})})
	}
	return nil
}

// CreateUser adds a user after checking the e-mail, nickname, role and password
// policy. The e-mail is stored trimmed and lower-cased; a duplicate is Conflict.
func (s *Service) CreateUser(ctx context.Context, email, nickname, password, role string) (store.User, error) {
	email = normalizeEmail(email)
	if err := checkEmail(email); err != nil {
		return store.User{}, err
	}
	nickname = strings.TrimSpace(nickname)
	if err := checkNickname(nickname); err != nil {
		return store.User{}, err
	}
	if role != store.RoleAdmin && role != store.RoleUser {
		return store.User{}, errs.E(errs.Invalid, "role must be %q or %q", store.RoleAdmin, store.RoleUser)
	}
	if err := CheckPasswordPolicy(email, password); err != nil {
		return store.User{}, err
	}
	hash, err := s.hash(ctx, password)
	if err != nil {
		return store.User{}, err
	}
	u, err := s.st.CreateUser(ctx, store.User{Email: email, Nickname: nickname, PasswordHash: hash, Role: role})
	if err != nil {
		return store.User{}, fmt.Errorf("create user %s: %w", email, err)
	}
	return u, nil
}

// hash makes a new password hash in a hashing slot.
func (s *Service) hash(ctx context.Context, password string) (string, error) {
	release, retry, ok := s.hashes.acquire(ctx)
	if !ok {
		return "", errBusy(retry)
	}
	defer release()
	h, err := hashWith(s.kdf, password, s.cfg.Argon2)
	if err != nil {
		return "", errs.Wrap(errs.Internal, err, "hash password")
	}
	return h, nil
}

// HashLoad returns the password hashes running now and the logins queued for a
// slot, for tests and gauges.
func (s *Service) HashLoad() (running, queued int) { return s.hashes.stats() }

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

// Run reloads the signing keys when the change feed says they changed, and every
// minute retires superseded keys and forgets ended sessions and idle throttling
// entries, until ctx ends. (Sessions and users changed on other replicas need no
// polling here: the store pushes them to changed.)
func (s *Service) Run(ctx context.Context) error {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.keysDue:
			s.reloadKeys(ctx)
		case <-t.C:
			s.sweep(ctx, s.cfg.Now())
		}
	}
}

// catchUp does at once what is due of Run's work (tests call it instead of
// waiting for Run): the keys' reload the feed asked for, and the sweep when the
// last is a minute old.
func (s *Service) catchUp(ctx context.Context) error {
	var err error
	select {
	case <-s.keysDue:
		err = s.reloadKeys(ctx)
	default:
	}
	s.sweepMu.Lock()
	due := s.cfg.Now().Sub(s.lastSweep) >= sweepEvery
	s.sweepMu.Unlock()
	if due {
		s.sweep(ctx, s.cfg.Now())
	}
	return err
}

// reloadKeys loads the signing keys after a rotation (the new key signs from now
// on) or a retirement.
func (s *Service) reloadKeys(ctx context.Context) error {
	err := s.loadKeys(ctx)
	if err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "reload signing keys", slog.String("error", err.Error()))
	}
	return err
}

// sweep retires superseded signing keys and forgets what has ended by now.
func (s *Service) sweep(ctx context.Context, now time.Time) {
	s.sweepMu.Lock()
	s.lastSweep = now
	s.sweepMu.Unlock()
	s.retireKeys(ctx, now)
	s.cache.sweep(now)
	s.tokens.sweep(now)
	s.addrs.sweep(now)
	s.apiTokenFails.sweep(now)
	s.throttle.sweep(now)
}

func (s *Service) audit(ctx context.Context, rec store.AuditRecord) {
	if rec.At.IsZero() {
		rec.At = s.cfg.Now()
	}
	s.cfg.Audit(ctx, rec)
}

func jsonParams(m map[string]any) string {
	b, err := json.Marshal(m)
	if err != nil {
		return ""
	}
	return string(b)
}

func normalizeEmail(email string) string { return strings.ToLower(strings.TrimSpace(email)) }

// auditEmail keeps what was typed as the e-mail of a failed login only if it looks
// like one: people type their password into the wrong field.
func auditEmail(email string) string {
	if !strings.Contains(email, "@") || len(email) > 254 {
		return ""
	}
	return email
}

// checkEmail accepts a plain address (no display name), at most 254 bytes.
func checkEmail(email string) error {
	a, err := mail.ParseAddress(email)
	if err != nil || a.Name != "" || a.Address != email || len(email) > 254 {
		return errs.E(errs.Invalid, "email must be a plain e-mail address")
	}
	return nil
}

// checkNickname accepts up to 100 printable characters.
func checkNickname(nick string) error {
	if utf8.RuneCountInString(nick) > 100 || strings.IndexFunc(nick, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return errs.E(errs.Invalid, "nickname must be at most 100 printable characters")
	}
	return nil
}
