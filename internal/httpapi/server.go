// Package httpapi is vmgate's HTTP layer: one route table on the standard ServeMux,
// the response envelope, strict decoding, and the middleware every request passes
// (request id, client address, panic recovery, one log line, metrics, authentication).
//
// Handlers read as decode → validate → act → respond. They return errors; the one
// table in envelope.go turns an error's kind into a status and reason. The rules —
// who may do what, what ends a session, what is audited — are the use cases'
// (accounts, auth, fleet, vmops), which a web UI calls the same way; wrap attaches
// the request's facts (caller, session, address, request id) to the context for
// their audit records (internal/audit). This package imports neither internal/store
// nor internal/pve (layers_test.go).
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/frontend"
	"github.com/vmgate/vmgate/internal/sse"
)

// ReadyGate is a condition of this replica /readyz checks: Name is the
// dependency its 503 names; Check's error, an *errs.Error of kind Unavailable,
// gives the reason and the message.
type ReadyGate struct {
	Name  string
	Check func(ctx context.Context) error
}

// Pinger is a dependency /readyz checks.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Config is what New needs.
type Config struct {
	Sessions frontend.Sessions
	Accounts frontend.Accounts
	// Audit lists the audit trail for admins; the use cases write it.
	Audit frontend.AuditTrail
	// Store is checked by /readyz; every store.Store is one. A store that is a
	// WriteProber is also written to (ReadyWriteProbe).
	Store Pinger
	// ReadyWriteProbe is how often /readyz writes to the store at most; the
	// checks in between answer with the last write's result
	// [DefaultReadyWriteProbe]. Negative: /readyz never writes.
	ReadyWriteProbe time.Duration
	// Gates are what else /readyz checks, after the store (the replica's clock:
	// internal/dbclock).
	Gates []ReadyGate
	// Fleet and VMs serve the cluster and VM routes; nil leaves those routes out.
	Fleet frontend.Fleet
	VMs   frontend.VMs
	// Operations serves the operations on many VMs (evacuate, bulk); nil leaves
	// those routes out. It needs Fleet.
	Operations frontend.Operations
	// GroupMappings serves the group mappings of single sign-on; nil leaves
	// those routes out.
	Identity frontend.IdentityAdmin
	// Consoles serves the guests' consoles (console.go); nil leaves those routes out.
	Consoles Consoles
	// Notifications serves the notification targets and deliveries; nil
	// leaves those routes out.
	Notifications frontend.Notifications
	// Keys keeps the Idempotency-Keys of the guest and operation writes
	// (keyed). Nil: a write that carries a key is refused.
	Keys Keys
	// SecondFactors serves the second step of logins, the second factors and
	// --require-2fa (secondfactor.go); nil leaves them out.
	SecondFactors frontend.SecondFactors

	Logger         *slog.Logger
	TrustedProxies []string // addresses or CIDRs whose X-Forwarded-For or Forwarded is believed
	Registry       *prometheus.Registry
	Now            func() time.Time
	// OpenAPIJSON is served at /api/v1/openapi.json.
	OpenAPIJSON []byte
	// MetricsPublic serves /metrics to every client; by default only loopback
	// peers may read it (docs/security.md item 31).
	MetricsPublic bool
	// UI, when set, answers every path that is not the API's (IsAPIPath), without
	// the API's headers, envelope or authentication: the web UI sets its own
	// Content-Security-Policy and authenticates by cookie, which the API never
	// accepts. It passes the outer layer like the API (request id, client address,
	// panic recovery, the one log line, metrics) and gets the request's facts in
	// the context (internal/audit). A UI that has a Route method names its routes
	// for the metrics and the log (the web UI does).
	UI http.Handler
	// Streams caps the event streams one user and one session hold open at once
	// (docs/security.md item 34); give the web UI the same one. Nil: a limiter of its own
	// with sse's default caps.
	Streams *sse.Limiter
	// RequestTimeout bounds every request as a whole, authentication and all
	// [DefaultRequestTimeout]; long-polls get their wait on top, event streams
	// none (see holdFor). Negative: no deadline.
	RequestTimeout time.Duration
}

// Server is vmgate's HTTP handler.
type Server struct {
	sessions frontend.Sessions
	accounts frontend.Accounts
	trail    frontend.AuditTrail
	store    Pinger
	writes   *writeProbe // nil: /readyz does not write
	gates    []ReadyGate
	fleet    frontend.Fleet
	vms      frontend.VMs
	ops      frontend.Operations
	mappings frontend.IdentityAdmin
	notify   frontend.Notifications
	keys     Keys
	// secondFactors is Config.SecondFactors (secondfactor.go).
	secondFactors frontend.SecondFactors
	consoles      Consoles
	log           *slog.Logger
	proxies       proxies
	metrics       *metrics
	now           func() time.Time
	openapi       []byte
	handler       http.Handler
	ui            http.Handler
	streams       *sse.Limiter

	metricsPublic bool

	requestTimeout time.Duration
}

