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
	"errors"
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
	// UserAgent is sent with every request (the server shows it in the sessions'
	// list); empty sends Go's default.
	UserAgent string
	// Renew, when set, is asked for a new token after an answer 401: a login's
	// token that ran out is refreshed while its session lives (Session does). It
	// returns the token to retry the request with once, or false.
	Renew func(ctx context.Context) (string, bool)
}

// NewClient returns a client with sane timeouts.
func NewClient(baseURL, token string) *Client {
	return &Client{
		BaseURL: strings.TrimRight(baseURL, "/"),
		Token:   token,
		HTTP:    &http.Client{Timeout: 6 * time.Minute},
	}
}

// authorize sets the request's bearer token and User-Agent.
func (c *Client) authorize(req *http.Request) {
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if c.UserAgent != "" {
		req.Header.Set("User-Agent", c.UserAgent)
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

// DoWithHeaders is Do with extra request headers (Idempotency-Key). An answer 401
// is retried once with the token Renew gives, when there is one.
func (c *Client) DoWithHeaders(ctx context.Context, method, path string, query url.Values, hdr http.Header, in, out any) (*Response, error) {
	u := c.BaseURL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = b
	}
	for attempt := 0; ; attempt++ {
		resp, err := c.send(ctx, method, u, hdr, body, in != nil, out)
		var ae *APIError
		if attempt == 0 && c.Renew != nil && errors.As(err, &ae) && ae.Status == http.StatusUnauthorized &&
			path != "/api/v1/user/refresh" {
			if tok, ok := c.Renew(ctx); ok {
				c.Token = tok
				continue
			}
		}
		if err != nil {
			return nil, err
		}
		return resp, nil
	}
}

// send makes one request and decodes its envelope.
func (c *Client) send(ctx context.Context, method, u string, hdr http.Header, body []byte, hasBody bool, out any) (*Response, error) {
	var rd io.Reader
	if hasBody {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if hasBody {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range hdr {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	c.authorize(req)
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
		return nil, &NotVmgateError{Method: method, URL: req.URL.Redacted(), Status: resp.Status, Body: string(raw)}
	}
	if resp.StatusCode >= 400 {
		all := map[string]any{}
		json.Unmarshal(raw, &all)
		return nil, &APIError{Status: resp.StatusCode, Reason: env.Reason, Message: env.Message, Body: all, Header: resp.Header}
	}
	if out != nil && len(env.Data) > 0 {
		if err := json.Unmarshal(env.Data, out); err != nil {
			return nil, fmt.Errorf("%s %s: decode data: %w", method, req.URL.Path, err)
		}
	}
	answer := &Response{Status: resp.StatusCode, Message: env.Message, Data: env.Data, Header: resp.Header, AsOf: env.AsOf}
	if env.NextCursor != nil {
		answer.NextCursor = *env.NextCursor
	}
	return answer, nil
}

// NotVmgateError is an answer that is not vmgate's envelope: another service at
// that address, or a proxy's error page.
type NotVmgateError struct {
	Method, URL, Status, Body string
}

func (e *NotVmgateError) Error() string {
	return fmt.Sprintf("%s %s: %s: not a vmgate answer: %.200q", e.Method, e.URL, e.Status, e.Body)
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
	return GuestPath(KindVM, clusterID, node, vmid)
}

// The API's path segments of the guest kinds.
const (
	KindVM = "vm"  // QEMU virtual machines
	KindCT = "lxc" // LXC containers
)

// GuestPath is the API path of a guest of kind (KindVM, KindCT).
func GuestPath(kind string, clusterID int64, node string, vmid int64) string {
	return "/api/v1/pve/" + kind + "/" + strconv.FormatInt(clusterID, 10) + "/" + url.PathEscape(node) + "/" + strconv.FormatInt(vmid, 10)
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

// Task is a task as vmgate reports it (docs/design.md §3.3).
type Task struct {
	TaskID string `json:"taskId"`
	// TaskRef is vmgate's own reference to the task (its task row): a task
	// query takes it where it takes the UPID, also before the UPID is known.
	// The X-Operation-Id header of an answer whose outcome is unknown names it.
	TaskRef     int64      `json:"taskRef"`
	ClusterID   int64      `json:"clusterId"`
	Node        string     `json:"node"`
	Type        string     `json:"type"` // PVE's; the CLI reads Op, GuestKind and IsMigration
	GuestKind   string     `json:"guestKind"`
	Op          string     `json:"op"`
	IsMigration bool       `json:"isMigration"`
	VMID        int64      `json:"vmid"`
	PVEUser     string     `json:"pveUser"`
	StartedBy   string     `json:"startedBy"`
	Status      string     `json:"status"`
	ExitStatus  *string    `json:"exitStatus"`
	Result      string     `json:"result"`
	Error       string     `json:"error,omitempty"`
	StartTime   *time.Time `json:"startTime"`
	EndTime     *time.Time `json:"endTime"`
	Target      string     `json:"target,omitempty"`
	Progress    *Progress  `json:"progress"`
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
	return c.PowerGuest(ctx, KindVM, clusterID, node, vmid, op, force, wait, extra)
}

// PowerGuest is Power for a guest of kind (KindVM, KindCT).
func (c *Client) PowerGuest(ctx context.Context, kind string, clusterID int64, node string, vmid int64, op string, force bool, wait int, extra url.Values) (string, bool, error) {
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
	resp, err := c.Do(ctx, http.MethodPost, GuestPath(kind, clusterID, node, vmid)+"/"+op, q, nil, nil)
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
	Restart        bool   `json:"restart,omitempty"` // containers: migrate a running CT by a restart
	Timeout        *int   `json:"timeout,omitempty"` // containers: the restart's shutdown timeout
}

// Migrate starts a migration and returns its task id.
func (c *Client) Migrate(ctx context.Context, clusterID int64, node string, vmid int64, m MigrateRequest) (string, error) {
	return c.MigrateGuest(ctx, KindVM, clusterID, node, vmid, m)
}

// MigrateGuest is Migrate for a guest of kind (KindVM, KindCT).
func (c *Client) MigrateGuest(ctx context.Context, kind string, clusterID int64, node string, vmid int64, m MigrateRequest) (string, error) {
	var out struct {
		TaskID string `json:"taskId"`
	}
	_, err := c.Do(ctx, http.MethodPost, GuestPath(kind, clusterID, node, vmid)+"/migrate", nil, m, &out)
	return out.TaskID, err
}

// LogLine is one line of a task's log.
type LogLine struct {
	N int    `json:"n"`
	T string `json:"t"`
}

// TaskLog reads a task's whole log, in pages of 5000 lines (the API's most).
// clusterID names the cluster of a task vmgate did not start (0 otherwise).
func (c *Client) TaskLog(ctx context.Context, upid string, clusterID int64) ([]LogLine, error) {
	const page = 5000
	var all []LogLine
	for start := 0; ; {
		q := url.Values{"start": {strconv.Itoa(start)}, "limit": {strconv.Itoa(page)}}
		if clusterID > 0 {
			q.Set("clusterId", strconv.FormatInt(clusterID, 10))
		}
		var out struct {
			Lines []LogLine `json:"lines"`
			Total int       `json:"total"`
		}
		if _, err := c.Do(ctx, http.MethodGet, TaskPath(upid)+"/log", q, nil, &out); err != nil {
			return nil, err
		}
		all = append(all, out.Lines...)
		start += len(out.Lines)
		if len(out.Lines) == 0 || start >= out.Total {
			return all, nil
		}
	}
}
