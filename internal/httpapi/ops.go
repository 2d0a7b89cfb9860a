package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/vmgate/vmgate/internal/errs"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// jsonString renders v for an audit record's params.
func jsonString(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) error {
	writeData(w, map[string]string{"status": "ok"})
	return nil
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		return errs.Wrap(errs.Unavailable, err, "the store is not reachable")
	}
	writeData(w, map[string]string{"status": "ready"})
	return nil
}

func (s *Server) metricsHandler(w http.ResponseWriter, r *http.Request) error {
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
