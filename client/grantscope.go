package client

import (
	"context"
	"net/http"
)

// GrantScope narrows a grant to the guests in one of Pools (PVE pools) or
// carrying one of Tags (PVE tags).
type GrantScope struct {
	Pools []string `json:"pools"`
	Tags  []string `json:"tags"`
}

// PutScopedGrant gives a user the role on a cluster, narrowed to scope (nil:
// the whole cluster). A put replaces the grant's scope with scope.
func (c *Client) PutScopedGrant(ctx context.Context, clusterID, userID int64, role string, scope *GrantScope) (ClusterGrant, error) {
	var g ClusterGrant
	body := struct {
		Role  string      `json:"role"`
		Scope *GrantScope `json:"scope"`
	}{role, scope}
	_, err := c.do(ctx, http.MethodPut, grantPath(clusterID, userID), nil, body, &g)
	return g, err
}

// Grant reads a user's grant on a cluster, with its scope (404 without one).
func (c *Client) Grant(ctx context.Context, clusterID, userID int64) (ClusterGrant, error) {
	var g ClusterGrant
	_, err := c.do(ctx, http.MethodGet, grantPath(clusterID, userID), nil, nil, &g)
	return g, err
}
