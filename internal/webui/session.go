package webui

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/errs"
)

// The cookies the UI sets. Over TLS each takes the __Host- prefix (cookieName), so
// that the browser accepts it only Secure, host-only and for Path=/: a sibling
// subdomain or a plain-HTTP page cannot plant or overwrite one — not the
// session, nor the log-in form's CSRF secret (login CSRF), nor a notice.
const (
	sessionCookie = "vmgate_session"
	loginCookie   = "vmgate_login"  // the log-in form's CSRF secret, before there is a session
	noticeCookie  = "vmgate_notice" // the outcome of the last action, shown once on the next page

	hostPrefix       = "__Host-"
	sessionCookieTLS = hostPrefix + sessionCookie
)

// cookieName is the name of the UI's cookie base for the request r: with the
// __Host- prefix over TLS.
func cookieName(r *http.Request, base string) string {
	if r.TLS != nil {
		return hostPrefix + base
	}
	return base
}

// readCookie is the request's cookie base, under the name cookieName gives it.
func readCookie(r *http.Request, base string) (*http.Cookie, error) {
	return r.Cookie(cookieName(r, base))
}

// cookie is the UI's cookie base: HttpOnly, SameSite=Strict, Path=/, no Domain,
// Secure and __Host- whenever the connection is TLS (docs/security.md item 33). maxAge 0
// makes a browser-session cookie, a negative one deletes it.
func cookie(r *http.Request, base, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: cookieName(r, base), Value: value, Path: "/", MaxAge: maxAge, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode}
}

// setSession puts a session token in the cookie. The cookie lives as long as the
// browser session: the token inside expires on its own, and the server renews it
// while the person uses the UI.
func setSession(w http.ResponseWriter, r *http.Request, tok auth.Token) {
	http.SetCookie(w, cookie(r, sessionCookie, tok.Raw, 0))
}

// clearSession deletes the session cookie (at logout).
func clearSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, cookie(r, sessionCookie, "", -1))
}

// sessionToken is the token the request's cookie holds ("" when none). An API
// token is none: the UI sets a login's token only, and an API token never stands
// for a browser session (docs/security.md item 32).
func sessionToken(r *http.Request) string {
	c, err := readCookie(r, sessionCookie)
	if err != nil || len(c.Value) > auth.MaxTokenBytes || auth.IsAPIToken(c.Value) {
		return ""
	}
	return c.Value
}

type ctxKey int

const principalKey ctxKey = iota

// principal is the authenticated caller of an authed or admin route.
func principal(r *http.Request) auth.Principal {
	p, _ := r.Context().Value(principalKey).(auth.Principal)
	return p
}

var errUnauthenticated = errs.E(errs.Unauthenticated, "please log in")

// authenticate finds the caller from the session cookie and renews the token when
// less than half of its life is left. The cookie of a failed request is left as it
// is: it may be a straggler whose tab has the renewed cookie already, and deleting
// "the" cookie would delete that one. A cookie whose token someone else rotated
// revokes the session (rotatedCookie).
func (u *UI) authenticate(w http.ResponseWriter, r *http.Request) (auth.Principal, error) {
	raw := sessionToken(r)
	if raw == "" {
		return auth.Principal{}, errUnauthenticated
	}
	p, err := u.sessions.Authenticate(r.Context(), raw)
	if errs.KindOf(err) == errs.Unauthenticated {
		// A request sent with the token a renewal just replaced carries on with the
		// renewed one.
		tok, ok := u.renewed(raw)
		if !ok {
			u.rotatedCookie(w, r, raw)
			return auth.Principal{}, errUnauthenticated
		}
		if p, err = u.sessions.Authenticate(r.Context(), tok.Raw); err == nil {
			setSession(w, r, tok)
			return p, nil
		}
		if errs.KindOf(err) == errs.Unauthenticated {
			return auth.Principal{}, errUnauthenticated
		}
	}
	if err != nil {
		return auth.Principal{}, err
	}
	if navigation(r) && p.ExpiresAt.Sub(u.now()) < u.ttl/2 {
		if tok, ok := u.renew(r, raw, p); ok {
			setSession(w, r, tok)
			p.Generation, p.ExpiresAt = tok.Generation, tok.ExpiresAt
		}
	}
	return p, nil
}

