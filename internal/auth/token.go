package auth

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
)

// Token is a signed access token and what its holder may want to know of it.
type Token struct {
	Raw        string    // the compact JWT, for the Authorization: Bearer header
	ExpiresAt  time.Time // exp: TokenTTL after issue, never past the session's end
	SessionID  string    // sid
	Generation int64     // gen: how many times the session was refreshed
}

// Principal is the caller a valid token stands for, as Authenticate found it.
type Principal struct {
	UserID     int64
	Email      string
	Nickname   string
	Role       string // store.RoleAdmin or store.RoleUser
	SessionID  string
	Generation int64
	TokenID    string    // jti
	ExpiresAt  time.Time // the token's exp (an API token's end): a front end holding the token renews it before then
	// APITokenID is the API token the caller authenticated with (apitokens.go);
	// empty for a login session, whose SessionID is set instead.
	APITokenID string
	// TokenGrants limit an API token to these clusters, cluster id → role: the
	// effective role is the weaker of this and the owner's current grant. nil:
	// all of the owner's grants. Read-only.
	TokenGrants map[int64]string
}

// IsAdmin reports whether the caller may act as an admin: an admin's login
// session, or an admin's API token without grants (a token limited to some
// clusters is no admin, whoever owns it).
func (p Principal) IsAdmin() bool {
	return p.Role == store.RoleAdmin && p.TokenGrants == nil
}

const (
	tokenType = "at+jwt" // RFC 9068; checked by us, the library does not
	// MaxTokenBytes is the largest token Authenticate parses (docs/security.md item 4). Ours are
	// about 400 bytes; anything near the limit is an attack on the parser.
	MaxTokenBytes = 4 << 10
	keyBytes      = 32 // HS256 wants a key as long as its hash
)

// tokenClaims are the claims vmgate puts in a token.
type tokenClaims struct {
	jwt.RegisteredClaims
	SessionID  string `json:"sid"`
	Generation *int64 `json:"gen"` // a pointer so that a missing gen is told from 0
}

// verified is what a token that passed every check says.
type verified struct {
	userID int64
	sid    string
	gen    int64
	jti    string
	exp    time.Time
}

func newParser(c Config) *jwt.Parser {
	return jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithStrictDecoding(),
		jwt.WithIssuer(c.Issuer),
		jwt.WithAudience(c.Audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(c.Leeway),
		jwt.WithTimeFunc(c.Now),
	)
}

// issue signs a token for generation gen of session sid.
func (s *Service) issue(userID int64, sid string, gen int64, sessionEnd, now time.Time) (Token, error) {
	exp := now.Add(s.cfg.TokenTTL)
	if sessionEnd.Before(exp) {
		exp = sessionEnd
	}
	exp = exp.Truncate(time.Second) // what NumericDate keeps
	if !exp.After(now) {
		return Token{}, errToken(errors.New("session ends within the second"))
	}
	claims := tokenClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    s.cfg.Issuer,
			Subject:   strconv.FormatInt(userID, 10),
			Audience:  jwt.ClaimStrings{s.cfg.Audience},
			ExpiresAt: jwt.NewNumericDate(exp),
			NotBefore: jwt.NewNumericDate(now),
			IssuedAt:  jwt.NewNumericDate(now),
			ID:        randomID(16),
		},
		SessionID:  sid,
		Generation: &gen,
	}
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	t.Header["typ"] = tokenType
	r := s.ring.Load()
	t.Header["kid"] = r.signKID
	raw, err := t.SignedString(r.keys[r.signKID].secret)
	if err != nil {
		return Token{}, errs.Wrap(errs.Internal, err, "sign token")
	}
	return Token{Raw: raw, ExpiresAt: exp, SessionID: sid, Generation: gen}, nil
}

// verify checks everything a token says by itself (docs/security.md item 1-4): size, shape,
// strict base64, the one algorithm, typ, a known kid and no other header, the
// signature, iss, aud, exp, nbf and iat, and our own claims. It never fetches
// anything: there is no header it would follow.
//
// A token that passed is remembered by its text (tokenCache): its next use costs a
// map lookup, the exp and the key's standing.
func (s *Service) verify(raw string) (verified, error) {
	if len(raw) > MaxTokenBytes {
		return verified{}, errToken(errors.New("token too large"))
	}
	if t, ok := s.tokens.get(raw); ok {
		if now := s.cfg.Now(); now.Before(t.v.exp) && s.kidVerifies(t.kid, now) {
			return t.v, nil
		}
	}
	var c tokenClaims
	tok, err := s.parser.ParseWithClaims(raw, &c, s.keyFor)
	if err != nil {
		return verified{}, errToken(err)
	}
	// The library allows Leeway past exp too; we issue and check our own tokens, so a
	// token ends when it says it does.
	if !s.cfg.Now().Before(c.ExpiresAt.Time) {
		return verified{}, errToken(jwt.ErrTokenExpired)
	}
	uid, err := strconv.ParseInt(c.Subject, 10, 64)
	switch {
	case err != nil || uid <= 0 || strconv.FormatInt(uid, 10) != c.Subject:
		return verified{}, errToken(errors.New("bad sub"))
	case c.SessionID == "" || c.ID == "" || c.Generation == nil || *c.Generation < 0:
		return verified{}, errToken(errors.New("missing sid, jti or gen"))
	case c.NotBefore == nil || c.IssuedAt == nil:
		return verified{}, errToken(errors.New("missing nbf or iat"))
	}
	v := verified{userID: uid, sid: c.SessionID, gen: *c.Generation, jti: c.ID, exp: c.ExpiresAt.Time}
	kid, _ := tok.Header["kid"].(string) // keyFor accepted it
	s.tokens.put(raw, verifiedToken{v: v, kid: kid})
	return v, nil
}

// kidVerifies reports whether the key kid still verifies at now: in the ring and
// not retired (keyFor's test).
func (s *Service) kidVerifies(kid string, now time.Time) bool {
	key, ok := s.ring.Load().keys[kid]
	return ok && (key.retireAt.IsZero() || !now.After(key.retireAt))
}

// keyFor picks the key by kid. A header may hold alg, typ and kid and nothing else:
// jku, x5u, jwk and x5c (keys from the token's own say-so) and crit are refused.
func (s *Service) keyFor(t *jwt.Token) (any, error) {
	if len(t.Header) != 3 {
		return nil, errors.New("unexpected header parameters")
	}
	if typ, _ := t.Header["typ"].(string); typ != tokenType {
		return nil, errors.New("wrong typ")
	}
	kid, _ := t.Header["kid"].(string)
	key, ok := s.ring.Load().keys[kid]
	if !ok {
		return nil, &unknownKIDError{kid: kid}
	}
	if !s.kidVerifies(kid, s.cfg.Now()) {
		return nil, errors.New("retired kid")
	}
	return key.verify, nil
}

// verifyLearning is verify, and once more after learning the keys again when the
// token names a kid this replica does not know (learnKID: bounded).
func (s *Service) verifyLearning(ctx context.Context, raw string) (verified, error) {
	v, err := s.verify(raw)
	if err == nil {
		return v, nil
	}
	if unknown := (*unknownKIDError)(nil); errors.As(err, &unknown) && s.learnKID(ctx, unknown.kid) {
		return s.verify(raw)
	}
	return v, err
}
