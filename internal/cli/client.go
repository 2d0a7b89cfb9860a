// Package cli is the client side of vmgate's command line: a small typed client of
// vmgate's own HTTP API (the same one the end-to-end tests drive) and the rendering
// of its answers for a terminal.
package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Client talks to one vmgate server.
type Client struct {
	BaseURL string // e.g. http://127.0.0.1:8080
	Token   string // bearer token; empty for login
	HTTP    *http.Client
}

// NewClient returns a client with sane timeouts.
func NewClient(baseURL, token string) *Client {
	return &Client{
		BaseURL: strings.TrimRight(baseURL, "/"),
		Token:   token,
		HTTP:    &http.Client{Timeout: 6 * time.Minute},
	}
}

// TrustCAFile makes the client trust the certificates of the PEM file at path, and
// only them, for an https:// server whose certificate a private CA signed (or a
// self-signed one). An empty path keeps the system's roots.
func (c *Client) TrustCAFile(path string) error {
	if path == "" {
		return nil
	}
	pem, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--ca-file: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return fmt.Errorf("--ca-file %s: no PEM certificate in it", path)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	c.HTTP.Transport = tr
	return nil
}

// APIError is an error answer of vmgate.
type APIError struct {
	Status  int
	Reason  string
	Message string
	Body    map[string]any // the whole error envelope, for details
	Header  http.Header
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Reason, e.Message)
}

// Response is a decoded envelope.
type Response struct {
	Status  int
	Message string
	Data    json.RawMessage
	Header  http.Header
	// AsOf is when vmgate read an inventory list's data from PVE (nil elsewhere).
	AsOf *time.Time
	// NextCursor is a paged list's cursor of the next page ("" on the last).
	NextCursor string
}

// Do sends a request and decodes the envelope. in (if not nil) is sent as JSON; out
// (if not nil) receives data. Answers ≥ 400 come back as *APIError.
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, in, out any) (*Response, error) {
	return c.DoWithHeaders(ctx, method, path, query, nil, in, out)
}

