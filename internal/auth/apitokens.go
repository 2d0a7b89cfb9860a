package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// API tokens (docs/security.md item 32; docs/decisions on API tokens) are the credential of
// scripts: long-lived, revocable, never more than their owner's grants.
//
// The secret is APITokenPrefix, 32 random bytes in base62 (43 characters) and a
// CRC32 of those characters in base62 (6), like GitHub's tokens: a secret scanner
// recognises one by its prefix and tells it from look-alikes by the checksum
// without asking vmgate, and vmgate refuses a mistyped one without a store read.
// Only its SHA-256 is stored; it is shown once, at creation.
//
// A use is answered from the session cache (an entry keyed by the hash, holding a
// copy of the owner as a session's entry does), so it costs no store round trip
// once cached; the change feed drops it when the token is deleted (ChangeAPIToken)
// or its owner changes (ChangeUser), on every replica. The owner's grants are not
// copied: the fleet applies the token's grants under the owner's current ones at
// every use (fleet.Actor.Limit). Failed uses are limited per client network like
// logins; the last use is written at most once a SeenInterval per token.

// APITokenPrefix starts every API token.
const APITokenPrefix = "vmg_"

const (
	apiTokenRandomBytes = 32
	apiTokenBodyLen     = 43 // 32 bytes in base62
	apiTokenSumLen      = 6  // a CRC32 in base62
	apiTokenLen         = len(APITokenPrefix) + apiTokenBodyLen + apiTokenSumLen

	// DefaultAPITokenDays is an API token's lifetime when its creator names none.
	DefaultAPITokenDays = 90
	// MaxAPITokenDays is the longest lifetime an API token may have.
	MaxAPITokenDays = 365
	// MaxAPITokensPerUser bounds the tokens one user may hold at once.
	MaxAPITokensPerUser = 100
	// maxTokenName bounds a token's name, in characters.
	maxTokenName = 100
	// maxTokenGrants bounds the grants one token may list.
	maxTokenGrants = 1000
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// encodeBase62 writes b as a big-endian number in base62, left-padded with '0' to
// width characters.
func encodeBase62(b []byte, width int) string {
	n := new(big.Int).SetBytes(b)
	out := make([]byte, width)
	base := big.NewInt(62)
	mod := new(big.Int)
	for i := width - 1; i >= 0; i-- {
		n.DivMod(n, base, mod)
		out[i] = base62[mod.Int64()]
	}
	return string(out)
}

// apiTokenSum is the checksum part of a token whose random part is body.
func apiTokenSum(body string) string {
	var b [4]byte
	sum := crc32.ChecksumIEEE([]byte(body))
	b[0], b[1], b[2], b[3] = byte(sum>>24), byte(sum>>16), byte(sum>>8), byte(sum)
	return encodeBase62(b[:], apiTokenSumLen)
}

// newAPITokenSecret returns a fresh token.
func newAPITokenSecret() string {
	b := make([]byte, apiTokenRandomBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand, Go 1.24+)
	body := encodeBase62(b, apiTokenBodyLen)
	return APITokenPrefix + body + apiTokenSum(body)
}

// IsAPIToken reports whether raw is meant as an API token (it has the prefix),
// well-formed or not: a bearer credential that is one goes to the API tokens,
// never to the JWT parser.
func IsAPIToken(raw string) bool { return strings.HasPrefix(raw, APITokenPrefix) }

// wellFormedAPIToken checks length, alphabet and checksum.
func wellFormedAPIToken(raw string) bool {
	if len(raw) != apiTokenLen || !IsAPIToken(raw) {
		return false
	}
	rest := raw[len(APITokenPrefix):]
	for i := 0; i < len(rest); i++ {
		if strings.IndexByte(base62, rest[i]) < 0 {
			return false
		}
	}
	body, sum := rest[:apiTokenBodyLen], rest[apiTokenBodyLen:]
	return apiTokenSum(body) == sum
}

// apiTokenPattern finds what looks like an API token in free text.
var apiTokenPattern = regexp.MustCompile(`vmg_[0-9A-Za-z]{8,}`)

// RedactAPITokens replaces everything in s that looks like an API token, so that a
// token pasted into a URL or a message never reaches a log in the clear.
func RedactAPITokens(s string) string {
	if !strings.Contains(s, APITokenPrefix) {
		return s
	}
	return apiTokenPattern.ReplaceAllString(s, APITokenPrefix+"[redacted]")
}

// newAPITokenID returns a token's public id: 12 base62 characters.
func newAPITokenID() string {
	b := make([]byte, 9)
	_, _ = rand.Read(b)
	return encodeBase62(b, 12)
}

// apiTokenIDPattern is the shape of a token id.
var apiTokenIDPattern = regexp.MustCompile(`^[0-9A-Za-z]{1,64}$`)

// ValidAPITokenID reports whether id has the shape of a token id, so front ends
// refuse anything else before the store is asked.
func ValidAPITokenID(id string) bool { return apiTokenIDPattern.MatchString(id) }

// TokenGrant is an API token's role on one cluster.
type TokenGrant struct {
	ClusterID int64
	Role      string // store.GrantOperator or store.GrantViewer
}

// NewAPIToken is what CreateAPIToken needs.
type NewAPIToken struct {
	Name string
	// Days is the lifetime: 0 is DefaultAPITokenDays, at most MaxAPITokenDays.
	Days int
	// Grants limit the token; nil means every grant of its owner. An empty,
	// non-nil list is refused (a token that may do nothing).
	Grants []TokenGrant
}

// APITokenInfo is a token as lists show it: never its secret.
type APITokenInfo struct {
	ID           string
	Name         string
	CreatedAt    time.Time
	ExpiresAt    time.Time
	LastUsedAt   time.Time // zero: never used
	LastUsedFrom string
	Grants       []TokenGrant // nil: the owner's grants
}

// CreatedAPIToken is a new token with its secret, which is shown this once.
type CreatedAPIToken struct {
	APITokenInfo
	Secret string
}

// Expired reports whether the token has expired at now.
func (t APITokenInfo) Expired(now time.Time) bool { return !now.Before(t.ExpiresAt) }

func tokenInfo(t store.APIToken) APITokenInfo {
	info := APITokenInfo{ID: t.ID, Name: t.Name, CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, LastUsedAt: t.LastUsedAt,
		LastUsedFrom: t.LastUsedFrom}
	if t.Grants != nil {
		info.Grants = make([]TokenGrant, 0, len(t.Grants))
		for _, g := range t.Grants {
			info.Grants = append(info.Grants, TokenGrant{ClusterID: g.ClusterID, Role: g.Role})
		}
	}
	return info
}

// errLoginSession refuses a credential or session change to an API token.
func errLoginSession() *errs.Error {
	return errs.R(errs.Forbidden, errs.ReasonSessionRequired,
		"an API token cannot manage users, grants, API tokens, passwords or sessions: log in with your password for this")
}

// RequireLoginSession refuses (403 session_required) a caller that authenticated
// with an API token: users, grants, tokens, password changes and sessions are
// managed only from a login session, so a leaked token cannot make itself
// permanent, take over an account or lock its owner out (docs/security.md item 32,
// docs/decisions/0038).
func RequireLoginSession(p Principal) error {
	if p.APITokenID != "" {
		return errLoginSession()
	}
	return nil
}

// checkTokenRequest validates a NewAPIToken and returns its lifetime.
func checkTokenRequest(in *NewAPIToken) (time.Duration, error) {
	in.Name = strings.TrimSpace(in.Name)
	if in.Name == "" || utf8.RuneCountInString(in.Name) > maxTokenName ||
		strings.IndexFunc(in.Name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return 0, errs.E(errs.Invalid, "name must be 1 to %d printable characters", maxTokenName)
	}
	days := in.Days
	if days == 0 {
		days = DefaultAPITokenDays
	}
	if days < 1 || days > MaxAPITokenDays {
		return 0, errs.E(errs.Invalid, "expiresInDays must be from 1 to %d, not %d", MaxAPITokenDays, in.Days)
	}
	if in.Grants != nil {
		if len(in.Grants) == 0 {
			return 0, errs.E(errs.Invalid,
				"grants must list at least one cluster; leave it out for a token with all of your grants")
		}
		if len(in.Grants) > maxTokenGrants {
			return 0, errs.E(errs.Invalid, "grants may list at most %d clusters", maxTokenGrants)
		}
		seen := map[int64]bool{}
		for _, g := range in.Grants {
			if g.ClusterID < 1 || g.ClusterID > 1<<53 {
				return 0, errs.E(errs.Invalid, "grants: clusterId must be a positive integer")
			}
			if g.Role != store.GrantOperator && g.Role != store.GrantViewer {
				return 0, errs.E(errs.Invalid, "grants: role must be %q or %q", store.GrantOperator,
					store.GrantViewer)
			}
			if seen[g.ClusterID] {
				return 0, errs.E(errs.Invalid, "grants: cluster %d is listed twice", g.ClusterID)
			}
			seen[g.ClusterID] = true
		}
	}
	return time.Duration(days) * 24 * time.Hour, nil
}

// CreateAPIToken makes a token for user userID and returns it with its secret,
// which is not kept and cannot be shown again. The name is unique per user
// (Conflict name_taken); a user holds at most MaxAPITokensPerUser tokens. The
// grants are checked for shape here; that they do not exceed the owner's is the
// caller's rule (internal/accounts), and the fleet holds them under the owner's
// current grants at every use anyway. Audited as token.create.
func (s *Service) CreateAPIToken(ctx context.Context, userID int64, in NewAPIToken) (CreatedAPIToken, error) {
	ttl, err := checkTokenRequest(&in)
	if err != nil {
		return CreatedAPIToken{}, err
	}
	have, err := s.st.UserAPITokens(ctx, userID)
	if err != nil {
		return CreatedAPIToken{}, fmt.Errorf("create api token: %w", err)
	}
	if len(have) >= MaxAPITokensPerUser {
		return CreatedAPIToken{}, errs.E(errs.Conflict,
			"you hold %d API tokens, the most allowed: delete one first", len(have))
	}
	now := s.cfg.Now()
	secret := newAPITokenSecret()
	hash := sha256.Sum256([]byte(secret))
	row := store.APIToken{ID: newAPITokenID(), UserID: userID, Name: in.Name, SecretHash: hash[:], CreatedAt: now,
		ExpiresAt: now.Add(ttl).Truncate(time.Second)}
	if in.Grants != nil {
		row.Grants = make([]store.APITokenGrant, 0, len(in.Grants))
		for _, g := range in.Grants {
			row.Grants = append(row.Grants, store.APITokenGrant{ClusterID: g.ClusterID, Role: g.Role})
		}
		slices.SortFunc(row.Grants, func(a, b store.APITokenGrant) int { return int(a.ClusterID - b.ClusterID) })
	}
	created, err := s.st.CreateAPIToken(ctx, row)
	params := map[string]any{"name": in.Name, "expiresAt": row.ExpiresAt.UTC(), "grants": row.Grants}
	if err != nil {
		if errs.Is(err, errs.Conflict) {
			err = errs.R(errs.Conflict, errs.ReasonNameTaken, "you have an API token named %q already", in.Name)
		}
		s.audit(ctx, store.AuditRecord{Action: "token.create", Target: "user:" + strconv.FormatInt(userID, 10),
			Result: audit.Result(err), Params: jsonParams(params)})
		return CreatedAPIToken{}, err
	}
	s.audit(ctx, store.AuditRecord{Action: "token.create", Target: apiTokenTarget(created.ID), Result: "ok",
		Params: jsonParams(params)})
	return CreatedAPIToken{APITokenInfo: tokenInfo(created), Secret: secret}, nil
}

// APITokens lists user userID's tokens, expired ones too, the newest first.
func (s *Service) APITokens(ctx context.Context, userID int64) ([]APITokenInfo, error) {
	list, err := s.st.UserAPITokens(ctx, userID)
	if err != nil {
		return nil, fmt.Errorf("api tokens of user %d: %w", userID, err)
	}
	out := make([]APITokenInfo, 0, len(list))
	for _, t := range list {
		out = append(out, tokenInfo(t))
	}
	return out, nil
}

// DeleteAPIToken revokes token id of user userID: from now on it fails, on this
// replica at once and on the others through the change feed. A token that is not
// userID's is NotFound, like one that does not exist. Audited as token.delete,
// attributed to whoever asked (ctx).
func (s *Service) DeleteAPIToken(ctx context.Context, userID int64, id string) error {
	err := s.st.DeleteAPIToken(ctx, userID, id)
	if errs.Is(err, errs.NotFound) {
		err = errs.E(errs.NotFound, "API token not found")
	}
	s.audit(ctx, store.AuditRecord{Action: "token.delete", Target: apiTokenTarget(id), Result: audit.Result(err),
		Params: jsonParams(map[string]any{"userId": userID})})
	return err
}

func apiTokenTarget(id string) string { return "token:" + id }

// AuditSession is what an audit record and the request log name as the session
// of a caller: the login session, or "token:" and the API token's id.
func (p Principal) AuditSession() string {
	if p.APITokenID != "" {
		return apiTokenTarget(p.APITokenID)
	}
	return p.SessionID
}

// apiTokenKey is the session cache's key of a token: never the secret itself.
func apiTokenKey(hash [32]byte) string { return "token\x00" + string(hash[:]) }

// authenticateAPIToken is Authenticate for an API token: the network's budget of
// failures, the token's shape and checksum, then the token by the hash of its
// secret (from the cache, or one store read however many requests wait for it),
// its expiry and its owner's state.
func (s *Service) authenticateAPIToken(ctx context.Context, raw string) (Principal, error) {
	now := s.cfg.Now()
	addr := audit.FactsFrom(ctx).Address
	network := s.network(addr)
	if wait, blocked := s.apiTokenFails.exhausted(network, now); blocked {
		s.log.LogAttrs(ctx, slog.LevelDebug, "api token use rate-limited", slog.String("address", addr))
		return Principal{}, &errs.Error{Kind: errs.RateLimited, Reason: "rate_limited",
			Message: "too many failed API token uses; try again later", RetryAfter: retrySeconds(wait)}
	}
	if !wellFormedAPIToken(raw) {
		return Principal{}, s.apiTokenFailed(ctx, network, addr, "", 0, "malformed")
	}
	hash := sha256.Sum256([]byte(raw))
	e, err := s.apiTokenEntry(ctx, hash)
	if errs.Is(err, errs.Unauthenticated) {
		return Principal{}, s.apiTokenFailed(ctx, network, addr, "", 0, "unknown")
	}
	if err != nil {
		return Principal{}, err
	}
	switch {
	case !now.Before(e.expiresAt):
		return Principal{}, s.apiTokenFailed(ctx, network, addr, e.tokenID, e.userID, "expired")
	case e.disabled:
		return Principal{}, s.apiTokenFailed(ctx, network, addr, e.tokenID, e.userID, "owner_disabled")
	}
	s.apiTokenUses.note(e.tokenID, now, addr)
	return Principal{UserID: e.userID, Email: e.email, Nickname: e.nickname, Role: e.role, APITokenID: e.tokenID,
		TokenGrants: e.grants, ExpiresAt: e.expiresAt}, nil
}

// apiTokenFailed counts a failed use against the client network, audits it as
// auth.api_token_failed (why: malformed, unknown, expired, owner_disabled) and
// returns the one 401 every token failure gets.
func (s *Service) apiTokenFailed(ctx context.Context, network, addr, id string, userID int64, why string) error {
	s.apiTokenFails.allow(network, s.cfg.Now())
	s.log.LogAttrs(ctx, slog.LevelInfo, "api token refused", slog.String("why", why), slog.String("address", addr),
		slog.String("token", id))
	rec := store.AuditRecord{Action: "auth.api_token_failed", Result: "unauthenticated", Address: addr,
		Params: jsonParams(map[string]any{"why": why, "network": network})}
	if id != "" {
		rec.Target, rec.UserID = apiTokenTarget(id), userID
	}
	s.audit(ctx, rec)
	return errToken(errors.New("api token " + why))
}

// apiTokenEntry returns what is known of the token whose secret hashes to hash:
// from the session cache, or read from the store (with its owner) once however
// many requests wait for it. An unknown token is Unauthenticated.
func (s *Service) apiTokenEntry(ctx context.Context, hash [32]byte) (sessionEntry, error) {
	key := apiTokenKey(hash)
	cached := func() (sessionEntry, bool) {
		e, ok := s.cache.get(key)
		return e, ok && s.cfg.Now().Sub(e.loadedAt) < s.cfg.SessionRecheck
	}
	return s.cachedLoad(ctx, key, cached, "read api token", func(ctx context.Context) (sessionEntry, error) {
		return s.readAPIToken(ctx, hash)
	})
}

func (s *Service) readAPIToken(ctx context.Context, hash [32]byte) (sessionEntry, error) {
	t, err := s.st.APITokenByHash(ctx, hash[:])
	if errs.Is(err, errs.NotFound) {
		return sessionEntry{}, errToken(err)
	}
	if err != nil {
		return sessionEntry{}, fmt.Errorf("read api token: %w", err)
	}
	u, err := s.st.UserByID(ctx, t.UserID)
	if errs.Is(err, errs.NotFound) {
		u = store.User{} // deleted meanwhile: marked disabled below
	} else if err != nil {
		return sessionEntry{}, fmt.Errorf("read api token owner: %w", err)
	}
	e := sessionEntry{userID: t.UserID, expiresAt: t.ExpiresAt, email: u.Email, nickname: u.Nickname, role: u.Role,
		disabled: u.Disabled || u.ID != t.UserID, loadedAt: s.cfg.Now(), tokenID: t.ID}
	if t.Grants != nil {
		e.grants = make(map[int64]string, len(t.Grants))
		for _, g := range t.Grants {
			e.grants[g.ClusterID] = g.Role
		}
	}
	return e, nil
}
