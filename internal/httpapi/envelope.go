package httpapi

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/vmgate/vmgate/internal/errs"
)

// envelope is the body of every answer (docs/design.md §3): code equals the HTTP status,
// data is absent (not null) where an operation returns nothing.
type envelope struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Reason  string `json:"reason,omitempty"`
	Data    any    `json:"data,omitempty"`
}

// statusOf is the one table that maps an error kind to an HTTP status.
var statusOf = map[errs.Kind]int{
	errs.Internal:         http.StatusInternalServerError,
	errs.Invalid:          http.StatusBadRequest,
	errs.Unauthenticated:  http.StatusUnauthorized,
	errs.Forbidden:        http.StatusForbidden,
	errs.NotFound:         http.StatusNotFound,
	errs.MethodNotAllowed: http.StatusMethodNotAllowed,
	errs.Conflict:         http.StatusConflict,
	errs.TooLarge:         http.StatusRequestEntityTooLarge,
	errs.UnsupportedMedia: http.StatusUnsupportedMediaType,
	errs.Unprocessable:    http.StatusUnprocessableEntity,
	errs.RateLimited:      http.StatusTooManyRequests,
	errs.Upstream:         http.StatusBadGateway,
	errs.Unavailable:      http.StatusServiceUnavailable,
	errs.Timeout:          http.StatusGatewayTimeout,
}

// StatusOf is the HTTP status of an error: its kind through statusOf, 500 for
// anything that is no *errs.Error. The web UI answers with the same statuses.
func StatusOf(err error) int {
	e, ok := errs.As(err)
	if !ok {
		return http.StatusInternalServerError
	}
	if status, known := statusOf[e.Kind]; known {
		return status
	}
	return http.StatusInternalServerError
}

// writeJSON writes v as the whole body with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// Only a programming error gets here; answer without details.
		status = http.StatusInternalServerError
		body = []byte(`{"code":500,"message":"internal error","reason":"internal"}`)
	}
	h := w.Header()
	h["Content-Type"] = jsonContentType
	setContentLength(h, len(body)+1)
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

// writeData answers 200 success with data (nil data leaves the field out).
func writeData(w http.ResponseWriter, data any) {
	writeJSON(w, http.StatusOK, envelope{Code: http.StatusOK, Message: "success", Data: data})
}

// writeOK answers 200 success without data.
func writeOK(w http.ResponseWriter) { writeData(w, nil) }

// writeAccepted answers 202: the operation was started and still runs.
func writeAccepted(w http.ResponseWriter, message string, data any) {
	writeJSON(w, http.StatusAccepted, envelope{Code: http.StatusAccepted, Message: message, Data: data})
}

// errorBody is an error envelope with optional client-safe details merged in.
type errorBody struct {
	envelope
	details map[string]any
}

func (b errorBody) MarshalJSON() ([]byte, error) {
	m := map[string]any{"code": b.Code, "message": b.Message, "reason": b.Reason}
	for k, v := range b.details {
		if _, taken := m[k]; !taken {
			m[k] = v
		}
	}
	return json.Marshal(m)
}

// writeError answers with err mapped through statusOf. Internal errors are logged
// with their cause and reach the client as a bare "internal error".
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	e, ok := errs.As(err)
	if !ok {
		e = &errs.Error{Kind: errs.Internal, Message: "internal error", Err: err}
	}
	status := StatusOf(e)
	msg := e.Message
	if status == http.StatusInternalServerError {
		logFrom(r).ErrorContext(r.Context(), "internal error", slog.String("error", err.Error()))
		msg = "internal error"
		e = &errs.Error{Kind: errs.Internal}
	} else if e.Err != nil {
		logFrom(r).DebugContext(r.Context(), "request failed", slog.String("error", err.Error()))
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	writeJSON(w, status, errorBody{
		envelope: envelope{Code: status, Message: msg, Reason: e.ReasonOrDefault()},
		details:  e.Details,
	})
}
