package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Client talks to one vmgate server. It is safe for concurrent use.
type Client struct {
	base      string
	http      *http.Client
	userAgent string
	strict    bool
	renew     func(ctx context.Context) (string, bool)
	header    http.Header

	mu    sync.Mutex
	token string
}

// Option sets up a Client.
type Option func(*Client)

// WithToken sends token as the bearer credential: a login's JWT or an API token
// (vmg_…).
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient makes the client send its requests through h (its transport and
// timeout). The event streams are read without h's timeout.
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithUserAgent names the client to the server (its session list shows it).
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// WithRenew gives the client a way to a new token after an answer 401: renew
// returns the token to repeat the request with once, or false. A login's token
// that ran out is refreshed that way while its session lives (internal/cli keeps
// the new one in its config file).
func WithRenew(renew func(ctx context.Context) (string, bool)) Option {
	return func(c *Client) { c.renew = renew }
}

// WithHeader sends the header key: value with every request (a proxy's, or a
// test's X-Forwarded-For).
func WithHeader(key, value string) Option {
	return func(c *Client) {
		if c.header == nil {
			c.header = http.Header{}
		}
		c.header.Add(key, value)
	}
}

// WithStrictDecoding makes a field of an answer that the client's types do not
// know an error: the end-to-end tests hold the types to the API with it.
func WithStrictDecoding() Option { return func(c *Client) { c.strict = true } }

// New returns a client of the vmgate server at baseURL (scheme, host and port:
// https://vmgate.example.com:8443).
func New(baseURL string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), http: &http.Client{Timeout: 6 * time.Minute}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// BaseURL is the server's URL as the client was given it, without a trailing slash.
func (c *Client) BaseURL() string { return c.base }

// HTTPClient is the HTTP client the requests go through.
func (c *Client) HTTPClient() *http.Client { return c.http }

// Token is the bearer credential the client sends ("" for none).
func (c *Client) Token() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.token
}

// SetToken changes the bearer credential.
func (c *Client) SetToken(token string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.token = token
}

// TrustCAFile makes the client trust the certificates of the PEM file at path,
// and only them, for an https:// server whose certificate a private CA signed (or
// a self-signed one). An empty path keeps the system's roots.
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
	h := *c.http
	h.Transport = tr
	c.http = &h
	return nil
}

// Response is vmgate's envelope of a successful answer.
type Response struct {
	Status  int
	Message string
	Data    json.RawMessage
	Header  http.Header
	// AsOf is when vmgate read an inventory list's data from PVE (nil elsewhere).
	AsOf *time.Time
	// NextCursor is a paged list's cursor of the next page ("" on the last).
	NextCursor string
	// Unavailable are the clusters the fleet-wide guest list could not read
	// (nil elsewhere).
	Unavailable []ClusterUnavailable
}

// TaskID is the X-Task-Id header: the UPID of the task the request started.
func (r *Response) TaskID() string { return r.Header.Get("X-Task-Id") }

// Replayed reports whether the answer is the stored first answer of a request
// with the same Idempotency-Key.
func (r *Response) Replayed() bool { return r.Header.Get("Idempotent-Replayed") == "true" }

// APIError is an error answer of vmgate: its status, reason and message, and
// what the envelope and headers add.
type APIError struct {
	Status  int
	Reason  string // the envelope's reason: not_found, vm_locked, shutdown_timeout, …
	Message string
	// Details is the whole error envelope (code, message, reason and the reason's
	// detail fields: node, kind, lock, localDisks, taskRef, …).
	Details map[string]any
	Header  http.Header
	// RetryAfter is the Retry-After header's wait (429, 503), 0 without one.
	RetryAfter time.Duration
	// TaskID is the UPID of the task the request started or that holds the guest
	// (X-Task-Id, else the body's taskId), "" for none.
	TaskID string
	// TaskRef is vmgate's reference to the task row of a request whose outcome is
	// unknown or whose first attempt still runs (X-Operation-Id), 0 for none.
	TaskRef int64
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Reason, e.Message)
}

// Detail is the detail field name of the envelope as a string ("" when absent).
func (e *APIError) Detail(name string) string {
	s, _ := e.Details[name].(string)
	return s
}

// HasDetail reports whether the envelope has the field name.
func (e *APIError) HasDetail(name string) bool {
	_, ok := e.Details[name]
	return ok
}

