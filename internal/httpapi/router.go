package httpapi

import (
	"net/http"
	"sort"
	"strings"

	"github.com/vmgate/vmgate/internal/errs"
)

// access says who may call a route before its handler runs.
type access int

const (
	public       access = iota // no token
	authed                     // any valid token: a login session's or an API token
	admin                      // a valid token of a global admin
	session                    // authed, from a login session: no API token (docs/security.md item 32)
	adminSession               // admin, from a login session: no API token
)

// route is one row of the route table (routes.go).
type route struct {
	method  string
	pattern string // a ServeMux path pattern, without the method
	access  access
	handle  handler
}

// handler is a route's handler: it answers, or returns the error to answer with.
type handler func(w http.ResponseWriter, r *http.Request) error

// mux dispatches by path on a ServeMux and by method in its own table, so unknown
// paths (404) and wrong methods (405 + Allow) answer in the envelope like everything else.
type mux struct {
	paths *http.ServeMux
}

// newMux builds the dispatcher. wrap turns a route into the final handler (auth,
// error rendering, metrics label); other serves a path no route names, when it
// wants to (the web UI), before the envelope's 404.
func newMux(routes []route, wrap func(route) http.Handler, other func(http.ResponseWriter, *http.Request) bool) *mux {
	byPattern := map[string]map[string]http.Handler{}
	var order []string
	for _, rt := range routes {
		if byPattern[rt.pattern] == nil {
			byPattern[rt.pattern] = map[string]http.Handler{}
			order = append(order, rt.pattern)
		}
		byPattern[rt.pattern][rt.method] = wrap(rt)
	}
	m := &mux{paths: http.NewServeMux()}
	for _, p := range order {
		methods := byPattern[p]
		var allow []string
		for meth := range methods {
			allow = append(allow, meth)
		}
		if _, ok := methods[http.MethodGet]; ok {
			allow = append(allow, http.MethodHead)
		}
		sort.Strings(allow)
		allowHeader := strings.Join(allow, ", ")
		pattern := p
		m.paths.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			h, ok := methods[r.Method]
			if !ok && r.Method == http.MethodHead {
				h, ok = methods[http.MethodGet]
			}
			if !ok {
				setRoutePattern(r, pattern)
				w.Header().Set("Allow", allowHeader)
				writeError(w, r, errs.E(errs.MethodNotAllowed,
					"method %s is not allowed here; allowed: %s", r.Method, allowHeader))
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	m.paths.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if other != nil && other(w, r) {
			return
		}
		setRoutePattern(r, "unmatched")
		writeError(w, r, errNoRoute(r))
	})
	return m
}

func (m *mux) ServeHTTP(w http.ResponseWriter, r *http.Request) { m.paths.ServeHTTP(w, r) }
