package webui

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"mime"
	"net/http"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/identity"
)

// ssoCookie binds a single sign-on to the browser that started it: the callback
// must bring it back (login CSRF). It is SameSite=Lax, unlike the UI's other
// cookies: the provider's redirect back is a navigation from another site, on
// which a Strict cookie is withheld. It holds no credential, only a random value
// whose hash the login keeps, and lives as long as a login may.
const ssoCookie = "vmgate_sso"

// ssoRoutes are the single sign-on's pages (internal/identity); none when no
// provider is configured.
func (u *UI) ssoRoutes() []route {
	if u.sso == nil {
		return nil
	}
	return []route{
		{"GET", "/auth/oidc/login", public, u.ssoLogin},
		{"GET", "/auth/oidc/callback", public, u.ssoCallback},
	}
}

// ssoName is the provider's name for the log-in page's button; "" hides it.
func (u *UI) ssoName() string {
	if u.sso == nil {
		return ""
	}
	return u.sso.ProviderName()
}

// ssoLogin starts a single sign-on and sends the browser to the provider. The CLI
// starts its own (RFC 8252) here too, naming its loopback redirect_uri, its PKCE
// code_challenge (S256) and its state: the browser it opened logs in.
func (u *UI) ssoLogin(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	b := identity.Begin{Next: safeNext(q.Get("next")), Address: audit.FactsFrom(r.Context()).Address}
	if q.Has("redirect_uri") || q.Has("code_challenge") {
		if q.Get("code_challenge_method") != "S256" {
			return errs.E(errs.Invalid, "code_challenge_method must be S256")
		}
		b.CLIRedirect, b.CLIChallenge, b.CLIState = q.Get("redirect_uri"), q.Get("code_challenge"), q.Get("state")
	}
	var raw [32]byte
	rand.Read(raw[:])
	b.Browser = base64.RawURLEncoding.EncodeToString(raw[:])
	to, err := u.sso.StartLogin(r.Context(), b)
	if err != nil {
		return err
	}
	c := cookie(r, ssoCookie, b.Browser, 600)
	c.SameSite = http.SameSiteLaxMode
	http.SetCookie(w, c)
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, to, http.StatusFound)
	return nil
}

// ssoCallback finishes a single sign-on: the provider's answer and the browser's
// binding go to identity.FinishLogin; a session's cookie is set and the browser
// goes on from a vmgate page (renderBounce's meta refresh: the Strict session
// cookie is withheld on the rest of a redirect chain that began at the
// provider), or, for the CLI, to its loopback redirect with a one-time code.
func (u *UI) ssoCallback(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	browser := ""
	if c, err := readCookie(r, ssoCookie); err == nil {
		browser = c.Value
	}
	gone := cookie(r, ssoCookie, "", -1)
	gone.SameSite = http.SameSiteLaxMode
	http.SetCookie(w, gone)
	w.Header().Set("Cache-Control", "no-store")
	f, err := u.sso.FinishLogin(r.Context(), identity.Callback{State: q.Get("state"), Code: q.Get("code"),
		Issuer: q.Get("iss"), Error: q.Get("error"), ErrorDescription: q.Get("error_description"), Browser: browser,
		Client: auth.Client{Address: audit.FactsFrom(r.Context()).Address, UserAgent: r.UserAgent()}})
	if err != nil {
		if errs.KindOf(err) != errs.Unauthenticated {
			return err
		}
		u.renderLogin(w, r, http.StatusUnauthorized, loginView{Next: "/",
			Error: "Single sign-on with " + u.sso.ProviderName() + " failed. Please try again."})
		return nil
	}
	if f.CLIRedirect != "" {
		http.Redirect(w, r, f.CLIRedirect, http.StatusFound)
		return nil
	}
	setSession(w, r, f.Token)
	v := u.page(w, r, "Opening vmgate", "", safeNext(f.Next))
	u.render(w, r, http.StatusOK, "bounce", v)
	return nil
}

// mountSSOToken serves the CLI's end of a single sign-on, POST /auth/oidc/token,
// beside the UI's route table: it is no page and no form of the UI (no session, no
// CSRF token, no Origin — a CLI sends none), but an OAuth 2.0 token endpoint
// (RFC 6749 §4.1.3 with RFC 7636's code_verifier): the one-time code its loopback
// redirect received and the verifier of its challenge give a session. Its proof
// is the code and the verifier, never a cookie, so it needs no CSRF defence.
func (u *UI) mountSSOToken() {
	if u.sso == nil {
		return
	}
	u.mux.HandleFunc("POST /auth/oidc/token", u.ssoToken)
}

// ssoTokenAnswer is the token endpoint's answer: the session's first token, as
// POST /api/v1/user/login gives one.
type ssoTokenAnswer struct {
	Token     string        `json:"token"`
	ExpiresAt string        `json:"expiresAt"`
	User      identity.User `json:"user"`
}

func (u *UI) ssoToken(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	oauthError := func(status int, code, desc string) {
		writeJSONBody(w, status, map[string]string{"error": code, "error_description": desc})
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/x-www-form-urlencoded" {
		oauthError(http.StatusBadRequest, "invalid_request", "the body must be application/x-www-form-urlencoded")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if err := r.ParseForm(); err != nil {
		oauthError(http.StatusBadRequest, "invalid_request", "the form cannot be read")
		return
	}
	if r.PostForm.Get("grant_type") != "authorization_code" {
		oauthError(http.StatusBadRequest, "unsupported_grant_type", "grant_type must be authorization_code")
		return
	}
	tok, user, err := u.sso.Exchange(r.Context(), r.PostForm.Get("code"), r.PostForm.Get("code_verifier"),
		auth.Client{Address: audit.FactsFrom(r.Context()).Address, UserAgent: r.UserAgent()})
	if err != nil {
		switch errs.KindOf(err) {
		case errs.Unauthenticated:
			oauthError(http.StatusBadRequest, "invalid_grant", "the code is unknown, used, expired or not for this verifier")
		case errs.RateLimited:
			oauthError(http.StatusTooManyRequests, "slow_down", "too many requests")
		default:
			u.log.ErrorContext(r.Context(), "single sign-on token", "error", err.Error())
			oauthError(u.status(err), "server_error", "vmgate could not start the session")
		}
		return
	}
	writeJSONBody(w, http.StatusOK, ssoTokenAnswer{Token: tok.Raw, ExpiresAt: tok.ExpiresAt.UTC().Format(time.RFC3339Nano),
		User: user})
}

func writeJSONBody(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"server_error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}
