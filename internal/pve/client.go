package pve

import (
	"compress/gzip"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Endpoint is one PVE API address of a cluster.
type Endpoint struct {
	URL string // https://host:8006
	// Fingerprint is the SHA-256 fingerprint of the endpoint's leaf
	// certificate, upper-case colon hex "AB:CD:...". Empty: verify with
	// Config.CACertPEM or the system roots.
	Fingerprint string
}

// Config configures a Client. Only Endpoints, TokenID and TokenSecret are required.
type Config struct {
	Endpoints          []Endpoint
	TokenID            string // USER@REALM!TOKENID
	TokenSecret        string
	CACertPEM          string // CA bundle for endpoints without a fingerprint; empty: system roots
	InsecureSkipVerify bool   // endpoints without a fingerprint are not verified at all
	Timeout            time.Duration
	Logger             *slog.Logger // nil: discard

	// Tuning. Zero values mean the defaults in brackets.

	// AttemptTimeout bounds how long a read waits for one endpoint before it
	// fails over to the next (only when another endpoint is left to try) [10s].
	AttemptTimeout time.Duration
	// DialTimeout bounds the TCP connect and, separately, the TLS handshake [5s].
	DialTimeout time.Duration
	// MaxAttempts is how many rounds over the endpoints a read may make [3].
	// Writes always make one, and never resend a request that may have arrived.
	MaxAttempts int
	// BreakerThreshold consecutive failures open an endpoint's circuit [3],
	// for BreakerCooldown [30s].
	BreakerThreshold int
	BreakerCooldown  time.Duration
	// Now is the clock of the circuit breakers, of the ambiguous-write lookup
	// and the one ClockOffset measures PVE's against [time.Now].
	Now func() time.Time
	// Sleep waits between read rounds and between WaitTask polls; it returns
	// early with ctx's error [a timer].
	Sleep func(ctx context.Context, d time.Duration) error
	// Backoff is the pause before read round n (n ≥ 1) [200ms·2^(n-1), at most
	// 2s, with equal jitter].
	Backoff func(n int) time.Duration
	// MaxConnsPerEndpoint bounds the connections open to one endpoint [64];
	// more concurrent requests wait for one. The keep-alive pool keeps as many
	// idle, so a connection is never closed only to be dialled again.
	MaxConnsPerEndpoint int

	// wrapTransport, set only by tests, stands between the client and its
	// transport (to hand over what net/http hands over only in a race).
	wrapTransport func(roundTripper) roundTripper
	// idleTimeout is how long a connection may stay unused in the keep-alive
	// pool [idleConnTimeout]; tests that count connections lengthen it.
	idleTimeout time.Duration
}

// Defaults.
const (
	DefaultTimeout        = 30 * time.Second
	defaultAttemptTimeout = 10 * time.Second
	defaultDialTimeout    = 5 * time.Second
	defaultMaxAttempts    = 3
	defaultBreakerThresh  = 3
	defaultBreakerCool    = 30 * time.Second
	// DefaultMaxConnsPerEndpoint is Config.MaxConnsPerEndpoint's default.
	DefaultMaxConnsPerEndpoint = 64

	// PVE's pveproxy closes idle keep-alive connections after 5 s; closing
	// ours a little earlier avoids sending a request on a connection the
	// server is just closing (harmless for reads, an ambiguous write otherwise).
	idleConnTimeout = 4 * time.Second

	limitDefault   = 8 << 20  // most answers are a few KiB
	limitLarge     = 32 << 20 // /cluster/resources of a big cluster, long task logs
	limitErrorBody = 64 << 10
	maxMessageLen  = 4 << 10
)

// Stats counts upstream activity since New.
type Stats struct {
	Requests     int64 // HTTP requests sent (attempts, including retries)
	NewConns     int64 // TLS connections established
	ServerCloses int64 // answers that closed the connection (PVE closes after every error and every 100th request)
	ClosedConns  int64 // connections closed, whoever ended them: ServerCloses, idle ones, and the transport's own drops
	Failovers    int64 // attempts abandoned for the next endpoint
	Retries      int64 // extra read rounds
	TLSFailures  int64 // handshakes refused by the pin or the CA
}

// Client is a PVE API client for one cluster. It is safe for concurrent use.
type Client struct {
	eps       []*endpoint
	byAddr    map[string]*endpoint
	tokenID   string
	authValue []string // the Authorization header's value: shared by every request

	timeout        time.Duration
	attemptTimeout time.Duration
	dialTimeout    time.Duration
	maxAttempts    int

	log     *slog.Logger
	now     func() time.Time
	sleep   func(context.Context, time.Duration) error
	backoff func(int) time.Duration

	tr        roundTripper
	preferred atomic.Int32
	recent    recentUPIDs
	offset    clockOffset // PVE's clock minus ours (clock.go)

	stats struct {
		requests, newConns, serverCloses, closedConns, failovers, retries, tlsFailures atomic.Int64
	}
}

// New checks cfg and returns a Client. It does not contact PVE.
func New(cfg Config) (*Client, error) {
	bad := func(format string, args ...any) (*Client, error) {
		return nil, fmt.Errorf("pve: %w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
	}
	if len(cfg.Endpoints) == 0 {
		return bad("no endpoints")
	}
	if len(cfg.Endpoints) > 64 {
		return bad("%d endpoints, at most 64", len(cfg.Endpoints))
	}
	if err := checkTokenID(cfg.TokenID); err != nil {
		return nil, fmt.Errorf("pve: %w", err)
	}
	if err := checkTokenSecret(cfg.TokenSecret); err != nil {
		return nil, fmt.Errorf("pve: %w", err)
	}
	if cfg.Timeout < 0 || cfg.AttemptTimeout < 0 || cfg.DialTimeout < 0 || cfg.BreakerCooldown < 0 ||
		cfg.MaxAttempts < 0 || cfg.BreakerThreshold < 0 || cfg.MaxConnsPerEndpoint < 0 {
		return bad("negative timeout, attempt count or breaker setting")
	}
	var roots *x509.CertPool
	if strings.TrimSpace(cfg.CACertPEM) != "" {
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM([]byte(cfg.CACertPEM)) {
			return bad("CA bundle holds no PEM certificate")
		}
	}

	c := &Client{
		byAddr:         map[string]*endpoint{},
		tokenID:        cfg.TokenID,
		authValue:      []string{"PVEAPIToken=" + cfg.TokenID + "=" + cfg.TokenSecret},
		timeout:        orDefault(cfg.Timeout, DefaultTimeout),
		attemptTimeout: orDefault(cfg.AttemptTimeout, defaultAttemptTimeout),
		dialTimeout:    orDefault(cfg.DialTimeout, defaultDialTimeout),
		maxAttempts:    orDefault(cfg.MaxAttempts, defaultMaxAttempts),
		log:            cfg.Logger,
		now:            cfg.Now,
		sleep:          cfg.Sleep,
		backoff:        cfg.Backoff,
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.sleep == nil {
		c.sleep = sleepCtx
	}
	if c.backoff == nil {
		c.backoff = defaultBackoff
	}
	threshold := orDefault(cfg.BreakerThreshold, defaultBreakerThresh)
	cooldown := orDefault(cfg.BreakerCooldown, defaultBreakerCool)

	for i, e := range cfg.Endpoints {
		base, addr, host, err := parseEndpointURL(e.URL)
		if err != nil {
			return bad("endpoint %d: %v", i+1, err)
		}
		n := Endpoint{URL: base}
		if e.Fingerprint != "" {
			if n.Fingerprint, err = NormalizeFingerprint(e.Fingerprint); err != nil {
				return bad("endpoint %s: %v", base, err)
			}
		}
		if c.byAddr[addr] != nil {
			return bad("endpoint %s given twice", base)
		}
		ep := &endpoint{cfg: n, base: base, addr: addr, tls: tlsConfigFor(n, host, roots, cfg.InsecureSkipVerify)}
		ep.br = breaker{threshold: threshold, cooldown: cooldown}
		c.eps = append(c.eps, ep)
		c.byAddr[addr] = ep
		if n.Fingerprint == "" && cfg.InsecureSkipVerify {
			c.log.Warn("pve: TLS verification is off for this endpoint (insecureSkipVerify)", "endpoint", base)
		}
	}

	conns := orDefault(cfg.MaxConnsPerEndpoint, DefaultMaxConnsPerEndpoint)
	c.tr = &http.Transport{
		// No Proxy: a proxied HTTPS request would be TLS-wrapped by the
		// transport itself, bypassing dialTLS and with it the pin.
		Proxy:             nil,
		DialTLSContext:    c.dialTLS,
		ForceAttemptHTTP2: false,
		// The idle pool holds every connection the cap allows: with fewer
		// idle slots than connections, a burst's connections beyond the idle
		// cap are closed as they come back and dialled again by the next
		// burst (116 new TLS connections per 1000 requests at 64 clients
		// with 32 idle slots for 64 connections).
		// PVE gzips answers over 1 KiB for a client that asks (Go's transport
		// asks by default). Between vmgate and PVE — a LAN — that costs more time
		// than it saves: /cluster/resources of 10 000 VMs is 2.6 MB, ~25 ms of
		// gzip on the PVE node and ~7 ms of gunzip here, against ~2 ms on the
		// wire at 10 Gbit/s (~21 ms at 1 Gbit/s). Plain answers also say their
		// length, so readBody reads them in one allocation.
		DisableCompression:     true,
		MaxConnsPerHost:        conns,
		MaxIdleConnsPerHost:    conns,
		MaxIdleConns:           conns * len(c.eps),
		IdleConnTimeout:        orDefault(cfg.idleTimeout, idleConnTimeout),
		MaxResponseHeaderBytes: 64 << 10,
	}
	if cfg.wrapTransport != nil {
		c.tr = cfg.wrapTransport(c.tr)
	}
	return c, nil
}

// roundTripper is what the client needs of its *http.Transport.
type roundTripper interface {
	http.RoundTripper
	CloseIdleConnections()
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func defaultBackoff(n int) time.Duration {
	d := 200 * time.Millisecond << min(max(n-1, 0), 4)
	d = min(d, 2*time.Second)
	return d/2 + rand.N(d/2+1)
}

// Close closes idle connections. The Client stays usable.
func (c *Client) Close() { c.tr.CloseIdleConnections() }

// Endpoints returns the configured endpoints, normalised (URL without
// trailing slash, fingerprint upper case).
func (c *Client) Endpoints() []Endpoint {
	out := make([]Endpoint, len(c.eps))
	for i, ep := range c.eps {
		out[i] = ep.cfg
	}
	return out
}

// TokenID returns the API token id the client authenticates with.
func (c *Client) TokenID() string { return c.tokenID }

// Stats returns the upstream counters.
func (c *Client) Stats() Stats {
	return Stats{
		Requests:     c.stats.requests.Load(),
		NewConns:     c.stats.newConns.Load(),
		ServerCloses: c.stats.serverCloses.Load(),
		ClosedConns:  c.stats.closedConns.Load(),
		Failovers:    c.stats.failovers.Load(),
		Retries:      c.stats.retries.Load(),
		TLSFailures:  c.stats.tlsFailures.Load(),
	}
}

// EndpointHealth is the circuit state of one endpoint.
type EndpointHealth struct {
	Endpoint Endpoint
	State    string // closed, open or half-open
}

// Health returns each endpoint's circuit state.
func (c *Client) Health() []EndpointHealth {
	now := c.now()
	out := make([]EndpointHealth, len(c.eps))
	for i, ep := range c.eps {
		out[i] = EndpointHealth{Endpoint: ep.cfg, State: ep.br.state(now).String()}
	}
	return out
}

// call is one logical API request.
type call struct {
	method string
	path   apiPath
	query  url.Values
	form   url.Values // the body of a POST
	limit  int64      // body size limit of a success answer
	out    any        // where a success answer's data is decoded (nil: not read)
	// pinned: send to this endpoint only, no failover, no retry.
	pinned *endpoint
}

func (cl *call) write() bool { return cl.method != http.MethodGet }

// result is what one successful call yields: the envelope's total, with its
// data decoded into call.out, or why the data could not be (dataErr: the
// envelope was PVE's, so the endpoint answered; the caller words the error).
type result struct {
	total   int64
	dataErr error
	ep      *endpoint
}

// ambiguity is do's internal report that a write may have reached PVE without
// its answer reaching us. The write methods turn it into a task-list lookup.
type ambiguity struct {
	ep    *endpoint
	cause error
}

func (a *ambiguity) Error() string {
	return fmt.Sprintf("ambiguous write at %s: %v", a.ep.base, a.cause)
}
func (a *ambiguity) Unwrap() error { return a.cause }

// outcome classifies one attempt.
type outcome int

const (
	outOK        outcome = iota
	outAnswer            // PVE answered with an error: final, endpoint healthy
	outFailover          // the endpoint failed and the request was not (or may safely be re-) sent
	outAmbiguous         // a write may have arrived; never resent
	outCtxDone           // the caller's deadline or cancellation
	outRefused           // refused before sending (a bug guard): final, endpoint untouched
)

// do runs cl with failover, retries (reads only) and the call deadline.
func (c *Client) do(ctx context.Context, cl call) (result, error) {
	if err := checkEscapedPath(cl.path.escaped); err != nil {
		return result{}, fmt.Errorf("pve: %w: %v", ErrInvalidArgument, err)
	}
	ctx, cancel := within(ctx, c.timeout)
	defer cancel()

	rounds := c.maxAttempts
	if cl.write() || cl.pinned != nil {
		rounds = 1
	}
	var attempts []AttemptError
	var last error
	refused := map[*endpoint]bool{} // certificate refused: no point in another round
	for round := 0; round < rounds; round++ {
		if round > 0 {
			c.stats.retries.Add(1)
			if c.sleep(ctx, c.backoff(round)) != nil {
				break
			}
		}
		order := c.order(cl.pinned)
		tried := false
		for i, ep := range order {
			if ctx.Err() != nil {
				break
			}
			if refused[ep] {
				continue
			}
			// A pinned call (VersionAt) is an explicit probe: it goes through
			// an open circuit, and its outcome still counts.
			if cl.pinned == nil && !ep.br.allow(c.now()) {
				attempts = append(attempts, AttemptError{Endpoint: ep.base, Err: errCircuitOpen})
				continue
			}
			tried = true
			othersLeft := i < len(order)-1
			res, out, err := c.attempt(ctx, ep, &cl, othersLeft)
			switch out {
			case outOK:
				ep.br.success()
				c.preferred.Store(int32(c.index(ep)))
				return res, nil
			case outAnswer:
				ep.br.success()
				return result{}, err
			case outRefused:
				ep.br.release()
				return result{}, err
			case outAmbiguous:
				if ctx.Err() != nil {
					ep.br.release() // our deadline, not the endpoint's failure
				} else {
					ep.br.failure(c.now())
				}
				return result{}, &ambiguity{ep: ep, cause: err}
			case outCtxDone:
				ep.br.release()
				return result{}, notSent(&cl, c.ctxError(ctx, &cl, err))
			case outFailover:
				var te *TLSError
				if errors.As(err, &te) {
					refused[ep] = true
				}
				last = err
				attempts = append(attempts, AttemptError{Endpoint: ep.base, Err: err})
				if ep.br.failure(c.now()) {
					c.log.Warn("pve: endpoint circuit opened", "endpoint", ep.base, "err", err)
				}
				c.stats.failovers.Add(1)
				c.log.Debug("pve: endpoint failed, trying the next", "method", cl.method, "path", cl.path.escaped, "endpoint", ep.base, "err", err)
			}
		}
		if !tried {
			break // every circuit is open: fail fast
		}
	}
	// A write is tried on another endpoint only when it was not sent (outFailover),
	// so a write that gets here never left.
	if ctx.Err() != nil {
		return result{}, notSent(&cl, c.ctxError(ctx, &cl, last))
	}
	return result{}, notSent(&cl, &UnavailableError{Method: cl.method, Path: cl.path.escaped, Attempts: attempts})
}

// notSent marks the error of a write that certainly never left (NotSent).
func notSent(cl *call, err error) error {
	if !cl.write() {
		return err
	}
	return &NotSentError{Err: err}
}

// ctxError turns the end of ctx into ErrTimeout (deadline) or the cancellation.
func (c *Client) ctxError(ctx context.Context, cl *call, last error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &timeoutError{Method: cl.method, Path: cl.path.escaped, ctxErr: ctx.Err(), last: last}
	}
	return fmt.Errorf("pve: %s %s: %w", cl.method, cl.path.escaped, ctx.Err())
}

// order returns the endpoints to try: the last one that worked first, then the
// others in configured order.
func (c *Client) order(pinned *endpoint) []*endpoint {
	if pinned != nil {
		return []*endpoint{pinned}
	}
	p := int(c.preferred.Load())
	out := make([]*endpoint, 0, len(c.eps))
	out = append(out, c.eps[p])
	for i, ep := range c.eps {
		if i != p {
			out = append(out, ep)
		}
	}
	return out
}

func (c *Client) index(ep *endpoint) int {
	for i, e := range c.eps {
		if e == ep {
			return i
		}
	}
	return 0
}

// Request header values, shared by every request (nothing changes them in place).
var (
	acceptJSON    = []string{"application/json"}
	userAgent     = []string{"vmgate-pve/1"}
	formEncodedCT = []string{"application/x-www-form-urlencoded"}
)

// within bounds ctx to d from now, unless its deadline already comes sooner:
// then ctx is returned as it is, and no timer is armed for a deadline that
// could never be the first to pass (a proxied read would otherwise arm four:
// the request's, the stale read's, the call's and the attempt's).
func within(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && !dl.After(time.Now().Add(d)) {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// attempt sends cl once to ep and classifies what happened.
func (c *Client) attempt(ctx context.Context, ep *endpoint, cl *call, othersLeft bool) (result, outcome, error) {
	actx := ctx
	if !cl.write() && othersLeft {
		// A read may give up on a silent endpoint early while others remain.
		var cancel context.CancelFunc
		actx, cancel = within(ctx, c.attemptTimeout)
		defer cancel()
	}
	// Whether a write's request left matters (an ambiguous write is never sent
	// again); a read is simply read again, so only writes are traced.
	var sent *atomic.Bool
	if cl.write() {
		sent = new(atomic.Bool)
		actx = httptrace.WithClientTrace(actx, &httptrace.ClientTrace{
			// Headers may still sit in a buffer when this fires: counting them as
			// sent errs on the safe side (an ambiguous write, never a repeated one).
			WroteHeaders: func() { sent.Store(true) },
			WroteRequest: func(httptrace.WroteRequestInfo) { sent.Store(true) },
		})
	}

	raw, err := requestURLText(ep.base, cl.path, cl.query)
	if err != nil {
		return result{}, outRefused, err
	}
	var body io.Reader
	if cl.form != nil {
		body = strings.NewReader(cl.form.Encode())
	}
	req, err := http.NewRequestWithContext(actx, cl.method, raw, body)
	if err != nil || checkRequestURL(req.URL, ep.base, cl.path) != nil {
		return result{}, outRefused, fmt.Errorf("pve: %w: bad request URL for %s", ErrInvalidArgument, cl.path.escaped)
	}
	req.Header = http.Header{"Authorization": c.authValue, "Accept": acceptJSON, "User-Agent": userAgent}
	if cl.form != nil {
		req.Header["Content-Type"] = formEncodedCT
	}

	c.stats.requests.Add(1)
	// The transport itself, not an http.Client: PVE never redirects (following
	// one could carry the token elsewhere; RoundTrip follows none), and the
	// client's per-request copy of the headers and its error wrapping buy nothing.
	sentAt := c.now()
	resp, err := c.tr.RoundTrip(req)
	if err != nil {
		return c.classifyTransportError(ctx, actx, ep, cl, sent != nil && sent.Load(), err)
	}
	defer resp.Body.Close()
	if d := resp.Header["Date"]; len(d) == 1 {
		c.offset.observe(d[0], sentAt, c.now())
	}
	if !cl.write() && actx.Err() != nil {
		// The transport hands over an answer that raced the request's end
		// (net/http prefers it). A server may have answered only because the
		// connection was being closed under it, so a read does not trust it;
		// a write keeps it, since its UPID is the only record of its task.
		return c.classifyTransportError(ctx, actx, ep, cl, false, actx.Err())
	}
	if resp.Close {
		c.stats.serverCloses.Add(1)
	}

	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		b, err := readBody(resp, cl.limit)
		if err != nil {
			if errors.Is(err, errTooLarge) {
				return result{}, outAnswer, fmt.Errorf("pve: %s %s at %s: %w: %v", cl.method, cl.path.escaped, ep.base, ErrBadResponse, err)
			}
			// The answer broke off: a write's status was 2xx, so its task
			// started and only its UPID was lost.
			if cl.write() {
				return result{}, outAmbiguous, fmt.Errorf("reading the answer: %w", err)
			}
			if ctx.Err() != nil {
				return result{}, outCtxDone, err
			}
			return result{}, outFailover, fmt.Errorf("reading the answer: %w", err)
		}
		total, envErr, dataErr := decodeAnswer(b, cl.out)
		if envErr != nil && actx.Err() != nil {
			// An unreadable answer that raced the write's end: whether its task
			// started is unknown, as if the answer had broken off.
			return c.classifyTransportError(ctx, actx, ep, cl, true, actx.Err())
		}
		if envErr != nil {
			return result{}, outAnswer, fmt.Errorf("pve: %s %s at %s: %w: %v", cl.method, cl.path.escaped, ep.base, ErrBadResponse, envErr)
		}
		return result{total: total, dataErr: dataErr, ep: ep}, outOK, nil
	}

	b, _ := readLimited(resp.Body, limitErrorBody) // an error's body is a courtesy; the status line is the answer
	perr := buildError(resp, b, cl, ep)
	switch {
	case resp.StatusCode == 595 || resp.StatusCode == 596 || resp.StatusCode == 597:
		if cl.path.node == "" {
			// A cluster-wide request is served by the endpoint itself; a
			// proxy failure there says nothing about the cluster.
			return result{}, outFailover, perr
		}
		noe := &NodeOfflineError{Node: cl.path.node, Err: perr}
		if cl.write() && resp.StatusCode != 595 {
			// 596/597: the proxied request may have reached the node.
			return result{}, outAmbiguous, noe
		}
		return result{}, outAnswer, noe
	}
	return result{}, outAnswer, perr
}

// requestURL joins an endpoint's base, /api2/json, a validated path and a
// query, and checks that the result's path is exactly the one validated.
func requestURL(base string, p apiPath, q url.Values) (*url.URL, error) {
	s, err := requestURLText(base, p, q)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("pve: %w: %v", ErrInvalidArgument, err)
	}
	if err := checkRequestURL(u, base, p); err != nil {
		return nil, err
	}
	return u, nil
}

// requestURLText is the text requestURL parses.
func requestURLText(base string, p apiPath, q url.Values) (string, error) {
	if err := checkEscapedPath(p.escaped); err != nil {
		return "", fmt.Errorf("pve: %w: %v", ErrInvalidArgument, err)
	}
	s := base + "/api2/json" + p.escaped
	if len(q) > 0 {
		s += "?" + q.Encode()
	}
	return s, nil
}

// checkRequestURL checks that a parsed request URL is exactly base, /api2/json
// and the validated path (and a query): nothing else survived the building.
func checkRequestURL(u *url.URL, base string, p apiPath) error {
	path, okPath := strings.CutPrefix(u.EscapedPath(), "/api2/json")
	host, okHost := strings.CutPrefix(base, "https://")
	if !okPath || path != p.escaped || u.Fragment != "" || u.Opaque != "" || u.User != nil || !okHost || u.Host != host {
		return fmt.Errorf("pve: %w: path %q does not survive URL building", ErrInvalidArgument, p.escaped)
	}
	return nil
}

// classifyTransportError decides what a failed round trip means.
func (c *Client) classifyTransportError(ctx, actx context.Context, ep *endpoint, cl *call, sent bool, err error) (result, outcome, error) {
	var te *TLSError
	if errors.As(err, &te) {
		// Refused certificate: nothing was sent, the token did not leave. The
		// endpoint is skipped (see the package doc) — loudly.
		c.stats.tlsFailures.Add(1)
		c.log.Error("pve: endpoint certificate refused", "endpoint", ep.base,
			"expected", te.Expected, "presented", te.Presented, "err", te.Err)
		return result{}, outFailover, te
	}
	switch {
	case ctx.Err() != nil:
		if cl.write() && sent {
			return result{}, outAmbiguous, c.ctxError(ctx, cl, err)
		}
		return result{}, outCtxDone, err
	case actx.Err() != nil:
		// The read's own attempt deadline: the endpoint is too slow.
		return result{}, outFailover, fmt.Errorf("no answer within %s", c.attemptTimeout)
	case cl.write() && sent:
		return result{}, outAmbiguous, err
	}
	return result{}, outFailover, unwrapURLError(err)
}

// unwrapURLError drops net/http's "Post \"https://...\":" prefix (it repeats
// the URL) but keeps the cause.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

var errTooLarge = errors.New("answer larger than the limit")

// readBody reads an answer's body like readLimited, in one allocation when it
// says its length (PVE does).
func readBody(resp *http.Response, limit int64) ([]byte, error) {
	if limit <= 0 {
		limit = limitDefault
	}
	if strings.EqualFold(resp.Header.Get("Content-Encoding"), "gzip") {
		// Not asked for (DisableCompression), but PVE always gzips some
		// downloads: read it as the transport would have.
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return nil, err
		}
		return readLimited(zr, limit)
	}
	n := resp.ContentLength
	if n < 0 || n > limit {
		return readLimited(resp.Body, limit)
	}
	b := make([]byte, n+1) // one more: a body longer than it said is an error
	m, err := io.ReadFull(resp.Body, b)
	switch {
	case err == io.ErrUnexpectedEOF || err == io.EOF:
		if int64(m) < n {
			return nil, io.ErrUnexpectedEOF
		}
		return b[:m], nil
	case err != nil:
		return nil, err
	}
	return nil, fmt.Errorf("%w: more than its Content-Length of %d bytes", errTooLarge, n)
}

func readLimited(r io.Reader, limit int64) ([]byte, error) {
	if limit <= 0 {
		limit = limitDefault
	}
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w of %d bytes", errTooLarge, limit)
	}
	return b, nil
}

// decodeAnswer reads PVE's {"data": ..., "total": N} and decodes data into
// out (a pointer to a zero value; nil: data is not read). envErr: b is not
// such an envelope; dataErr: its data is missing, null or not what out holds.
//
// The usual answer is decoded in one pass (decodeAnswerFast); any answer
// that pass does not take as it is — including every one that fails — is
// decoded again from scratch by decodeEnvelope and decodeData, which define
// what is accepted and every error.
func decodeAnswer(b []byte, out any) (total int64, envErr, dataErr error) {
	if d, ok := out.(answerDecoder); ok {
		return d.decodeAnswer(b)
	}
	if out != nil {
		if total, ok := decodeAnswerFast(b, out); ok {
			return total, nil, nil
		}
		// The fast pass may have filled part of out.
		if v := reflect.ValueOf(out); v.Kind() == reflect.Pointer && !v.IsNil() {
			v.Elem().SetZero()
		}
	}
	data, total, err := decodeEnvelope(b)
	if err != nil {
		return 0, err, nil
	}
	return total, nil, decodeData(data, out)
}

// decodeEnvelope reads PVE's {"data": ..., "total": N}.
func decodeEnvelope(b []byte) (json.RawMessage, int64, error) {
	var env struct {
		Data  json.RawMessage `json:"data"`
		Total flexInt         `json:"total"`
	}
	trimmed := strings.TrimSpace(string(b))
	if !strings.HasPrefix(trimmed, "{") {
		return nil, 0, fmt.Errorf("answer is not a JSON object: %q", truncate(trimmed, 80))
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, 0, fmt.Errorf("answer is not PVE's JSON envelope: %v", err)
	}
	return env.Data, int64(env.Total), nil
}

// decodeAnswerFast decodes an envelope of the plain shape — JSON whitespace,
// an object whose keys are printable ASCII without escapes, "data" (not
// null) once, "total" at most once, other keys ignored — unmarshalling data
// straight from b into out, without copying it out first. It reports false
// for anything else and for any error, leaving the answer to decodeEnvelope
// and decodeData. When it reports true they would have accepted b with the
// same out and total: every value is checked by encoding/json itself
// (json.Unmarshal or json.Valid on exactly that value's bytes), the
// structure around the values is checked here, and keys are matched as
// encoding/json matches them to the fields (case-insensitively).
func decodeAnswerFast(b []byte, out any) (int64, bool) {
	i := skipJSONSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return 0, false
	}
	var total flexInt
	seenData, seenTotal := false, false
	for i = skipJSONSpace(b, i+1); ; {
		if i >= len(b) || b[i] != '"' {
			return 0, false
		}
		k := i + 1
		for k < len(b) && b[k] != '"' {
			if c := b[k]; c < 0x20 || c >= 0x7f || c == '\\' {
				return 0, false
			}
			k++
		}
		if k >= len(b) {
			return 0, false
		}
		key := b[i+1 : k]
		i = skipJSONSpace(b, k+1)
		if i >= len(b) || b[i] != ':' {
			return 0, false
		}
		i = skipJSONSpace(b, i+1)
		end := jsonValueEnd(b, i)
		if end <= i {
			return 0, false
		}
		v := b[i:end]
		switch {
		case asciiEqualFold(key, "data"):
			if seenData || string(v) == "null" || json.Unmarshal(v, out) != nil {
				return 0, false
			}
			seenData = true
		case asciiEqualFold(key, "total"):
			if seenTotal || json.Unmarshal(v, &total) != nil {
				return 0, false
			}
			seenTotal = true
		default:
			if !json.Valid(v) {
				return 0, false
			}
		}
		i = skipJSONSpace(b, end)
		if i < len(b) && b[i] == ',' {
			i = skipJSONSpace(b, i+1)
			continue
		}
		if i < len(b) && b[i] == '}' {
			i = skipJSONSpace(b, i+1)
			break
		}
		return 0, false
	}
	if i != len(b) || !seenData {
		return 0, false
	}
	return int64(total), true
}

