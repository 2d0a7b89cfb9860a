package webui

import (
	"context"
	"errors"
	"mime"
	"net/http"
	"net/url"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
)

// access says who may call a route before its handler runs.
type access int

const (
	public access = iota // anybody
	authed               // a person logged in
	admin                // a person logged in with the admin role
)

// route is one row of the route table.
type route struct {
	method  string
	pattern string // a ServeMux path pattern, without the method
	access  access
	handle  func(w http.ResponseWriter, r *http.Request) error
}

// routes is the UI's whole surface in one table. The server mounts it at / beside
// the API (internal/httpapi serves /api/v1/…, /healthz, /readyz and /metrics and
// hands every other path here, httpapi.IsAPIPath), so a UI path never shadows an
// API path. Every POST needs
// a same-site Origin and, past log-in, the session's CSRF token (wrap); pages are
// GETs that change nothing.
func (u *UI) routes() []route {
	rs := []route{
		{"GET", "/static/{file}", public, u.static},
		{"GET", "/login", public, u.loginPage},
		{"POST", "/login", public, u.login},
		{"POST", "/logout", authed, u.logout},

		{"GET", "/{$}", authed, u.fleetPage},
		{"GET", "/vms", authed, u.vmsPage},
		{"GET", "/live", authed, u.liveEvents},
	}
	for _, k := range guestKinds {
		g := k.route()
		rs = append(rs,
			route{"GET", g, authed, u.guestPage(k)},
			route{"POST", g + "/start", authed, u.guestStart(k)},
			route{"POST", g + "/stop", authed, u.guestStop(k)},
			route{"GET", g + "/force-stop", authed, u.forceStopPage(k)},
			route{"POST", g + "/force-stop", authed, u.guestForceStop(k)},
			route{"POST", g + "/reboot", authed, u.guestReboot(k)},
		)
		if k.suspend {
			rs = append(rs,
				route{"POST", g + "/suspend", authed, u.guestSuspend(k)},
				route{"POST", g + "/resume", authed, u.guestResume(k)},
			)
		}
		rs = append(rs,
			route{"GET", g + "/migrate", authed, u.migratePage(k)},
			route{"POST", g + "/migrate", authed, u.guestMigrate(k)},
		)
	}
	rs = append(rs, u.remoteRoutes()...) // remote.go
	rs = append(rs, []route{
		{"GET", "/tasks", authed, u.tasksPage},
		{"GET", "/tasks/{taskId}", authed, u.taskPage},
		{"GET", "/tasks/{taskId}/events", authed, u.taskEvents},
		{"GET", "/tasks/{taskId}/log", authed, u.taskLog},
		{"POST", "/tasks/{taskId}/abort", authed, u.abortTask},

		{"GET", "/account", authed, u.accountPage},
		{"POST", "/account/password", authed, u.changePassword},
		{"POST", "/account/sessions/{sid}/end", authed, u.endMySession},
		{"POST", "/account/tokens", authed, u.createToken},
		{"POST", "/account/tokens/{tid}/revoke", authed, u.revokeToken},

		{"GET", "/admin/users", admin, u.usersPage},
		{"POST", "/admin/users", admin, u.createUser},
		{"GET", "/admin/users/{id}", admin, u.userPage},
		{"POST", "/admin/users/{id}", admin, u.updateUser},
		{"POST", "/admin/users/{id}/delete", admin, u.deleteUser},
		{"POST", "/admin/users/{id}/sessions/{sid}/end", admin, u.endUserSession},
		{"POST", "/admin/users/{id}/tokens/{tid}/revoke", admin, u.revokeUserToken},
		{"GET", "/admin/clusters", admin, u.clustersPage},
		{"POST", "/admin/clusters", admin, u.createCluster},
		{"GET", "/admin/clusters/{clusterId}", admin, u.clusterPage},
		{"POST", "/admin/clusters/{clusterId}", admin, u.updateCluster},
		{"POST", "/admin/clusters/{clusterId}/delete", admin, u.deleteCluster},
		{"GET", "/admin/grants", admin, u.grantsPage},
		{"POST", "/admin/grants", admin, u.putGrant},
		{"GET", "/admin/audit", admin, u.auditPage},
	}...)
	if u.sf != nil {
		rs = append(rs, u.secondFactorRoutes()...)
	}
	rs = append(rs, u.ssoRoutes()...)
	if u.notify != nil {
		rs = append(rs, u.notifyRoutes()...)
	}
	rs = append(rs, u.groupMappingRoutes()...)
	rs = append(rs, u.consoleRoutes()...) // console.go
	if u.ops != nil {
		rs = append(rs, []route{
			{"GET", "/vms/bulk", authed, u.bulkPreview},
			{"POST", "/vms/bulk", authed, u.bulkStart},
			{"GET", "/nodes/{clusterId}/{node}", authed, u.nodePage},
			{"POST", "/nodes/{clusterId}/{node}/evacuate", authed, u.evacuate},
			{"GET", "/operations/{id}", authed, u.operationPage},
			{"GET", "/operations/{id}/events", authed, u.operationEvents},
			{"POST", "/operations/{id}/cancel", authed, u.cancelOperation},
			{"POST", "/nodes/{clusterId}/{node}/maintenance", authed, u.enterMaintenance},
			{"POST", "/nodes/{clusterId}/{node}/maintenance/leave", authed, u.leaveMaintenance},
			{"GET", "/clusters/{clusterId}/rolling", authed, u.rollingPage},
			{"POST", "/clusters/{clusterId}/rolling", authed, u.rollingStart},
			{"POST", "/operations/{id}/pause", authed, u.pauseOperation},
			{"POST", "/operations/{id}/resume", authed, u.resumeOperation},
		}...)
	}
	return rs
}

