package client

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Single sign-on (tag identity of api/openapi.yaml; docs/decisions/0109, 0110).

const groupMappingsPath = "/api/v1/identity/group-mappings"

// GroupMapping gives the members of a provider's group a role and grants at each
// single sign-on login.
type GroupMapping struct {
	ID        int64               `json:"id"`
	Group     string              `json:"group"`
	Role      string              `json:"role"`
	Grants    []GroupMappingGrant `json:"grants"`
	CreatedAt time.Time           `json:"createdAt"`
	UpdatedAt time.Time           `json:"updatedAt"`
}

// GroupMappingGrant is one grant of a GroupMapping.
type GroupMappingGrant struct {
	ClusterID int64  `json:"clusterId"`
	Role      string `json:"role"`
	// Scope narrows the grant to the guests of some PVE pools or tags; nil is
	// the whole cluster.
	Scope *GrantScope `json:"scope"`
}

// GroupMappingInput is a mapping as it is created or replaced.
type GroupMappingInput struct {
	Group  string              `json:"group"`
	Role   string              `json:"role"`
	Grants []GroupMappingGrant `json:"grants"`
}

// GroupMappings lists the group mappings (an admin's login session).
func (c *Client) GroupMappings(ctx context.Context) ([]GroupMapping, error) {
	var out []GroupMapping
	_, err := c.do(ctx, http.MethodGet, groupMappingsPath, nil, nil, &out)
	return out, err
}

// CreateGroupMapping adds a group mapping.
func (c *Client) CreateGroupMapping(ctx context.Context, in GroupMappingInput) (GroupMapping, error) {
	var out GroupMapping
	_, err := c.do(ctx, http.MethodPost, groupMappingsPath, nil, in, &out)
	return out, err
}

// UpdateGroupMapping replaces group mapping mappingID.
func (c *Client) UpdateGroupMapping(ctx context.Context, mappingID int64, in GroupMappingInput) (GroupMapping, error) {
	var out GroupMapping
	_, err := c.do(ctx, http.MethodPut, groupMappingsPath+"/"+id(mappingID), nil, in, &out)
	return out, err
}

// DeleteGroupMapping removes group mapping mappingID; its grants go at each member's next login.
func (c *Client) DeleteGroupMapping(ctx context.Context, mappingID int64) error {
	_, err := c.do(ctx, http.MethodDelete, groupMappingsPath+"/"+id(mappingID), nil, nil, nil)
	return err
}

// SSOStart is a single sign-on of a native client (RFC 8252 with PKCE) under way:
// the address to open in a browser, and what exchanging the code needs.
type SSOStart struct {
	URL      string // open it in a browser
	State    string // the loopback redirect must bring it back
	verifier string
}

// StartSSO prepares a single sign-on whose browser comes back to redirectURI (a
// loopback address the caller listens on): a fresh PKCE verifier (S256) and state.
func (c *Client) StartSSO(redirectURI string) SSOStart {
	verifier, state := randomB64(32), randomB64(16)
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{"redirect_uri": {redirectURI}, "code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"}, "state": {state}}
	return SSOStart{URL: c.base + "/auth/oidc/login?" + q.Encode(), State: state, verifier: verifier}
}

// FinishSSO exchanges the code the loopback redirect received, with the PKCE
// verifier of s, for a session's first token (POST /auth/oidc/token).
func (c *Client) FinishSSO(ctx context.Context, s SSOStart, code string) (LoginToken, error) {
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "code_verifier": {s.verifier}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/auth/oidc/token", strings.NewReader(form.Encode()))
	if err != nil {
		return LoginToken{}, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return LoginToken{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return LoginToken{}, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		_ = json.Unmarshal(body, &e)
		return LoginToken{}, fmt.Errorf("single sign-on refused (%d %s): %s", resp.StatusCode, e.Error, e.Description)
	}
	var t LoginToken
	if err := json.Unmarshal(body, &t); err != nil {
		return LoginToken{}, fmt.Errorf("single sign-on answer: %w", err)
	}
	return t, nil
}

func randomB64(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand, Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

// LinkedIdentity is an identity at the single sign-on provider and its user.
type LinkedIdentity struct {
	Issuer      string    `json:"issuer"`
	Subject     string    `json:"subject"`
	UserID      int64     `json:"userId"`
	Email       string    `json:"email"`
	Groups      []string  `json:"groups"`
	LastLoginAt time.Time `json:"lastLoginAt"`
}

// UserIdentities lists the identities that log in as user userID (admin).
func (c *Client) UserIdentities(ctx context.Context, userID int64) ([]LinkedIdentity, error) {
	var out []LinkedIdentity
	_, err := c.do(ctx, http.MethodGet, userPath(userID)+"/identities", nil, nil, &out)
	return out, err
}

// LinkIdentity makes the identity (issuer, subject) log in as user userID (an
// admin's login session).
func (c *Client) LinkIdentity(ctx context.Context, userID int64, issuer, subject string) (LinkedIdentity, error) {
	var out LinkedIdentity
	in := struct {
		Issuer  string `json:"issuer"`
		Subject string `json:"subject"`
	}{issuer, subject}
	_, err := c.do(ctx, http.MethodPut, userPath(userID)+"/identities", nil, in, &out)
	return out, err
}