// rotatedCookie handles a cookie whose token Authenticate refused and no renewal of this
// process replaced. The browser holds only its session's newest token and renews
// it itself (renew), so an older generation in the cookie means that someone else
// rotated it — a thief who refreshed a stolen cookie's token at /user/refresh —
// and the session is revoked and the reuse audited by auth's one rule
// (auth.Service.CheckReuse, as at /user/refresh; docs/security.md item 7). The cookie of a
// revoked session opens nothing any more, so it is deleted; any other refusal
// leaves it alone (see authenticate).
func (u *UI) rotatedCookie(w http.ResponseWriter, r *http.Request, raw string) {
	revoked, err := u.sessions.CheckReuse(r.Context(), raw, audit.FactsFrom(r.Context()).Address)
	if err != nil {
		u.log.WarnContext(r.Context(), "checking a refused cookie for reuse failed", "error", err.Error(),
			"request_id", audit.FactsFrom(r.Context()).RequestID)
	}
	if revoked {
		clearSession(w, r)
	}
}

// navigation reports whether r is a page load or a form submission, the requests
// of a tab that come one at a time. Renewal happens only on those, so a tab's
// scripts never race its page loads to renew.
func navigation(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Mode") {
	case "navigate", "":
		return true
	}
	return false
}

// renewal is a token a renewal in this process replaced by tok.
type renewal struct {
	tok auth.Token
	at  time.Time
}

// renewalKept is how long the token a renewal replaced is still exchanged for the
// new one: long enough for the requests in flight when it happened, short enough
// that the old token is no lasting way into the session.
const renewalKept = 10 * time.Second

func tokenKey(raw string) string {
	h := sha256.Sum256([]byte(raw))
	return string(h[:])
}

// renewed returns the token that replaced raw, if a renewal of this process did so
// within renewalKept.
func (u *UI) renewed(raw string) (auth.Token, bool) {
	u.renewMu.Lock()
	defer u.renewMu.Unlock()
	rn, ok := u.renewals[tokenKey(raw)]
	if !ok || u.now().Sub(rn.at) > renewalKept {
		return auth.Token{}, false
	}
	return rn.tok, true
}

// renew moves the session one generation on (auth.Refresh). Requests of this
// process that carry the same old token while or just after one renews get the
// same new token instead of refreshing again: a second refresh of a rotated token
// looks like theft to auth and ends the session (docs/design.md §3.1). A failed renewal
// leaves the request authenticated as it was; the next navigation tries again.
func (u *UI) renew(r *http.Request, raw string, p auth.Principal) (auth.Token, bool) {
	u.renewMu.Lock()
	defer u.renewMu.Unlock()
	now := u.now()
	for k, rn := range u.renewals {
		if now.Sub(rn.at) > renewalKept {
			delete(u.renewals, k)
		}
	}
	key := tokenKey(raw)
	if rn, ok := u.renewals[key]; ok {
		return rn.tok, true
	}
	// The lock is held across the refresh: renewals are rare (once per half token
	// lifetime and session) and must not race each other.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
	defer cancel()
	tok, err := u.sessions.Refresh(ctx, raw, audit.FactsFrom(r.Context()).Address)
	if err != nil {
		u.log.WarnContext(r.Context(), "session renewal failed", "session", p.SessionID, "error", err.Error())
		return auth.Token{}, false
	}
	u.renewals[key] = renewal{tok: tok, at: now}
	return tok, true
}

