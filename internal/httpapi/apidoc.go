package httpapi

import (
	"net/http"

	"github.com/vmgate/vmgate/internal/errs"
)

// openAPI serves the API's description (api/openapi.yaml as JSON), embedded in
// the binary (Config.OpenAPIJSON).
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) error {
	if len(s.openapi) == 0 {
		return errs.E(errs.NotFound, "no API description is loaded")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(s.openapi)
	return nil
}
