package auth

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
)

// KeyRetireGrace is how long past "its successor's creation plus TokenTTL" a
// superseded signing key still verifies: replicas learn of a new key through the
// change feed (a second, or longer while the store is unreachable) and sign with
// the old one meanwhile, and their clocks differ.
const KeyRetireGrace = 5 * time.Minute

// keyReloadEvery bounds how often a token with an unknown kid makes a replica read
// the signing keys again: forged kids cost at most one store read a second.
const keyReloadEvery = time.Second

// keyring is the signing keys, opened, as one immutable value that a reload swaps
// whole, so that verification reads it with one atomic load and no lock.
type keyring struct {
	keys    map[string]ringKey
	signKID string // the newest key's: it signs; the others only verify
}

type ringKey struct {
	secret []byte
	// verify is secret already boxed in an interface, so keyFor returns it
	// without an allocation per token.
	verify any
	// retireAt is the last instant the key verifies: KeyRetireGrace past its
	// successor's creation and TokenTTL, when no token it signed is still alive.
	// Zero for the newest key.
	retireAt time.Time
}

// retired reports whether some key of the ring no longer verifies at now.
func (r *keyring) retired(now time.Time) bool {
	for _, k := range r.keys {
		if !k.retireAt.IsZero() && now.After(k.retireAt) {
			return true
		}
	}
	return false
}

// NewSigningKey makes a signing key: a fresh kid and 32 random bytes, sealed with sl
// (docs/security.md item 25) and stamped now. internal/keys uses it for a rotation.
func NewSigningKey(sl *seal.Sealer, now time.Time) (store.SigningKey, error) {
	secret := make([]byte, keyBytes)
	_, _ = rand.Read(secret) // never fails (crypto/rand, Go 1.24+)
	kid := randomID(12)
	sealed, err := sl.Seal(secret, seal.SigningKeyAAD(kid))
	if err != nil {
		return store.SigningKey{}, fmt.Errorf("seal the signing key: %w", err)
	}
	return store.SigningKey{ID: kid, Secret: sealed, Sealed: true, CreatedAt: now}, nil
}

// loadKeys reads the signing keys and installs them. On the way it seals keys an
// older vmgate stored raw (in place, once, whichever replica comes first: the
// store's transaction holds the table) and creates the first key of a new
// database. A key that does not open fails the load and leaves the installed
// ring alone.
func (s *Service) loadKeys(ctx context.Context) error {
	s.keyMu.Lock()
	defer s.keyMu.Unlock()
	keys, err := s.st.SigningKeys(ctx)
	if err != nil {
		return fmt.Errorf("load signing keys: %w", err)
	}
	if countRaw(keys) > 0 {
		if keys, err = s.sealRawKeys(ctx); err != nil {
			return err
		}
	}
	if len(keys) == 0 {
		k, err := NewSigningKey(s.cfg.Sealer, s.cfg.Now())
		if err != nil {
			return err
		}
		if keys, err = s.st.CreateSigningKey(ctx, k); err != nil {
			return fmt.Errorf("create signing key: %w", err)
		}
	}
	if len(keys) == 0 {
		return errors.New("store kept no signing key")
	}
	r := &keyring{keys: make(map[string]ringKey, len(keys)), signKID: keys[len(keys)-1].ID}
	for i, k := range keys {
		if k.ID == "" || !k.Sealed {
			return fmt.Errorf("signing key %q: no id, or not sealed", k.ID)
		}
		secret, err := s.cfg.Sealer.Open(k.Secret, seal.SigningKeyAAD(k.ID))
		if err != nil {
			return fmt.Errorf("signing key %s: %w", k.ID, err)
		}
		if len(secret) < keyBytes {
			return fmt.Errorf("signing key %s: want at least %d bytes", k.ID, keyBytes)
		}
		rk := ringKey{secret: secret, verify: secret}
		if i < len(keys)-1 {
			rk.retireAt = keys[i+1].CreatedAt.Add(s.cfg.TokenTTL + KeyRetireGrace)
		}
		r.keys[k.ID] = rk
	}
	s.ring.Store(r)
	return nil
}

func countRaw(keys []store.SigningKey) int {
	n := 0
	for _, k := range keys {
		if !k.Sealed {
			n++
		}
	}
	return n
}

// sealRawKeys seals the signing keys stored raw and returns the keys after.
func (s *Service) sealRawKeys(ctx context.Context) ([]store.SigningKey, error) {
	n, err := s.st.ResealSecrets(ctx, func(sec store.SealedSecret) ([]byte, error) {
		if sec.Kind != store.SealedSigningKey || !sec.Clear {
			return nil, nil
		}
		return s.cfg.Sealer.Seal(sec.Value, seal.SigningKeyAAD(sec.Name))
	})
	if err != nil {
		return nil, fmt.Errorf("seal the raw signing keys: %w", err)
	}
	if n > 0 {
		s.log.LogAttrs(ctx, slog.LevelInfo, "sealed the signing keys stored raw", slog.Int("keys", n),
			slog.String("seal_key", s.cfg.Sealer.CurrentID()))
	}
	keys, err := s.st.SigningKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("load signing keys: %w", err)
	}
	return keys, nil
}

// unknownKIDError is keyFor's refusal of a kid the ring does not hold.
type unknownKIDError struct{ kid string }

func (e *unknownKIDError) Error() string { return "unknown kid" }

// learnKID reloads the signing keys for a token whose kid this replica does not
// know — a key another replica has learnt of first — and reports whether the kid
// is known now. Reloads are shared by concurrent callers and happen at most once
// every keyReloadEvery, and only for a kid shaped like vmgate's.
func (s *Service) learnKID(ctx context.Context, kid string) bool {
	if !plausibleKID(kid) {
		return false
	}
	ch := s.loads.DoChan("\x00signing keys", func() (any, error) {
		s.keyMu.Lock()
		now := s.cfg.Now()
		if !s.lastKeyLoad.IsZero() && now.Sub(s.lastKeyLoad) < keyReloadEvery {
			s.keyMu.Unlock()
			return nil, nil
		}
		s.lastKeyLoad = now
		s.keyMu.Unlock()
		err := s.loadKeys(context.WithoutCancel(ctx))
		if err != nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "reload signing keys", slog.String("error", err.Error()))
		}
		return nil, err
	})
	select {
	case <-ch:
	case <-ctx.Done():
		return false
	}
	_, ok := s.ring.Load().keys[kid]
	return ok
}

// plausibleKID accepts what randomID makes: base64url, a few dozen characters.
func plausibleKID(kid string) bool {
	if kid == "" || len(kid) > 64 {
		return false
	}
	for _, c := range []byte(kid) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// retireKeys deletes the keys that no longer verify, once this replica's ring has
// one, and reloads. Every replica may do it; the store's statement is idempotent.
func (s *Service) retireKeys(ctx context.Context, now time.Time) {
	if !s.ring.Load().retired(now) {
		return
	}
	n, err := s.st.DeleteSupersededSigningKeys(ctx, now.Add(-s.cfg.TokenTTL-KeyRetireGrace))
	if err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "retire signing keys", slog.String("error", err.Error()))
		return
	}
	if n > 0 {
		s.log.LogAttrs(ctx, slog.LevelInfo, "retired signing keys", slog.Int("keys", n))
	}
	if err := s.loadKeys(ctx); err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "reload signing keys", slog.String("error", err.Error()))
	}
}
