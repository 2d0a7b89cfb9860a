package client

import (
	"context"
	"net/http"
	"net/url"
)

// The caller's own account: logging in and out, the token's refresh, sessions,
// the password and API tokens (tag accounts of api/openapi.yaml).

const (
	loginPath    = "/api/v1/user/login"
	refreshPath  = "/api/v1/user/refresh"
	logoutPath   = "/api/v1/user/logout"
	mePath       = "/api/v1/user/me"
	passwordPath = "/api/v1/user/password"
	sessionsPath = "/api/v1/user/sessions"
	myTokensPath = "/api/v1/user/tokens"
)

// Login logs in with an e-mail and password and keeps the session's token in
// the client. Wrong credentials are 401 unauthenticated, the same answer for an
// unknown e-mail and a wrong password.
func (c *Client) Login(ctx context.Context, email, password string) (LoginToken, error) {
	var t LoginToken
	_, err := c.do(ctx, http.MethodPost, loginPath, nil, map[string]string{"email": email, "password": password}, &t)
	if err == nil {
		c.SetToken(t.Token)
	}
	return t, err
}

// Refresh rotates the session's token and keeps the new one.
func (c *Client) Refresh(ctx context.Context) (Token, error) {
	var t Token
	_, err := c.do(ctx, http.MethodPost, refreshPath, nil, nil, &t)
	if err == nil {
		c.SetToken(t.Token)
	}
	return t, err
}

// Logout ends the session.
func (c *Client) Logout(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodPost, logoutPath, nil, nil, nil)
	return err
}

// Me reads who the caller is and their grants.
func (c *Client) Me(ctx context.Context) (Me, error) {
	var me Me
	_, err := c.do(ctx, http.MethodGet, mePath, nil, nil, &me)
	return me, err
}

// ChangePassword sets the caller's password; their other sessions end.
func (c *Client) ChangePassword(ctx context.Context, current, next string) error {
	_, err := c.do(ctx, http.MethodPost, passwordPath, nil,
		map[string]string{"currentPassword": current, "newPassword": next}, nil)
	return err
}

// Sessions lists the caller's live sessions.
func (c *Client) Sessions(ctx context.Context) ([]Session, error) {
	var list []Session
	_, err := c.do(ctx, http.MethodGet, sessionsPath, nil, nil, &list)
	return list, err
}

// EndSession ends one of the caller's sessions.
func (c *Client) EndSession(ctx context.Context, sessionID string) error {
	_, err := c.do(ctx, http.MethodDelete, sessionsPath+"/"+url.PathEscape(sessionID), nil, nil, nil)
	return err
}

// Tokens lists the caller's API tokens (never their secrets).
func (c *Client) Tokens(ctx context.Context) (Listing[APIToken], error) {
	return list[APIToken](ctx, c, myTokensPath, nil)
}

// CreateToken makes an API token; its secret (Token) is in this answer only.
func (c *Client) CreateToken(ctx context.Context, req TokenCreate) (CreatedAPIToken, error) {
	var t CreatedAPIToken
	_, err := c.do(ctx, http.MethodPost, myTokensPath, nil, req, &t)
	return t, err
}

// DeleteToken revokes one of the caller's API tokens.
func (c *Client) DeleteToken(ctx context.Context, tokenID string) error {
	_, err := c.do(ctx, http.MethodDelete, myTokensPath+"/"+url.PathEscape(tokenID), nil, nil, nil)
	return err
}
