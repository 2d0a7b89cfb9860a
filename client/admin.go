package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// Administration: users, registered clusters, grants and the audit trail (tags
// users, clusters and audit of api/openapi.yaml; admins only).

const (
	usersPath         = "/api/v1/users"
	adminClustersPath = "/api/v1/clusters"
	auditPath         = "/api/v1/audit"
)

func userPath(userID int64) string       { return usersPath + "/" + id(userID) }
func adminClusterPath(cid int64) string  { return adminClustersPath + "/" + id(cid) }
func grantPath(cid, userID int64) string { return adminClusterPath(cid) + "/grants/" + id(userID) }

// Users lists the users.
func (c *Client) Users(ctx context.Context) (Listing[User], error) {
	return list[User](ctx, c, usersPath, nil)
}

// CreateUser adds a user.
func (c *Client) CreateUser(ctx context.Context, req UserCreate) (User, error) {
	var u User
	_, err := c.do(ctx, http.MethodPost, usersPath, nil, req, &u)
	return u, err
}

// User reads one user.
func (c *Client) User(ctx context.Context, userID int64) (User, error) {
	var u User
	_, err := c.do(ctx, http.MethodGet, userPath(userID), nil, nil, &u)
	return u, err
}

// UpdateUser changes a user: a disabled user's sessions and API tokens stop, a
// new password ends their sessions.
func (c *Client) UpdateUser(ctx context.Context, userID int64, p UserPatch) (User, error) {
	var u User
	_, err := c.do(ctx, http.MethodPatch, userPath(userID), nil, p, &u)
	return u, err
}

// DeleteUser removes a user.
func (c *Client) DeleteUser(ctx context.Context, userID int64) error {
	_, err := c.do(ctx, http.MethodDelete, userPath(userID), nil, nil, nil)
	return err
}

// UserSessions lists a user's live sessions.
func (c *Client) UserSessions(ctx context.Context, userID int64) ([]Session, error) {
	var list []Session
	_, err := c.do(ctx, http.MethodGet, userPath(userID)+"/sessions", nil, nil, &list)
	return list, err
}

// EndUserSession ends one of a user's sessions.
func (c *Client) EndUserSession(ctx context.Context, userID int64, sessionID string) error {
	_, err := c.do(ctx, http.MethodDelete, userPath(userID)+"/sessions/"+url.PathEscape(sessionID), nil, nil, nil)
	return err
}

// UserTokens lists a user's API tokens.
func (c *Client) UserTokens(ctx context.Context, userID int64) (Listing[APIToken], error) {
	return list[APIToken](ctx, c, userPath(userID)+"/tokens", nil)
}

// DeleteUserToken revokes one of a user's API tokens.
func (c *Client) DeleteUserToken(ctx context.Context, userID int64, tokenID string) error {
	_, err := c.do(ctx, http.MethodDelete, userPath(userID)+"/tokens/"+url.PathEscape(tokenID), nil, nil, nil)
	return err
}

// RegisteredClusters lists every registered cluster as admins see it.
func (c *Client) RegisteredClusters(ctx context.Context) (Listing[Cluster], error) {
	return list[Cluster](ctx, c, adminClustersPath, nil)
}

// RegisterCluster adds a PVE cluster.
func (c *Client) RegisterCluster(ctx context.Context, req ClusterCreate) (Cluster, error) {
	var cl Cluster
	_, err := c.do(ctx, http.MethodPost, adminClustersPath, nil, req, &cl)
	return cl, err
}

// Cluster reads a registered cluster.
func (c *Client) Cluster(ctx context.Context, clusterID int64) (Cluster, error) {
	var cl Cluster
	_, err := c.do(ctx, http.MethodGet, adminClusterPath(clusterID), nil, nil, &cl)
	return cl, err
}

// UpdateCluster changes a registered cluster.
func (c *Client) UpdateCluster(ctx context.Context, clusterID int64, p ClusterPatch) (Cluster, error) {
	var cl Cluster
	_, err := c.do(ctx, http.MethodPatch, adminClusterPath(clusterID), nil, p, &cl)
	return cl, err
}

// DeleteCluster removes a cluster and its grants; its tasks and audit records stay.
func (c *Client) DeleteCluster(ctx context.Context, clusterID int64) error {
	_, err := c.do(ctx, http.MethodDelete, adminClusterPath(clusterID), nil, nil, nil)
	return err
}

// PutGrant gives a user the role (operator or viewer) on a cluster.
func (c *Client) PutGrant(ctx context.Context, clusterID, userID int64, role string) (ClusterGrant, error) {
	var g ClusterGrant
	_, err := c.do(ctx, http.MethodPut, grantPath(clusterID, userID), nil, map[string]string{"role": role}, &g)
	return g, err
}

// DeleteGrant takes a user's grant on a cluster away.
func (c *Client) DeleteGrant(ctx context.Context, clusterID, userID int64) error {
	_, err := c.do(ctx, http.MethodDelete, grantPath(clusterID, userID), nil, nil, nil)
	return err
}

// Audit reads audit records, newest first: one page (AuditFilter.Before pages on).
func (c *Client) Audit(ctx context.Context, f AuditFilter) (Listing[AuditRecord], error) {
	q := url.Values{}
	set := func(k string, n int64) {
		if n > 0 {
			q.Set(k, strconv.FormatInt(n, 10))
		}
	}
	set("limit", int64(f.Limit))
	set("before", f.Before)
	set("user", f.UserID)
	set("cluster", f.ClusterID)
	if f.Action != "" {
		q.Set("action", f.Action)
	}
	if f.Result != "" {
		q.Set("result", f.Result)
	}
	if !f.From.IsZero() {
		q.Set("from", f.From.UTC().Format(time.RFC3339))
	}
	if !f.To.IsZero() {
		q.Set("to", f.To.UTC().Format(time.RFC3339))
	}
	return list[AuditRecord](ctx, c, auditPath, q)
}

// list reads the list at path, following nextCursor to the end when the API
// pages it, and decodes every item.
func list[T any](ctx context.Context, c *Client, path string, q url.Values) (Listing[T], error) {
	return listPages[T](ctx, c, path, q, nil)
}

// listPages is list, calling each (when not nil) with every page's answer.
func listPages[T any](ctx context.Context, c *Client, path string, q url.Values, each func(*Response)) (Listing[T], error) {
	var out Listing[T]
	q = cloneValues(q)
	for {
		var page []json.RawMessage
		resp, err := c.do(ctx, http.MethodGet, path, q, nil, &page)
		if err != nil {
			return out, err
		}
		if each != nil {
			each(resp)
		}
		for _, r := range page {
			var v T
			if err := c.decode(r, &v); err != nil {
				return out, err
			}
			out.Items = append(out.Items, v)
			out.Raw = append(out.Raw, r)
		}
		if resp.AsOf != nil && (out.AsOf.IsZero() || resp.AsOf.Before(out.AsOf)) {
			out.AsOf = *resp.AsOf
		}
		if resp.NextCursor == "" {
			if out.Raw == nil {
				out.Raw, out.Items = []json.RawMessage{}, []T{}
			}
			return out, nil
		}
		q.Set("cursor", resp.NextCursor)
	}
}

func cloneValues(q url.Values) url.Values {
	out := url.Values{}
	for k, vs := range q {
		out[k] = slices.Clone(vs)
	}
	return out
}
