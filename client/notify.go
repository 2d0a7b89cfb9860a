package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Notifications (tag notifications of api/openapi.yaml; admins only, the writes
// from a login session): where vmgate sends events, and what it sent.

const (
	notifyTargetsPath    = "/api/v1/notifications/targets"
	notifyDeliveriesPath = "/api/v1/notifications/deliveries"
)

func notifyTargetPath(id string) string { return notifyTargetsPath + "/" + url.PathEscape(id) }

// NotifyFilters select the events a target gets; empty fields select all.
type NotifyFilters struct {
	Events   []string `json:"events"`
	Clusters []int64  `json:"clusters"`
	Severity string   `json:"severity"`
}

// NotifyTarget is a notification target. Its secret is never sent back:
// HasSecret says whether it has one.
type NotifyTarget struct {
	ID            string        `json:"id"`
	Name          string        `json:"name"`
	Kind          string        `json:"kind"`
	Endpoint      string        `json:"endpoint"`
	HasSecret     bool          `json:"hasSecret"`
	Filters       NotifyFilters `json:"filters"`
	RatePerMinute int           `json:"ratePerMinute"`
	CreatedAt     time.Time     `json:"createdAt"`
	UpdatedAt     time.Time     `json:"updatedAt"`
	RawJSON
}

// NotifyTargetCreate is the body of POST /notifications/targets.
type NotifyTargetCreate struct {
	Name          string         `json:"name"`
	Kind          string         `json:"kind"`
	Endpoint      string         `json:"endpoint"`
	Secret        string         `json:"secret,omitempty"`
	Filters       *NotifyFilters `json:"filters,omitempty"`
	RatePerMinute int            `json:"ratePerMinute,omitempty"`
}

// NotifyTargetPatch is the body of PATCH /notifications/targets/{id}; nil
// fields stay as they are.
type NotifyTargetPatch struct {
	Name          *string        `json:"name,omitempty"`
	Endpoint      *string        `json:"endpoint,omitempty"`
	Secret        *string        `json:"secret,omitempty"`
	Filters       *NotifyFilters `json:"filters,omitempty"`
	RatePerMinute *int           `json:"ratePerMinute,omitempty"`
}

// NotifyTestResult is what a target's receiver answered a test.
type NotifyTestResult struct {
	Delivered bool   `json:"delivered"`
	Status    int    `json:"status,omitempty"`
	Error     string `json:"error,omitempty"`
	RawJSON
}

// NotifyDelivery is one event to one target.
type NotifyDelivery struct {
	ID         int64      `json:"id"`
	TargetID   string     `json:"targetId"`
	EventID    int64      `json:"eventId"`
	Kind       string     `json:"kind"`
	Severity   string     `json:"severity"`
	ClusterID  int64      `json:"clusterId,omitempty"`
	Subject    string     `json:"subject"`
	Link       string     `json:"link,omitempty"`
	At         time.Time  `json:"at"`
	State      string     `json:"state"`
	Attempts   int        `json:"attempts"`
	NextAt     *time.Time `json:"nextAt,omitempty"`
	SentAt     *time.Time `json:"sentAt,omitempty"`
	LastError  string     `json:"lastError,omitempty"`
	LastStatus int        `json:"lastStatus,omitempty"`
	MessageID  int64      `json:"messageId,omitempty"`
	RawJSON
}

// NotifyDeliveryFilter selects deliveries; zero fields do not filter.
type NotifyDeliveryFilter struct {
	TargetID string
	State    string // pending, delivered, dead
	Limit    int
	Before   int64
}

// NotifyTargets lists the targets.
func (c *Client) NotifyTargets(ctx context.Context) (Listing[NotifyTarget], error) {
	return list[NotifyTarget](ctx, c, notifyTargetsPath, nil)
}

// NotifyTarget reads one target.
func (c *Client) NotifyTarget(ctx context.Context, id string) (NotifyTarget, error) {
	var t NotifyTarget
	_, err := c.do(ctx, http.MethodGet, notifyTargetPath(id), nil, nil, &t)
	return t, err
}

// CreateNotifyTarget adds a target.
func (c *Client) CreateNotifyTarget(ctx context.Context, req NotifyTargetCreate) (NotifyTarget, error) {
	var t NotifyTarget
	_, err := c.do(ctx, http.MethodPost, notifyTargetsPath, nil, req, &t)
	return t, err
}

// UpdateNotifyTarget changes a target.
func (c *Client) UpdateNotifyTarget(ctx context.Context, id string, p NotifyTargetPatch) (NotifyTarget, error) {
	var t NotifyTarget
	_, err := c.do(ctx, http.MethodPatch, notifyTargetPath(id), nil, p, &t)
	return t, err
}

// DeleteNotifyTarget removes a target and its deliveries.
func (c *Client) DeleteNotifyTarget(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, notifyTargetPath(id), nil, nil, nil)
	return err
}

// TestNotifyTarget sends a test event to a target now.
func (c *Client) TestNotifyTarget(ctx context.Context, id string) (NotifyTestResult, error) {
	var r NotifyTestResult
	_, err := c.do(ctx, http.MethodPost, notifyTargetPath(id)+"/test", nil, nil, &r)
	return r, err
}

// NotifyDeliveries lists deliveries, newest first (one page: Limit, Before).
func (c *Client) NotifyDeliveries(ctx context.Context, f NotifyDeliveryFilter) (Listing[NotifyDelivery], error) {
	q := url.Values{}
	if f.TargetID != "" {
		q.Set("target", f.TargetID)
	}
	if f.State != "" {
		q.Set("state", f.State)
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	if f.Before > 0 {
		q.Set("before", strconv.FormatInt(f.Before, 10))
	}
	return list[NotifyDelivery](ctx, c, notifyDeliveriesPath, q)
}

// RetryNotifyDelivery sends a dead-lettered delivery again.
func (c *Client) RetryNotifyDelivery(ctx context.Context, id int64) (NotifyDelivery, error) {
	var d NotifyDelivery
	_, err := c.do(ctx, http.MethodPost, notifyDeliveriesPath+"/"+strconv.FormatInt(id, 10)+"/retry", nil, nil, &d)
	return d, err
}