// New builds the server. It fails only on bad configuration.
func New(cfg Config) (*Server, error) {
	ps, err := parseProxies(cfg.TrustedProxies)
	if err != nil {
		return nil, err
	}
	s := &Server{
		sessions: cfg.Sessions, accounts: cfg.Accounts, trail: cfg.Audit, store: cfg.Store, gates: cfg.Gates, fleet: cfg.Fleet, vms: cfg.VMs, ops: cfg.Operations, mappings: cfg.Identity,
		log: cfg.Logger, proxies: ps, now: cfg.Now, openapi: cfg.OpenAPIJSON, ui: cfg.UI, metricsPublic: cfg.MetricsPublic, requestTimeout: cfg.RequestTimeout,
		streams: cfg.Streams, keys: cfg.Keys, secondFactors: cfg.SecondFactors,
		consoles: cfg.Consoles, notify: cfg.Notifications,
	}
	if s.streams == nil {
		s.streams = sse.NewLimiter(sse.Limits{})
	}
	if s.requestTimeout == 0 {
		s.requestTimeout = DefaultRequestTimeout
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if p, ok := cfg.Store.(WriteProber); ok && cfg.ReadyWriteProbe >= 0 {
		s.writes = &writeProbe{probe: p.ProbeWrite, every: cfg.ReadyWriteProbe, now: s.now}
		if s.writes.every == 0 {
			s.writes.every = DefaultReadyWriteProbe
		}
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	s.metrics = newMetrics(reg, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return float64(s.sessions.ActiveSessions(ctx))
	})
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "vmgate_event_streams_open",
		Help: "Event streams open now, the API's and the web UI's (when they share the limiter).",
	}, func() float64 { return float64(s.streams.Open()) }))
	if st, ok := cfg.Fleet.(upstreamStats); ok {
		reg.MustRegister(pveCollector{stats: st.ClientStats})
	}
	if cfg.Operations != nil {
		reg.MustRegister(operationsCollector{stats: cfg.Operations.Stats})
	}
	s.handler = s.outer(newMux(s.routes(), s.wrap, s.serveUI))
	return s, nil
}

// LoginOutcome counts a login attempt by outcome (wired into auth.Config).
func (s *Server) LoginOutcome(outcome string) { s.metrics.LoginOutcome(outcome) }

// ServeHTTP implements http.Handler: every request passes the outer layer; the
// API's paths then go through the route table, every other path to Config.UI when
// there is one (serveUI).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// wrap turns a route into a handler: it records the pattern, gives the request its
// deadline (deadline.go), attaches the request's facts for the audit trail
// (internal/audit), authenticates and checks the global role, runs the handler
// and renders its error. What does not change per request — the route's name,
// its metric series — is resolved here, once; the request's context is built
// whole and attached once.
func (s *Server) wrap(rt route) http.Handler {
	name := rt.method + " " + rt.pattern
	rm := s.metrics.route(name)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ri := infoFrom(r)
		ri.pattern, ri.metrics = name, rm
		ctx := s.deadline(r.Context(), ri, name, r)
		defer ri.deadline.release()
		facts := audit.FactsFrom(ctx)
		facts.Address, facts.RequestID, facts.UserAgent = ri.addr, ri.id, r.UserAgent()
		if rt.access != public {
			p, err := s.authenticate(ctx, facts, r)
			if err != nil {
				r = r.WithContext(audit.WithFacts(ctx, facts))
				writeError(w, r, timedOut(r, err))
				return
			}
			ri.userID, ri.session, ri.principal = p.UserID, p.AuditSession(), &p
			// An API token's uses are attributed to its owner and named by the
			// token's id where a login names its session (docs/security.md item 32).
			facts.UserID, facts.UserEmail, facts.SessionID = p.UserID, p.Email, p.AuditSession()
		}
		r = r.WithContext(audit.WithFacts(ctx, facts))
		if rt.access == admin || rt.access == adminSession {
			if err := s.accounts.RequireAdmin(r.Context(), *ri.principal, name); err != nil {
				writeError(w, r, timedOut(r, err))
				return
			}
		}
		// The use cases refuse an API token what only a login session may do
		// themselves (docs/security.md item 32); this is the second wall, and the one that
		// keeps a token's attempt from reaching a handler at all.
		if rt.access == session || rt.access == adminSession {
			if err := s.accounts.RequireSession(r.Context(), *ri.principal, name); err != nil {
				writeError(w, r, err)
				return
			}
		}
		if rt.access != public {
			if err := s.requireEnrolled(r, name, *ri.principal); err != nil {
				writeError(w, r, timedOut(r, err))
				return
			}
		}
		if err := requireJSON(r); err != nil {
			writeError(w, r, err)
			return
		}
		if err := rt.handle(w, r); err != nil {
			writeError(w, r, timedOut(r, err))
		}
	})
}