// DoWithHeaders is Do with extra request headers (Idempotency-Key).
func (c *Client) DoWithHeaders(ctx context.Context, method, path string, query url.Values, hdr http.Header, in, out any) (*Response, error) {
	u := c.BaseURL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range hdr {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, err
	}
	var env struct {
		Code       int             `json:"code"`
		Message    string          `json:"message"`
		Reason     string          `json:"reason"`
		Data       json.RawMessage `json:"data"`
		AsOf       *time.Time      `json:"asOf"`
		NextCursor *string         `json:"nextCursor"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, fmt.Errorf("%s %s: %s: not a vmgate answer: %.200q", method, path, resp.Status, raw)
	}
	if resp.StatusCode >= 400 {
		all := map[string]any{}
		json.Unmarshal(raw, &all)
		return nil, &APIError{Status: resp.StatusCode, Reason: env.Reason, Message: env.Message, Body: all, Header: resp.Header}
	}
	if out != nil && len(env.Data) > 0 {
		if err := json.Unmarshal(env.Data, out); err != nil {
			return nil, fmt.Errorf("%s %s: decode data: %w", method, path, err)
		}
	}
	answer := &Response{Status: resp.StatusCode, Message: env.Message, Data: env.Data, Header: resp.Header, AsOf: env.AsOf}
	if env.NextCursor != nil {
		answer.NextCursor = *env.NextCursor
	}
	return answer, nil
}

// TokenInfo is the data of login and refresh.
type TokenInfo struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
	User      *struct {
		ID       int64  `json:"id"`
		Email    string `json:"email"`
		Nickname string `json:"nickname"`
	} `json:"user,omitempty"`
}

// Login logs in and keeps the token in the client.
func (c *Client) Login(ctx context.Context, email, password string) (TokenInfo, error) {
	var t TokenInfo
	_, err := c.Do(ctx, http.MethodPost, "/api/v1/user/login", nil, map[string]string{"email": email, "password": password}, &t)
	if err == nil {
		c.Token = t.Token
	}
	return t, err
}

// Refresh rotates the token and keeps the new one.
func (c *Client) Refresh(ctx context.Context) (TokenInfo, error) {
	var t TokenInfo
	_, err := c.Do(ctx, http.MethodPost, "/api/v1/user/refresh", nil, nil, &t)
	if err == nil {
		c.Token = t.Token
	}
	return t, err
}

// Logout ends the session.
func (c *Client) Logout(ctx context.Context) error {
	_, err := c.Do(ctx, http.MethodPost, "/api/v1/user/logout", nil, nil, nil)
	return err
}

// VMPath is the API path of a VM.
func VMPath(clusterID int64, node string, vmid int64) string {
	return "/api/v1/pve/vm/" + strconv.FormatInt(clusterID, 10) + "/" + url.PathEscape(node) + "/" + strconv.FormatInt(vmid, 10)
}

// VM is one VM of a cluster's list.
type VM struct {
	VMID    int64    `json:"vmid"`
	Name    string   `json:"name"`
	Node    string   `json:"node"`
	Status  string   `json:"status"`
	Lock    string   `json:"lock"`
	Tags    []string `json:"tags"`
	HAState string   `json:"haState"`
	MaxMem  int64    `json:"maxMem"`
	MaxCPU  float64  `json:"maxCpu"`
}

// VMFilter selects a cluster's VMs (every field optional); PageSize > 0 reads
// the list in pages of that many.
type VMFilter struct {
	Node, Status, Tag, Q string
	PageSize             int
}

// VMs lists a cluster's VMs that pass f, following the pages to the end. It
// returns when the oldest page was read (asOf).
func (c *Client) VMs(ctx context.Context, clusterID int64, f VMFilter) ([]VM, time.Time, error) {
	q := url.Values{}
	for k, v := range map[string]string{"node": f.Node, "status": f.Status, "tag": f.Tag, "q": f.Q} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.PageSize > 0 {
		q.Set("limit", strconv.Itoa(f.PageSize))
	}
	var (
		all  []VM
		asOf time.Time
	)
	path := "/api/v1/pve/clusters/" + strconv.FormatInt(clusterID, 10) + "/vms"
	for {
		var page []VM
		resp, err := c.Do(ctx, http.MethodGet, path, q, nil, &page)
		if err != nil {
			return nil, time.Time{}, err
		}
		all = append(all, page...)
		if resp.AsOf != nil && (asOf.IsZero() || resp.AsOf.Before(asOf)) {
			asOf = *resp.AsOf
		}
		if resp.NextCursor == "" {
			return all, asOf, nil
		}
		q.Set("cursor", resp.NextCursor)
	}
}

// TaskPath is the API path of a task.
func TaskPath(upid string) string { return "/api/v1/pve/task/" + url.PathEscape(upid) }

// Progress is a migration's progress as vmgate reports it.
type Progress struct {
	Percent          float64 `json:"percent"`
	TransferredBytes int64   `json:"transferredBytes"`
	TotalBytes       int64   `json:"totalBytes"`
	BytesPerSecond   int64   `json:"bytesPerSecond"`
	Phase            string  `json:"phase"`
}

// Task is a task as vmgate reports it (DESIGN §3.3).
type Task struct {
	TaskID     string     `json:"taskId"`
	ClusterID  int64      `json:"clusterId"`
	Node       string     `json:"node"`
	Type       string     `json:"type"`
	VMID       int64      `json:"vmid"`
	PVEUser    string     `json:"pveUser"`
	StartedBy  string     `json:"startedBy"`
	Status     string     `json:"status"`
	ExitStatus *string    `json:"exitStatus"`
	Result     string     `json:"result"`
	Error      string     `json:"error,omitempty"`
	StartTime  *time.Time `json:"startTime"`
	EndTime    *time.Time `json:"endTime"`
	Target     string     `json:"target,omitempty"`
	Progress   *Progress  `json:"progress"`
}

// Task reads a task; wait > 0 long-polls up to that many seconds.
func (c *Client) Task(ctx context.Context, upid string, clusterID int64, wait int) (Task, error) {
	q := url.Values{}
	if wait > 0 {
		q.Set("wait", strconv.Itoa(wait))
	}
	if clusterID > 0 {
		q.Set("clusterId", strconv.FormatInt(clusterID, 10))
	}
	var t Task
	_, err := c.Do(ctx, http.MethodGet, TaskPath(upid), q, nil, &t)
	return t, err
}

// Power runs start, stop or reboot. force applies to stop; extra adds query
// parameters (stop's timeout). It returns the task id
// (X-Task-Id) and whether the task was still running when the wait ended (202).
func (c *Client) Power(ctx context.Context, clusterID int64, node string, vmid int64, op string, force bool, wait int, extra url.Values) (string, bool, error) {
	q := url.Values{}
	for k, vs := range extra {
		q[k] = vs
	}
	if force {
		q.Set("force", "true")
	}
	if wait >= 0 {
		q.Set("wait", strconv.Itoa(wait))
	}
	resp, err := c.Do(ctx, http.MethodPost, VMPath(clusterID, node, vmid)+"/"+op, q, nil, nil)
	if err != nil {
		if ae, ok := err.(*APIError); ok {
			return ae.Header.Get("X-Task-Id"), false, err
		}
		return "", false, err
	}
	return resp.Header.Get("X-Task-Id"), resp.Status == http.StatusAccepted, nil
}

// MigrateRequest is the body of a migration.
type MigrateRequest struct {
	Target         string `json:"target"`
	Online         *bool  `json:"online,omitempty"`
	WithLocalDisks bool   `json:"withLocalDisks,omitempty"`
	TargetStorage  string `json:"targetStorage,omitempty"`
	BWLimit        *int   `json:"bwlimit,omitempty"`
}

// Migrate starts a migration and returns its task id.
func (c *Client) Migrate(ctx context.Context, clusterID int64, node string, vmid int64, m MigrateRequest) (string, error) {
	var out struct {
		TaskID string `json:"taskId"`
	}
	_, err := c.Do(ctx, http.MethodPost, VMPath(clusterID, node, vmid)+"/migrate", nil, m, &out)
	return out.TaskID, err
}
