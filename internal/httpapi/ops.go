package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
)

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) error {
	writeData(w, map[string]string{"status": "ok"})
	return nil
}

// readyCheck is one dependency /readyz checks.
type readyCheck struct {
	name   string // what the answer calls it ("dependency")
	reason string // the reason when its check fails without saying why
	check  func(ctx context.Context) error
}

// readyChecks lists what /readyz checks, in order; per-cluster checks belong here.
func (s *Server) readyChecks() []readyCheck {
	return []readyCheck{{name: "store", reason: errs.ReasonStoreUnavailable, check: s.store.Ping}}
}

// readyz answers 200, or 503 naming the first dependency that is down: its reason
// (store_unavailable, ...) and "dependency".
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	for _, c := range s.readyChecks() {
		err := c.check(ctx)
		if err == nil {
			continue
		}
		down := &errs.Error{Kind: errs.Unavailable, Reason: c.reason, Err: err, RetryAfter: 2,
			Message: c.name + " is not available", Details: map[string]any{"dependency": c.name}}
		if e, ok := errs.As(err); ok && e.Kind == errs.Unavailable {
			down.Reason, down.Message, down.RetryAfter = e.ReasonOrDefault(), c.name+" is not available: "+e.Message, e.RetryAfter
		}
		return down
	}
	writeData(w, map[string]string{"status": "ready"})
	return nil
}

// metricsHandler serves the metrics to loopback clients, or to all with
// Config.MetricsPublic; to anyone else /metrics does not exist (SECURITY.md 31).
func (s *Server) metricsHandler(w http.ResponseWriter, r *http.Request) error {
	if !s.metricsAllowed(r) {
		return errNoRoute(r)
	}
	s.metrics.handler().ServeHTTP(w, r)
	return nil
}

func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) error {
	if len(s.openapi) == 0 {
		return errs.R(errs.NotFound, "not_found", "no API description is loaded")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(s.openapi)
	return nil
}