func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// jsonValueEnd returns where the JSON value starting at b[i] ends, by its
// delimiters only (strings and their escapes, bracket depth, the end of a
// literal): a proposal that the caller has encoding/json validate. It
// returns i when no end is found.
func jsonValueEnd(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	if c := b[i]; c != '"' && c != '{' && c != '[' {
		// A number, true, false or null: up to a delimiter.
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' &&
			b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		return j
	}
	depth := 0
	for j := i; j < len(b); j++ {
		switch b[j] {
		case '"':
			for j++; j < len(b) && b[j] != '"'; j++ {
				if b[j] == '\\' {
					j++ // the escaped byte, a quote included
				}
			}
			if j >= len(b) {
				return i
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		}
		if depth == 0 {
			return j + 1
		}
	}
	return i
}

// asciiEqualFold is bytes.EqualFold for an ASCII key and a lower-case name.
func asciiEqualFold(key []byte, name string) bool {
	if len(key) != len(name) {
		return false
	}
	for i := range key {
		c := key[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != name[i] {
			return false
		}
	}
	return true
}

// buildError keeps everything an error answer says. PVE ≥ 8.3 sends
// {"data":null,"message":"...\n"[,"errors":{...}]}; older PVE sends only
// {"data":null[,"errors":{...}]} with the message in the status line; errors
// raised outside handlers come as plain text; 401s and 595s have no body.
func buildError(resp *http.Response, body []byte, cl *call, ep *endpoint) *Error {
	e := &Error{
		StatusCode: resp.StatusCode,
		Reason:     cleanText(strings.TrimSpace(strings.TrimPrefix(resp.Status, strconv.Itoa(resp.StatusCode)))),
		Method:     cl.method,
		Path:       cl.path.escaped,
		Endpoint:   ep.base,
	}
	trimmed := strings.TrimSpace(string(body))
	if trimmed == "" {
		return e
	}
	var env struct {
		Message *string                    `json:"message"`
		Errors  map[string]json.RawMessage `json:"errors"`
	}
	if strings.HasPrefix(trimmed, "{") && json.Unmarshal(body, &env) == nil {
		if env.Message != nil {
			e.Message = cleanText(strings.TrimRight(*env.Message, "\n"))
		}
		if len(env.Errors) > 0 {
			e.Errors = make(map[string]string, len(env.Errors))
			for k, v := range env.Errors {
				var s string
				if json.Unmarshal(v, &s) != nil {
					s = string(v)
				}
				e.Errors[cleanText(k)] = cleanText(strings.TrimRight(s, "\n"))
			}
		}
		return e
	}
	e.Message, e.Plain = cleanText(strings.TrimRight(trimmed, "\n")), true
	return e
}

// cleanText bounds a text PVE sent and removes control characters other than
// newline and tab, so it is safe to log and to show.
func cleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return r
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return -1
		}
		return r
	}, s)
	return truncate(s, maxMessageLen)
}

