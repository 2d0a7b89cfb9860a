// Package webui is vmgate's web UI: server-rendered pages (html/template) with a
// little hand-written JavaScript for live views, embedded in the binary, served by
// vmgate itself at / beside the JSON API under /api/v1 (docs/decisions/0012).
//
// It is a front end like internal/httpapi and obeys the same rules because it calls
// the same use cases (accounts, auth, fleet, vmops, audit): each handler decodes a
// form or a path, calls one use case and renders a page or redirects. It never
// sends HTTP requests to vmgate's own API and imports neither internal/store nor
// internal/pve (internal/httpapi/layers_test.go).
//
// A person logs in with a form; the session is an ordinary vmgate session whose
// token lives in an HttpOnly, SameSite=Strict cookie (Secure and __Host- over TLS,
// like every cookie the UI sets), never in the page, a URL or script-readable
// storage. A cookie whose token someone else rotated ends the session, as a
// replay at /user/refresh does (auth.Service.CheckReuse). The API under /api/v1 never reads
// that cookie. Every state-changing request needs the session's CSRF token (a
// synchronizer token: an HMAC of the session id, so every replica checks it without
// storing it) and an Origin of this very site. Every answer carries a
// Content-Security-Policy without 'unsafe-inline' or 'unsafe-eval': scripts and
// styles come from the embedded files only, so no style attribute appears in a page
// (bars and charts are SVG shapes sized by attributes).
package webui

import (
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/vmgate/vmgate/internal/frontend"
	"github.com/vmgate/vmgate/internal/sse"
)

// Config is what New needs. Sessions, Accounts, Fleet, VMs, Audit, Secret and
// Status are required.
type Config struct {
	Sessions frontend.Sessions
	Accounts frontend.Accounts
	Fleet    frontend.Fleet
	VMs      frontend.VMs
	Audit    frontend.AuditTrail
	// Operations serves the node page's evacuation and the operations' pages
	// (issue 13 (docs/history.md)); nil leaves them out.
	Operations frontend.Operations
	// SSO is single sign-on with an OpenID Provider (internal/identity); nil
	// leaves its pages and the log-in page's button out.
	SSO frontend.SingleSignOn
	// Notifications serves the Notifications admin page (issue 24); nil leaves
	// it out.
	Notifications frontend.Notifications
	// SecondFactors serves the login's second step and the Account page's second
	// factors (secondfactor.go); nil leaves them out.
	SecondFactors frontend.SecondFactors
	// GroupMappings serves the admin's page of single sign-on's group mappings;
	// nil leaves it out.
	Identity frontend.IdentityAdmin
	// Consoles serves the guests' console pages (console.go); nil leaves them out.
	Consoles Consoles

	// Secret is the key the UI's own keys (CSRF tokens, signed notices) are
	// derived from with HKDF. Every replica must be given the same (the server
	// passes the key file's key), so that a form served by one is accepted by all.
	Secret []byte
	// TokenTTL is the lifetime of a session token: the cookie is renewed once less
	// than half of it is left (default 1 h).
	TokenTTL time.Duration
	// Status is the HTTP status of an error: httpapi.StatusOf, the one table.
	Status func(error) int
	// NoteCaller, when set, names the authenticated caller of a request in its
	// log line (httpapi.NoteCaller).
	NoteCaller func(r *http.Request, userID int64, session string)
	// Streams caps the live pages' event streams of one user and one session
	// (docs/security.md item 34): the API's limiter, so that both count together. Nil: a
	// limiter of the UI's own with sse's default caps.
	Streams *sse.Limiter
	Logger  *slog.Logger
	Now     func() time.Time
}

