package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/time/rate"

	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
)

// Config tunes a Service. Zero fields take the defaults named in each comment, so
// Config{Sealer: s} is a production configuration.
type Config struct {
	// Sealer seals the signing keys at rest (required): with the key file, the same
	// that seals the clusters' secrets (internal/seal, docs/security.md item 25).
	Sealer *seal.Sealer

	Issuer   string // JWT iss; default "vmgate"
	Audience string // JWT aud; default "vmgate"

	TokenTTL   time.Duration // lifetime of one token; default 1 h
	SessionMax time.Duration // absolute lifetime of a session from login; default 24 h
	// ReuseGrace forgives a rotated token presented again at refresh this soon after
	// the rotation (a double click, a race of the client's own tabs): 401 without
	// revoking the session. Default 2 s; negative disables the grace.
	ReuseGrace time.Duration
	// Leeway is the clock skew allowed for iat and nbf (replicas' clocks differ).
	// exp gets none: vmgate checks the tokens it issued itself. Default 30 s.
	Leeway time.Duration
	Now    func() time.Time // default time.Now

	// MaxConcurrentHashes bounds argon2 computations running at once: each takes
	// Argon2.Memory of RAM and a core. Default max(1, GOMAXPROCS-1), so that one
	// core always serves authenticated traffic during a login flood.
	MaxConcurrentHashes int
	// HashWait bounds how long a login expects to wait for a hashing slot: logins
	// queue in FIFO order for a free slot, and one that would wait longer than this
	// (judged from the queue's length, the slots and the measured time of a hash) is
	// answered 429 with Retry-After. Default 1 s; negative means no queue at all.
	HashWait time.Duration
	// HashQueue fixes the queue's length instead of deriving it from HashWait.
	// Default 0: derived.
	HashQueue int
	// RefusalPause holds a login that is answered 429 (throttled, or the queue
	// full) this long, at most its Retry-After, before the answer: a flood whose
	// clients retry at once then costs sleeping goroutines rather than cores.
	// Default 1 s; negative answers at once.
	RefusalPause time.Duration
	// Hasher derives a password's key; default Argon2ID. Tests wrap it to count or
	// hold the hashes in flight; nothing else should set it.
	Hasher func(password, salt []byte, p Params) []byte
	Argon2 Params // default DefaultParams()

	// IPv4Prefix and IPv6Prefix are the prefix lengths that make a client network,
	// the unit of the per-address bucket and of the backoff: default 32 (the address
	// itself) and 64 (a subnet, which one customer usually holds whole).
	IPv4Prefix int
	IPv6Prefix int
	// PerAddressRate and PerAddressBurst are a token bucket of login attempts per
	// client network. Default 10 a minute with a burst of 10; rate.Inf disables it.
	PerAddressRate  rate.Limit
	PerAddressBurst int
	// APITokenFailureRate and APITokenFailureBurst are a token bucket of failed
	// API token uses per client network (a token unknown, expired, of a disabled
	// owner, or malformed): a network that emptied it is answered 429 before its
	// next token is looked at. Default 10 a minute with a burst of 10; rate.Inf
	// disables it.
	APITokenFailureRate  rate.Limit
	APITokenFailureBurst int
	// FailuresBeforeBackoff consecutive wrong passwords for one account from one
	// client network delay that account's logins from that network by BackoffBase,
	// doubling with each further failure up to MaxBackoff; other networks are not
	// affected. Defaults 5, 1 s and 15 min. FailureMemory is how long a quiet
	// (account, network) keeps its count (default 24 h).
	FailuresBeforeBackoff int
	BackoffBase           time.Duration
	MaxBackoff            time.Duration
	FailureMemory         time.Duration
	// AccountFailureLimit wrong passwords for one account per AccountFailureWindow,
	// from all networks together, block the account for AccountBlock on every
	// network it has not logged in from within KnownNetworkMemory (as the store
	// remembers: store.NoteLoginNetwork, so every replica agrees and a restart
	// forgets nothing; the store prunes them after store.DefaultPruneLoginNetworks,
	// the same 30 days). Defaults 100, 1 h, 15 min (and at most 15 min) and 30 days.
	AccountFailureLimit  int
	AccountFailureWindow time.Duration
	AccountBlock         time.Duration
	KnownNetworkMemory   time.Duration
	// MaxTracked bounds each throttling table — buckets, (account, network)
	// failures, accounts, known networks — to this many entries (default 100 000);
	// beyond it the entries that matter least go first.
	MaxTracked int

	// SessionCacheSize bounds the in-process session cache (default 100 000).
	SessionCacheSize int
	// SessionRecheck is how old a cached session may grow before it is read from the
	// store again: a safety net under the change feed, for a change it missed.
	// Default 1 min.
	SessionRecheck time.Duration
	// SeenInterval is how often, at most, a session's use is written to the store
	// (its LastSeenAt, shown in the user's list of sessions) by one replica; login
	// and refresh write it besides. Default 1 min.
	SeenInterval time.Duration

	Logger *slog.Logger // default: discard
	// Audit receives security events (logins, lockouts, token reuse, revocations)
	// with the request's context: give it audit.Trail.Record, which attributes
	// each record from the request's facts (address, request id, and the caller
	// where the record names nobody else). It never sees a password or a token.
	// Default: none.
	Audit func(ctx context.Context, rec store.AuditRecord)
	// LoginOutcome counts each login attempt: "ok", "bad_credentials", "locked",
	// "rate_limited" or "busy". Default: none.
	LoginOutcome func(outcome string)
}

