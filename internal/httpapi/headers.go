package httpapi

import (
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/vmgate/vmgate/internal/errs"
)

// apiHeaders are set on every answer of the JSON API, errors and 404s included
// (docs/security.md item 31). The API serves JSON, never a page: nothing of it may load
// anything (default-src 'none'), be framed (frame-ancestors, X-Frame-Options for
// older browsers), leak its URL onward (Referrer-Policy) or be embedded by another
// origin (Cross-Origin-Resource-Policy). The web UI serves pages and sets a CSP of
// its own: it is mounted with Config.UI and gets none of these (IsAPIPath).
var apiHeaders = [][2]string{
	{"Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'"},
	{"X-Frame-Options", "DENY"},
	{"Referrer-Policy", "no-referrer"},
	{"Cross-Origin-Resource-Policy", "same-origin"},
	{"X-Content-Type-Options", "nosniff"},
}

// apiHeaderValues are apiHeaders as header values, made once and shared by every
// answer (nothing changes a value in place), so that setting them costs no
// allocation per request.
var apiHeaderValues = func() map[string][]string {
	m := make(map[string][]string, len(apiHeaders))
	for _, kv := range apiHeaders {
		m[http.CanonicalHeaderKey(kv[0])] = []string{kv[1]}
	}
	return m
}()

// setAPIHeaders sets apiHeaders on h.
func setAPIHeaders(h http.Header) {
	for k, v := range apiHeaderValues {
		h[k] = v
	}
}

// IsAPIPath reports whether path is the JSON API's (and so answered by Server
// with apiHeaders): /api/v1/..., /healthz, /readyz and /metrics. Every other path
// goes to Config.UI when one is set.
func IsAPIPath(path string) bool {
	switch path {
	case "/api/v1", "/healthz", "/readyz", "/metrics":
		return true
	}
	return strings.HasPrefix(path, "/api/v1/")
}

// metricsAllowed reports whether r may read /metrics: always with
// Config.MetricsPublic, otherwise only from loopback, judged both on the TCP peer
// and on the client a trusted proxy forwarded for. A reverse proxy on the same
// host is a loopback peer; the client behind it is not, and gets the 404 of a
// route that does not exist.
func (s *Server) metricsAllowed(r *http.Request) bool {
	if s.metricsPublic {
		return true
	}
	return isLoopback(hostOf(r.RemoteAddr)) && isLoopback(clientAddr(r))
}

// hostOf returns the host of a host:port address (the address itself without a port).
func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

func isLoopback(host string) bool {
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return err == nil && a.Unmap().IsLoopback()
}

// errNoRoute is the answer to a path vmgate does not serve.
func errNoRoute(r *http.Request) error {
	return errs.E(errs.NotFound, "no such route: %s", safeText(r.URL.Path))
}

// MetricsHandler serves /metrics alone, to every peer, for a listener of its own
// (vmgate server --metrics-listen): whoever can reach that address may read the
// metrics. Every other path is 404.
func (s *Server) MetricsHandler() http.Handler {
	return s.outer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
			setRoutePattern(r, "unmatched")
			writeError(w, r, errNoRoute(r))
			return
		}
		setRoutePattern(r, "GET /metrics")
		s.metrics.handler().ServeHTTP(w, r)
	}))
}