// mac is the base64url HMAC-SHA256 of the parts under key.
func mac(key []byte, parts ...string) string {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// csrfToken is the session's synchronizer token: fixed for the session's life,
// unguessable without the UI's key and the session id (which only the HttpOnly
// cookie carries), and checked by every replica without a store read.
func (u *UI) csrfToken(sessionID string) string { return mac(u.csrfKey, "session", sessionID) }

// loginCSRF is the log-in form's token, bound to the random value of the login
// cookie, so that another site cannot log a browser into an account of its choosing.
func (u *UI) loginCSRF(secret string) string { return mac(u.csrfKey, "login", secret) }

// csrfOK checks the token a form (field csrf) or a script (header X-CSRF-Token)
// sent against want, in constant time.
func csrfOK(r *http.Request, want string) bool {
	got := r.PostFormValue("csrf")
	if got == "" {
		got = r.Header.Get("X-CSRF-Token")
	}
	return got != "" && hmac.Equal([]byte(got), []byte(want))
}

// loginSecret returns the login cookie's value, setting a fresh one when there is
// none (it lives an hour: a form left open longer is refused once and shown again).
func loginSecret(w http.ResponseWriter, r *http.Request) string {
	if c, err := readCookie(r, loginCookie); err == nil && len(c.Value) == 43 {
		return c.Value
	}
	var b [32]byte
	rand.Read(b[:])
	v := base64.RawURLEncoding.EncodeToString(b[:])
	http.SetCookie(w, cookie(r, loginCookie, v, 3600))
	return v
}

// sameOrigin reports whether a state-changing request comes from a page of this
// site: its Origin names this host (https when the connection is TLS); a browser
// that sends no Origin must say Sec-Fetch-Site: same-origin. Behind a
// TLS-terminating proxy the scheme is not known, so either is accepted there; the
// host must still match.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return r.Header.Get("Sec-Fetch-Site") == "same-origin"
	}
	o, err := url.Parse(origin)
	if err != nil || o.Host == "" || o.Path != "" || o.User != nil {
		return false
	}
	switch {
	case o.Scheme == "https":
	case o.Scheme == "http" && r.TLS == nil:
	default:
		return false
	}
	return strings.EqualFold(o.Host, r.Host)
}

// safeNext returns the page to go to after logging in: a path on this site (a
// single leading slash, no scheme or host, no backslash, nothing under /api/ and
// no control character), or "/" when next is anything else. It is the only
// guard against an open redirect through /login?next=.
func safeNext(next string) string {
	if next == "" || len(next) > 2048 || next[0] != '/' || strings.HasPrefix(next, "//") ||
		strings.ContainsAny(next, "\\\r\n\t\x00") {
		return "/"
	}
	for _, c := range next {
		if c < 0x20 || c == 0x7f {
			return "/"
		}
	}
	p, err := url.Parse(next)
	if err != nil || p.Scheme != "" || p.Host != "" || p.User != nil || p.Opaque != "" || !strings.HasPrefix(p.Path, "/") {
		return "/"
	}
	if p.Path == "/login" || p.Path == "/logout" || p.Path == "/api" || strings.HasPrefix(p.Path, "/api/") ||
		strings.HasPrefix(p.Path, "/static/") {
		return "/"
	}
	return p.RequestURI()
}

// notice is the outcome of an action, carried to the page the action redirects to
// in a signed cookie (so no other site or URL can make a vmgate page say
// something), and shown once.
type notice struct {
	Kind    string `json:"k"`           // "ok", "error" or "info"
	Message string `json:"m"`           // for the person
	Reason  string `json:"r,omitempty"` // the error's reason, when it is an error
	TaskID  string `json:"t,omitempty"` // the task the action started
}

func (u *UI) setNotice(w http.ResponseWriter, r *http.Request, n notice) {
	b, _ := json.Marshal(n)
	v := base64.RawURLEncoding.EncodeToString(b)
	if len(v) > 3000 { // a cookie holds about 4 KB; a long PVE message is cut
		n.Message = n.Message[:min(len(n.Message), 1500)] + "…"
		b, _ = json.Marshal(n)
		v = base64.RawURLEncoding.EncodeToString(b)
	}
	http.SetCookie(w, cookie(r, noticeCookie, v+"."+mac(u.noticeKey, v), 60))
}

// takeNotice reads and clears the notice cookie; a cookie that fails its signature
// is dropped unread.
func (u *UI) takeNotice(w http.ResponseWriter, r *http.Request) *notice {
	c, err := readCookie(r, noticeCookie)
	if err != nil {
		return nil
	}
	http.SetCookie(w, cookie(r, noticeCookie, "", -1))
	v, sig, ok := strings.Cut(c.Value, ".")
	if !ok || !hmac.Equal([]byte(sig), []byte(mac(u.noticeKey, v))) {
		return nil
	}
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return nil
	}
	var n notice
	if json.Unmarshal(b, &n) != nil {
		return nil
	}
	return &n
}
