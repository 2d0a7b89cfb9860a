// Package apitest keeps api/openapi.yaml honest: it wraps an http.Handler in tests
// and checks every request's answer against the operation the document declares —
// status code listed, content type and body matching the schema. An answer the
// document does not describe fails the test that provoked it.
package apitest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/vmgate/vmgate/api"
)

var (
	loadOnce sync.Once
	doc      *openapi3.T
	router   routers.Router
	loadErr  error
)

func init() {
	// Event streams are checked for their content type only; the body is a stream.
	openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder)
}

// Document loads and validates api/openapi.yaml once per test binary.
func Document() (*openapi3.T, routers.Router, error) {
	loadOnce.Do(func() {
		loader := openapi3.NewLoader()
		doc, loadErr = loader.LoadFromData(api.OpenAPIYAML)
		if loadErr != nil {
			return
		}
		if loadErr = doc.Validate(context.Background()); loadErr != nil {
			return
		}
		// Match on paths alone, whatever host the test server has.
		doc.Servers = nil
		router, loadErr = legacy.NewRouter(doc)
	})
	return doc, router, loadErr
}

// Wrap returns h wrapped so that every answer is validated against the document;
// a mismatch is reported with t.Errorf (safe from any goroutine).
func Wrap(t testing.TB, h http.Handler) http.Handler {
	t.Helper()
	_, rt, err := Document()
	if err != nil {
		t.Fatalf("api/openapi.yaml: %v", err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		if err := check(rt, r, rec); err != nil {
			t.Errorf("OpenAPI: %s %s → %d: %v", r.Method, r.URL.Path, rec.statusCode(), err)
		}
	})
}

// NewServer is httptest.NewServer(Wrap(t, h)) closed at the end of the test.
func NewServer(t testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(Wrap(t, h))
	t.Cleanup(srv.Close)
	return srv
}

func check(rt routers.Router, r *http.Request, rec *recorder) error {
	if r.Method == http.MethodHead {
		return nil
	}
	route, params, err := rt.FindRoute(r)
	if err != nil {
		// Not a documented path or method: only the envelope's 404/405 may come back.
		if s := rec.statusCode(); s != http.StatusNotFound && s != http.StatusMethodNotAllowed {
			return fmt.Errorf("undocumented route answered %d", s)
		}
		return nil
	}
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: r, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status: rec.statusCode(),
		Header: rec.Header(),
		Body:   io.NopCloser(bytes.NewReader(rec.body.Bytes())),
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true, // a status the operation does not list is an error
			MultiError:            true,
		},
	}
	if strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") {
		input.Body = io.NopCloser(strings.NewReader(""))
	}
	return openapi3filter.ValidateResponse(context.Background(), input)
}

// recorder passes everything through and keeps a copy of the body.
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.body.Len() < 4<<20 {
		r.body.Write(b)
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) statusCode() int {
	if r.status == 0 {
		return http.StatusOK
	}
	return r.status
}