// MaxAccountBlock is the longest an account is ever blocked on the networks it has
// not logged in from (docs/security.md item 28): whoever guesses from many networks can make
// the owner wait, never keep them out.
const MaxAccountBlock = 15 * time.Minute

// Login outcomes passed to Config.LoginOutcome.
const (
	OutcomeOK             = "ok"
	OutcomeBadCredentials = "bad_credentials"
	OutcomeLocked         = "locked"
	OutcomeRateLimited    = "rate_limited"
	OutcomeBusy           = "busy"
)

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// withDefaults fills zero fields and checks the rest.
func (c Config) withDefaults() (Config, error) {
	if c.Sealer == nil {
		return c, errors.New("auth: no Sealer for the signing keys")
	}
	c.Issuer = orDefault(c.Issuer, "vmgate")
	c.Audience = orDefault(c.Audience, "vmgate")
	c.TokenTTL = orDefault(c.TokenTTL, time.Hour)
	c.SessionMax = orDefault(c.SessionMax, 24*time.Hour)
	c.ReuseGrace = orDefault(c.ReuseGrace, 2*time.Second)
	c.Leeway = orDefault(c.Leeway, 30*time.Second)
	if c.Now == nil {
		c.Now = time.Now
	}
	c.MaxConcurrentHashes = orDefault(c.MaxConcurrentHashes, defaultHashSlots())
	c.HashWait = orDefault(c.HashWait, time.Second)
	c.RefusalPause = orDefault(c.RefusalPause, time.Second)
	if c.Hasher == nil {
		c.Hasher = Argon2ID
	}
	c.Argon2 = orDefault(c.Argon2, DefaultParams())
	c.PerAddressRate = orDefault(c.PerAddressRate, rate.Every(6*time.Second))
	c.PerAddressBurst = orDefault(c.PerAddressBurst, 10)
	c.APITokenFailureRate = orDefault(c.APITokenFailureRate, rate.Every(6*time.Second))
	c.APITokenFailureBurst = orDefault(c.APITokenFailureBurst, 10)
	c.FailuresBeforeBackoff = orDefault(c.FailuresBeforeBackoff, 5)
	c.BackoffBase = orDefault(c.BackoffBase, time.Second)
	c.MaxBackoff = orDefault(c.MaxBackoff, 15*time.Minute)
	c.FailureMemory = orDefault(c.FailureMemory, 24*time.Hour)
	c.IPv4Prefix = orDefault(c.IPv4Prefix, 32)
	c.IPv6Prefix = orDefault(c.IPv6Prefix, 64)
	c.AccountFailureLimit = orDefault(c.AccountFailureLimit, 100)
	c.AccountFailureWindow = orDefault(c.AccountFailureWindow, time.Hour)
	c.AccountBlock = orDefault(c.AccountBlock, MaxAccountBlock)
	c.KnownNetworkMemory = orDefault(c.KnownNetworkMemory, 30*24*time.Hour)
	c.MaxTracked = orDefault(c.MaxTracked, 100_000)
	c.SessionCacheSize = orDefault(c.SessionCacheSize, 100_000)
	c.SessionRecheck = orDefault(c.SessionRecheck, time.Minute)
	c.SeenInterval = orDefault(c.SeenInterval, time.Minute)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Audit == nil {
		c.Audit = func(context.Context, store.AuditRecord) {}
	}
	if c.LoginOutcome == nil {
		c.LoginOutcome = func(string) {}
	}
	if err := c.Argon2.Validate(); err != nil {
		return c, fmt.Errorf("auth config: %w", err)
	}
	for _, d := range []time.Duration{c.TokenTTL, c.SessionMax, c.Leeway, c.BackoffBase, c.MaxBackoff,
		c.FailureMemory, c.AccountFailureWindow, c.AccountBlock, c.KnownNetworkMemory, c.SessionRecheck,
		c.SeenInterval} {
		if d < 0 {
			return c, errors.New("auth config: durations must not be negative")
		}
	}
	if c.IPv4Prefix < 0 || c.IPv4Prefix > 32 || c.IPv6Prefix < 0 || c.IPv6Prefix > 128 {
		return c, errors.New("auth config: client network prefixes must be 1..32 (IPv4) and 1..128 (IPv6)")
	}
	if c.AccountBlock > MaxAccountBlock {
		return c, fmt.Errorf("auth config: an account block may last at most %v", MaxAccountBlock)
	}
	if c.MaxConcurrentHashes < 0 || c.HashQueue < 0 || c.PerAddressBurst < 0 || c.APITokenFailureBurst < 0 || c.FailuresBeforeBackoff < 0 || c.AccountFailureLimit < 0 || c.MaxTracked < 0 || c.SessionCacheSize < 0 {
		return c, errors.New("auth config: counts must not be negative")
	}
	return c, nil
}
