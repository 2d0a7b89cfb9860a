package identity

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/coreos/go-oidc/v3/oidc"
)

// claims is what vmgate takes of a verified ID token.
type claims struct {
	Issuer, Subject string
	Email           string // "" when missing, unverified or not an e-mail
	Name            string
	Groups          []string
}

// Bounds on what a provider's claims may hold.
const (
	maxSubject = 255
	maxEmail   = 254
	maxName    = 100
	maxGroups  = 200
	maxGroup   = 256
)

// verify checks an ID token: go-oidc checks the signature against the provider's
// keys (fetching them again for a key it does not know: rotation), iss, aud and
// exp; vmgate adds azp (RFC: required to be the client when there are several
// audiences, and never another client), iat (present, not in the future beyond
// ClockSkew, not older than MaxTokenAge), the login's nonce, at_hash when
// present, and a subject within bounds.
func (s *Service) verify(ctx context.Context, p *oidc.Provider, raw, nonce, accessToken string) (claims, error) {
	// The provider's one key set (go-oidc caches it, and fetches the keys again
	// for a kid it does not know).
	v := p.Verifier(&oidc.Config{ClientID: s.cfg.ClientID, Now: s.cfg.Now})
	tok, err := v.Verify(ctx, raw)
	if err != nil {
		var expired *oidc.TokenExpiredError
		switch {
		case errors.As(err, &expired):
			return claims{}, fmt.Errorf("%w: %w", ErrExpired, err)
		case strings.Contains(err.Error(), "expected audience"):
			return claims{}, fmt.Errorf("%w: %w", ErrAudience, err)
		case strings.Contains(err.Error(), "id token issued by a different provider"):
			return claims{}, fmt.Errorf("%w: %w", ErrIssuer, err)
		}
		return claims{}, fmt.Errorf("%w: %w", ErrIDToken, err)
	}
	var std struct {
		AZP      string       `json:"azp"`
		IAT      *json.Number `json:"iat"`
		AtHash   string       `json:"at_hash"`
		Verified *bool        `json:"email_verified"`
	}
	if err := tok.Claims(&std); err != nil {
		return claims{}, fmt.Errorf("%w: %w", ErrClaims, err)
	}
	if (len(tok.Audience) > 1 && std.AZP == "") || (std.AZP != "" && std.AZP != s.cfg.ClientID) {
		return claims{}, ErrAuthorizedParty
	}
	now := s.cfg.Now()
	if std.IAT == nil || tok.IssuedAt.IsZero() || tok.IssuedAt.After(now.Add(s.cfg.ClockSkew)) ||
		now.Sub(tok.IssuedAt) > s.cfg.MaxTokenAge {
		return claims{}, ErrIssuedAt
	}
	if subtle.ConstantTimeCompare([]byte(tok.Nonce), []byte(nonce)) != 1 || nonce == "" {
		return claims{}, ErrNonce
	}
	if std.AtHash != "" {
		if err := tok.VerifyAccessToken(accessToken); err != nil {
			return claims{}, fmt.Errorf("%w: %w", ErrAccessTokenHash, err)
		}
	}
	if tok.Subject == "" || len(tok.Subject) > maxSubject {
		return claims{}, ErrSubject
	}
	var all map[string]json.RawMessage
	if err := tok.Claims(&all); err != nil {
		return claims{}, fmt.Errorf("%w: %w", ErrClaims, err)
	}
	c := claims{Issuer: tok.Issuer, Subject: tok.Subject}
	email := stringClaim(all, s.cfg.EmailClaim)
	if (std.Verified == nil || *std.Verified) && looksLikeEmail(email) {
		c.Email = strings.ToLower(email)
	}
	c.Name = trimPrintable(stringClaim(all, s.cfg.NameClaim), maxName)
	c.Groups = groupsClaim(all, s.cfg.GroupsClaim)
	return c, nil
}

func stringClaim(all map[string]json.RawMessage, name string) string {
	var v string
	if raw, ok := all[name]; ok {
		_ = json.Unmarshal(raw, &v) // a claim of another type is no value
	}
	return v
}

// groupsClaim reads the groups claim: an array of strings or one string. Groups
// beyond the bounds are dropped, the rest sorted and without duplicates.
func groupsClaim(all map[string]json.RawMessage, name string) []string {
	raw, ok := all[name]
	if !ok {
		return []string{}
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		var one string
		if json.Unmarshal(raw, &one) != nil {
			return []string{}
		}
		list = []string{one}
	}
	out := make([]string, 0, min(len(list), maxGroups))
	for _, g := range list {
		if g == "" || len(g) > maxGroup || g != trimPrintable(g, maxGroup) {
			continue
		}
		out = append(out, g)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > maxGroups {
		out = out[:maxGroups]
	}
	return out
}

func looksLikeEmail(e string) bool {
	at := strings.IndexByte(e, '@')
	return at > 0 && at < len(e)-1 && len(e) <= maxEmail && !strings.ContainsAny(e, " \t\r\n<>\"") &&
		strings.Count(e, "@") == 1 && e == trimPrintable(e, maxEmail)
}