// serveUI hands a path that is not the API's (IsAPIPath) to Config.UI, with the
// request's facts in the context as wrap attaches them; it reports whether it
// did. Without a UI every such path is the API's 404.
func (s *Server) serveUI(w http.ResponseWriter, r *http.Request) bool {
	if s.ui == nil || IsAPIPath(r.URL.Path) {
		return false
	}
	route := "unmatched"
	if named, ok := s.ui.(interface{ Route(*http.Request) string }); ok {
		route = named.Route(r)
	}
	setRoutePattern(r, "UI "+route)
	ctx := audit.WithRequest(r.Context(), clientAddr(r), requestID(r), r.UserAgent())
	// A page has the API's deadline, plus what its route may wait for (a power
	// action's task); an event stream has none (its own limits bound it).
	var extra time.Duration
	stream := false
	if h, ok := s.ui.(interface {
		Hold(*http.Request) (time.Duration, bool)
	}); ok {
		extra, stream = h.Hold(r)
	}
	ctx, cancel := s.holdDeadline(ctx, extra, stream)
	defer cancel()
	s.ui.ServeHTTP(w, r.WithContext(ctx))
	return true
}

// errUnauthenticated is the one answer to every token failure (docs/security.md item 1).
var errUnauthenticated = errs.E(errs.Unauthenticated, "invalid or expired token")

// bearer returns the token of an Authorization: Bearer header. Tokens in the query
// string are ignored (docs/security.md item 4).
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

func (s *Server) authenticate(ctx context.Context, facts audit.Facts, r *http.Request) (auth.Principal, error) {
	tok, ok := bearer(r)
	if !ok {
		return auth.Principal{}, errUnauthenticated
	}
	if auth.IsAPIToken(tok) {
		// An API token's failures are counted per client network, and its last
		// use names the address: auth reads both from the request's facts.
		ctx = audit.WithFacts(ctx, facts)
	}
	p, err := s.sessions.Authenticate(ctx, tok)
	if err != nil {
		if errs.KindOf(err) == errs.Unauthenticated {
			return auth.Principal{}, errUnauthenticated
		}
		return auth.Principal{}, err
	}
	return p, nil
}

// principal returns the authenticated caller; routes with access authed or admin always have one.
func principal(r *http.Request) auth.Principal {
	if p := infoFrom(r).principal; p != nil {
		return *p
	}
	return auth.Principal{}
}

// Timeouts bound how long a connection may take over its request and how long an
// idle one stays open (docs/security.md item 22). Zero fields take DefaultTimeouts'.
type Timeouts struct {
	ReadHeader time.Duration // the request line and headers
	Read       time.Duration // the whole request, body included
	Write      time.Duration // the answer; task waits and event streams extend their own
	Idle       time.Duration // a keep-alive connection between requests
}

// DefaultTimeouts are vmgate's: headers within 5 s, a whole request within 30 s
// (bodies are at most 64 KiB), answers within 330 s (a power operation waits up to
// 300 s for its task) and 120 s of keep-alive.
var DefaultTimeouts = Timeouts{ReadHeader: 5 * time.Second, Read: 30 * time.Second, Write: 330 * time.Second,
	Idle: 120 * time.Second}

// NewHTTPServer wraps h in an http.Server with DefaultTimeouts (docs/security.md item 22).
// Every answer over TLS carries Strict-Transport-Security (docs/security.md items 27, 31):
// set here, around whatever h is, so the API and the web UI both have it.
func NewHTTPServer(addr string, h http.Handler, log *slog.Logger) *http.Server {
	return NewHTTPServerWith(addr, h, log, DefaultTimeouts)
}

// NewHTTPServerWith is NewHTTPServer with other timeouts; tests shorten them to
// watch a slow client being cut off.
func NewHTTPServerWith(addr string, h http.Handler, log *slog.Logger, t Timeouts) *http.Server {
	t.ReadHeader = orDefault(t.ReadHeader, DefaultTimeouts.ReadHeader)
	t.Read = orDefault(t.Read, DefaultTimeouts.Read)
	t.Write = orDefault(t.Write, DefaultTimeouts.Write)
	t.Idle = orDefault(t.Idle, DefaultTimeouts.Idle)
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &http.Server{
		Addr:              addr,
		Handler:           hsts(h),
		ReadHeaderTimeout: t.ReadHeader,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

func orDefault(v, def time.Duration) time.Duration {
	if v <= 0 {
		return def
	}
	return v
}

// hstsValue asks browsers to use HTTPS only, for a year (RFC 6797). Subdomains are
// left alone: they may be other services, not vmgate's to decide.
const hstsValue = "max-age=31536000"

// hsts sets Strict-Transport-Security on answers to requests that came over TLS.
// Over plain HTTP the header would be ignored (RFC 6797 §7.2); behind a
// TLS-terminating proxy (--plain-http) the proxy sets it.
func hsts(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil {
			w.Header().Set("Strict-Transport-Security", hstsValue)
		}
		h.ServeHTTP(w, r)
	})
}