// UI is the web UI's handler. It is safe for concurrent use.
type UI struct {
	sessions frontend.Sessions
	accounts frontend.Accounts
	fleet    frontend.Fleet
	vms      frontend.VMs
	ops      frontend.Operations
	sso      frontend.SingleSignOn
	notify   frontend.Notifications
	sf       frontend.SecondFactors // secondfactor.go
	mappings frontend.IdentityAdmin
	consoles Consoles
	trail    frontend.AuditTrail
	status   func(error) int
	streams  *sse.Limiter
	log      *slog.Logger
	now      func() time.Time

	ttl        time.Duration
	noteCaller func(*http.Request, int64, string)
	csrfKey    []byte
	noticeKey  []byte

	pages   map[string]*template.Template
	assets  *assets
	mux     *http.ServeMux
	liveMux *http.ServeMux // the live pages, for their stream (live.go)

	renewMu  sync.Mutex
	renewals map[string]renewal // by the replaced token's hash: renewals shared with stragglers
}

// New builds the UI: it parses the templates and hashes the static files once.
func New(cfg Config) (*UI, error) {
	if cfg.Sessions == nil || cfg.Accounts == nil || cfg.Fleet == nil || cfg.VMs == nil || cfg.Audit == nil || cfg.Status == nil {
		return nil, errors.New("webui: Sessions, Accounts, Fleet, VMs, Audit and Status are required")
	}
	if len(cfg.Secret) < 16 {
		return nil, errors.New("webui: Secret must have at least 16 bytes")
	}
	u := &UI{sessions: cfg.Sessions, accounts: cfg.Accounts, fleet: cfg.Fleet, vms: cfg.VMs, ops: cfg.Operations, sso: cfg.SSO, notify: cfg.Notifications, sf: cfg.SecondFactors, mappings: cfg.Identity, consoles: cfg.Consoles, trail: cfg.Audit,
		status: cfg.Status, log: cfg.Logger, now: cfg.Now, ttl: cfg.TokenTTL,
		noteCaller: cfg.NoteCaller, renewals: map[string]renewal{}, streams: cfg.Streams}
	if u.streams == nil {
		u.streams = sse.NewLimiter(sse.Limits{})
	}
	if u.log == nil {
		u.log = slog.New(slog.DiscardHandler)
	}
	if u.now == nil {
		u.now = time.Now
	}
	if u.ttl <= 0 {
		u.ttl = time.Hour
	}
	if u.noteCaller == nil {
		u.noteCaller = func(*http.Request, int64, string) {}
	}
	var err error
	if u.csrfKey, err = hkdf.Key(sha256.New, cfg.Secret, nil, "vmgate webui csrf", 32); err != nil {
		return nil, err
	}
	if u.noticeKey, err = hkdf.Key(sha256.New, cfg.Secret, nil, "vmgate webui notice", 32); err != nil {
		return nil, err
	}
	if u.assets, err = loadAssets(); err != nil {
		return nil, err
	}
	if u.pages, err = u.parsePages(); err != nil {
		return nil, err
	}
	u.fleet = liveFleet{Fleet: cfg.Fleet, status: &liveStatus{known: map[liveGuest]liveStatusEntry{}, done: map[string]uint64{}}, now: u.now}
	u.mux = http.NewServeMux()
	u.buildLive(u.routes())
	for _, rt := range u.routes() {
		u.mux.Handle(rt.method+" "+rt.pattern, u.wrap(rt))
	}
	u.mountSSOToken()
	u.mux.Handle("/", u.wrap(route{"", "/", public, u.notFound}))
	return u, nil
}

// ServeHTTP implements http.Handler: the security headers of every UI answer, then
// the route table.
func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	u.mux.ServeHTTP(w, r)
}

// Route names the UI route r matches ("GET /vms"), for metrics and the log.
func (u *UI) Route(r *http.Request) string {
	if _, pattern := u.mux.Handler(r); pattern != "" {
		return pattern
	}
	return "unmatched"
}

// securityHeaders are on every UI answer (docs/security.md items 31, 33). The policy allows
// scripts, styles, images and connections from vmgate itself only, and nothing
// inline; no page may frame the UI.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=()")
}