// get performs a read and decodes data into out.
func (c *Client) get(ctx context.Context, p apiPath, q url.Values, limit int64, out any) (int64, error) {
	res, err := c.do(ctx, call{method: http.MethodGet, path: p, query: q, limit: limit, out: out})
	if err != nil {
		return 0, err
	}
	if err := res.dataErr; err != nil {
		return 0, fmt.Errorf("pve: GET %s at %s: %w: %v", p.escaped, res.ep.base, ErrBadResponse, err)
	}
	return res.total, nil
}

// decodeData decodes an envelope's data into out.
func decodeData(data json.RawMessage, out any) error {
	if out == nil {
		return nil
	}
	if len(data) == 0 || string(data) == "null" {
		return errors.New("no data")
	}
	return json.Unmarshal(data, out)
}

// recentUPIDs remembers the UPIDs this client was handed, so that the lookup
// after an ambiguous write does not mistake one of our earlier tasks for it.
type recentUPIDs struct {
	mu   sync.Mutex
	ring [256]string
	next int
	set  map[string]bool
}

func (r *recentUPIDs) add(u UPID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.set == nil {
		r.set = map[string]bool{}
	}
	k := FormatUPID(u)
	if r.set[k] {
		return
	}
	if old := r.ring[r.next]; old != "" {
		delete(r.set, old)
	}
	r.ring[r.next] = k
	r.set[k] = true
	r.next = (r.next + 1) % len(r.ring)
}

func (r *recentUPIDs) has(u UPID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.set[FormatUPID(u)]
}
