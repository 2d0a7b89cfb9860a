package auth

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/sync/singleflight"

	"github.com/vmgate/vmgate/internal/store"
)

// Store is the part of store.Store this package uses; every store.Store is one.
type Store interface {
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

	// secondStep, when set, turns a right password of a user with a second
	// factor into a ticket (secondstep.go).
	secondStep SecondStep

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