// StatusOf is the status of an *APIError in err's chain, 0 for any other error.
func StatusOf(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// NotVmgateError is an answer that is not vmgate's envelope: another service at
// that address, or a proxy's error page.
type NotVmgateError struct {
	Method, URL, Status, Body string
}

func (e *NotVmgateError) Error() string {
	return fmt.Sprintf("%s %s: %s: not a vmgate answer: %.200q", e.Method, e.URL, e.Status, e.Body)
}

// RawJSON keeps an answer's data as vmgate sent it, for a caller that prints
// it as it came (every field, even one this client does not know). The types of
// single answers embed it; JSON returns it.
type RawJSON struct{ raw json.RawMessage }

// JSON is the answer's data as vmgate sent it (nil for a value not read from
// vmgate).
func (r RawJSON) JSON() json.RawMessage { return r.raw }

func (r *RawJSON) keepRaw(b []byte) { r.raw = append(json.RawMessage(nil), b...) }

// rawKeeper is a type that embeds RawJSON.
type rawKeeper interface{ keepRaw([]byte) }

// CallOption tunes one call.
type CallOption func(*call)

type call struct {
	idempotencyKey string
	header         http.Header
}

// IdempotencyKey sends key as the write's Idempotency-Key instead of a fresh one:
// the same call with the same key within 24 h replays the first answer and
// starts nothing twice (1 to 255 printable ASCII characters).
func IdempotencyKey(key string) CallOption { return func(c *call) { c.idempotencyKey = key } }

// NewIdempotencyKey returns a fresh random key.
func NewIdempotencyKey() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Do sends a request and decodes vmgate's envelope: in (if not nil) is sent as
// JSON, out (if not nil) receives the data. Answers of 400 and above come back
// as *APIError. An answer 401 is repeated once with the token WithRenew gives.
// The typed methods use it; it is exported for paths they do not cover (vmgate
// get).
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, in, out any) (*Response, error) {
	return c.do(ctx, method, path, query, in, out)
}

// write is do for a request that may start something: it sends an
// Idempotency-Key.
func (c *Client) write(ctx context.Context, method, path string, query url.Values, in, out any, opts []CallOption) (*Response, error) {
	cl := call{idempotencyKey: NewIdempotencyKey()}
	for _, o := range opts {
		o(&cl)
	}
	hdr := http.Header{}
	hdr.Set("Idempotency-Key", cl.idempotencyKey)
	return c.doWith(ctx, method, path, query, hdr, in, out)
}

func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any) (*Response, error) {
	return c.doWith(ctx, method, path, query, nil, in, out)
}

func (c *Client) doWith(ctx context.Context, method, path string, query url.Values, hdr http.Header, in, out any) (*Response, error) {
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("%s %s: encode the body: %w", method, path, err)
		}
		body = b
	}
	for attempt := 0; ; attempt++ {
		resp, err := c.send(ctx, method, u, hdr, body, in != nil, out)
		if attempt == 0 && c.renew != nil && StatusOf(err) == http.StatusUnauthorized && path != refreshPath {
			if tok, ok := c.renew(ctx); ok {
				c.SetToken(tok)
				continue
			}
		}
		return resp, err
	}
}

// authorize sets the request's bearer token, User-Agent and WithHeader's headers.
func (c *Client) authorize(req *http.Request) {
	for k, vs := range c.header {
		req.Header[k] = append(req.Header[k], vs...)
	}
	if tok := c.Token(); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
}

// envelope is vmgate's answer around its data.
type envelope struct {
	Code       int             `json:"code"`
	Message    string          `json:"message"`
	Reason     string          `json:"reason"`
	Data       json.RawMessage `json:"data"`
	AsOf       *time.Time      `json:"asOf"`
	NextCursor *string         `json:"nextCursor"`
	// Unavailable is the fleet-wide guest list's.
	Unavailable []ClusterUnavailable `json:"unavailable"`
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
		req.Header[k] = vs
	}
	c.authorize(req)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, err
	}
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, &NotVmgateError{Method: method, URL: req.URL.Redacted(), Status: resp.Status, Body: string(raw)}
	}
	if resp.StatusCode >= 400 {
		return nil, apiError(resp.StatusCode, resp.Header, raw)
	}
	if out != nil && len(env.Data) > 0 && string(env.Data) != "null" {
		if err := c.decode(env.Data, out); err != nil {
			return nil, fmt.Errorf("%s %s: decode the answer: %w", method, req.URL.Path, err)
		}
	}
	answer := &Response{Status: resp.StatusCode, Message: env.Message, Data: env.Data, Header: resp.Header, AsOf: env.AsOf,
		Unavailable: env.Unavailable}
	if env.NextCursor != nil {
		answer.NextCursor = *env.NextCursor
	}
	return answer, nil
}

// decode unmarshals data into out (strictly with WithStrictDecoding) and keeps
// the raw data in a type that embeds RawJSON.
func (c *Client) decode(data []byte, out any) error {
	if c.strict {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(out); err != nil {
			return err
		}
	} else if err := json.Unmarshal(data, out); err != nil {
		return err
	}
	if k, ok := out.(rawKeeper); ok {
		k.keepRaw(data)
	}
	return nil
}

// apiError builds the *APIError of an error answer.
func apiError(status int, h http.Header, raw []byte) *APIError {
	ae := &APIError{Status: status, Header: h, Details: map[string]any{}}
	json.Unmarshal(raw, &ae.Details)
	ae.Reason, _ = ae.Details["reason"].(string)
	ae.Message, _ = ae.Details["message"].(string)
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s > 0 {
		ae.RetryAfter = time.Duration(s) * time.Second
	}
	ae.TaskID = h.Get("X-Task-Id")
	if ae.TaskID == "" {
		ae.TaskID, _ = ae.Details["taskId"].(string)
	}
	if n, err := strconv.ParseInt(h.Get("X-Operation-Id"), 10, 64); err == nil && n > 0 {
		ae.TaskRef = n
	} else if f, ok := ae.Details["taskRef"].(float64); ok {
		ae.TaskRef = int64(f)
	}
	return ae
}

// id renders an id for a path.
func id(n int64) string { return strconv.FormatInt(n, 10) }