// maxForm bounds a form's body, as the API bounds JSON bodies (docs/security.md item 22).
const maxForm = 64 << 10

var (
	errCrossOrigin = errs.E(errs.Forbidden, "this form was sent from another site; vmgate refused it")
	errCSRF        = errs.E(errs.Forbidden, "this form has expired or did not come from vmgate; reload the page and try again")
)

// Hold says how much longer than the server's request timeout the request r may
// take, and whether it is an event stream, which no whole-request deadline
// bounds. A power action no longer waits for its task (its page follows it),
// so only the streams are held.
func (u *UI) Hold(r *http.Request) (extra time.Duration, stream bool) {
	route := u.Route(r)
	switch route {
	case "GET /tasks/{taskId}/events", "GET /operations/{id}/events", "GET /live":
		return 0, true
	}
	return 0, false
}

// wrap turns a route into a handler: for a POST the Origin check and the form
// (url-encoded, at most maxForm); past log-in the session (renewed when due), the
// caller in the context for the audit trail (internal/audit), the CSRF token of a
// POST and the admin check; then the handler, whose error becomes a page.
func (u *UI) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		post := r.Method == http.MethodPost
		if post {
			if !sameOrigin(r) {
				u.fail(w, r, errCrossOrigin)
				return
			}
			if err := parseForm(w, r); err != nil {
				u.fail(w, r, err)
				return
			}
		}
		if rt.access != public {
			p, err := u.authenticate(w, r)
			if err != nil {
				u.fail(w, r, err)
				return
			}
			u.noteCaller(r, p.UserID, p.AuditSession())
			ctx := audit.WithActor(r.Context(), p.UserID, p.Email, p.SessionID)
			r = r.WithContext(context.WithValue(ctx, principalKey, p))
			if post && !csrfOK(r, u.csrfToken(p.SessionID)) {
				u.fail(w, r, errCSRF)
				return
			}
			if u.mustEnrolFirst(w, r, rt, p) { // --require-2fa (secondfactor.go)
				return
			}
			if rt.access == admin {
				if err := u.accounts.RequireAdmin(r.Context(), p, "UI "+rt.method+" "+rt.pattern); err != nil {
					u.fail(w, r, err)
					return
				}
			}
		}
		if err := rt.handle(w, r); err != nil {
			u.fail(w, r, err)
		}
	})
}

// parseForm reads a POST's url-encoded form; anything else is refused, as is a
// body over maxForm.
func parseForm(w http.ResponseWriter, r *http.Request) error {
	if r.ContentLength != 0 || r.Header.Get("Content-Type") != "" {
		mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || mt != "application/x-www-form-urlencoded" {
			return errs.E(errs.Invalid, "a form must be sent as application/x-www-form-urlencoded")
		}
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return errs.E(errs.TooLarge, "the form is larger than %d bytes", maxForm)
		}
		return errs.E(errs.Invalid, "the form cannot be read")
	}
	return nil
}

// fail answers a request whose handler failed. Unauthenticated page loads go to
// the log-in page (and back afterwards); a script's request gets the status alone;
// everything else gets the error page with the status of the one table
// (httpapi.StatusOf).
func (u *UI) fail(w http.ResponseWriter, r *http.Request, err error) {
	if errs.KindOf(err) == errs.Unauthenticated {
		switch {
		case r.Header.Get("Accept") == "text/event-stream" || r.Header.Get("Sec-Fetch-Mode") == "cors":
			http.Error(w, "unauthenticated", http.StatusUnauthorized)
		case r.Method == http.MethodGet && sessionToken(r) == "" && r.Header.Get("Sec-Fetch-Site") == "cross-site":
			// A link from another site: the browser withheld the SameSite=Strict
			// cookie. Going on from a vmgate page sends it, if there is one.
			u.renderBounce(w, r)
		case r.Method == http.MethodGet:
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
		default:
			http.Redirect(w, r, "/login", http.StatusSeeOther)
		}
		return
	}
	err = errs.TimedOut(r.Context(), err) // as the API answers it
	status := u.status(err)
	e, ok := errs.As(err)
	msg := "internal error"
	if ok && status != http.StatusInternalServerError {
		msg = e.Message
	} else {
		u.log.ErrorContext(r.Context(), "internal error", "error", err.Error(),
			"request_id", audit.FactsFrom(r.Context()).RequestID)
	}
	if ok && e.RetryAfter > 0 {
		w.Header().Set("Retry-After", itoa(int64(e.RetryAfter)))
	}
	u.renderError(w, r, status, msg)
}

func (u *UI) notFound(w http.ResponseWriter, r *http.Request) error {
	return errs.E(errs.NotFound, "there is no page at %s", clip(r.URL.Path, 200))
}
