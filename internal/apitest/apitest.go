// Package apitest keeps api/openapi.yaml honest. It compiles the document's schemas
// with a JSON Schema 2020-12 validator (OpenAPI 3.1's dialect), wraps an
// http.Handler (or a client's http.RoundTripper) in tests, and checks every answer
// against the operation the document declares for its method and path: status code
// listed, content type and body matching the schema, required headers present. An
// answer the document does not describe fails the test that provoked it.
//
// Every checked answer is counted by (operation, status); Coverage tells which
// operations no test has seen answer, so a package can fail a run that leaves an
// operation of the document unexercised.
package apitest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// maxRecorded bounds the copy of a body kept for checking; a longer answer's body
// is not checked (its status and headers are).
const maxRecorded = 16 << 20

// Wrap returns h wrapped so that every answer is validated against the document;
// a mismatch is reported with t.Errorf (safe from any goroutine).
func Wrap(t testing.TB, h http.Handler) http.Handler {
	t.Helper()
	s, err := Document()
	if err != nil {
		t.Fatal(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		s.report(t, r, rec.statusCode(), rec.Header(), rec.body.Bytes(), rec.truncated)
	})
}

// NewServer is httptest.NewServer(Wrap(t, h)) closed at the end of the test.
func NewServer(t testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(Wrap(t, h))
	t.Cleanup(srv.Close)
	return srv
}

// Transport returns base (http.DefaultTransport when nil) wrapped so that every
// answer a client receives is validated against the document, for tests that talk
// to a real vmgate process. The body is read whole before the client gets it,
// except an event stream's, which is checked as the client reads it (on Close).
func Transport(t testing.TB, base http.RoundTripper) http.RoundTripper {
	t.Helper()
	s, err := Document()
	if err != nil {
		t.Fatal(err)
	}
	if base == nil {
		base = http.DefaultTransport
	}
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		resp, err := base.RoundTrip(r)
		if err != nil {
			return resp, err
		}
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			resp.Body = &streamTap{ReadCloser: resp.Body, done: func(b []byte, truncated bool) {
				s.report(t, r, resp.StatusCode, resp.Header, b, truncated)
			}}
			return resp, nil
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxRecorded+1))
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		truncated := len(body) > maxRecorded
		if truncated {
			t.Errorf("OpenAPI: %s %s: the answer is over %d bytes", r.Method, r.URL.Path, maxRecorded)
		}
		s.report(t, r, resp.StatusCode, resp.Header, body, truncated)
		return resp, nil
	})
}

// report checks one answer and reports a mismatch on t.
func (s *Spec) report(t testing.TB, r *http.Request, status int, h http.Header, body []byte, truncated bool) {
	if truncated {
		body = nil // only the status and the headers can be checked
		h = h.Clone()
		h.Del("Content-Type")
	}
	if err := s.Check(r, status, h, body); err != nil {
		t.Errorf("OpenAPI: %s %s → %d: %v", r.Method, r.URL.EscapedPath(), status, err)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// streamTap copies what the client reads of a stream and checks it once, on EOF
// or Close.
type streamTap struct {
	io.ReadCloser
	mu        sync.Mutex
	buf       bytes.Buffer
	truncated bool
	checked   bool
	done      func([]byte, bool)
}

func (s *streamTap) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	s.mu.Lock()
	if s.buf.Len()+n > maxRecorded {
		s.truncated = true
	} else {
		s.buf.Write(p[:n])
	}
	s.mu.Unlock()
	if err == io.EOF {
		s.finish()
	}
	return n, err
}

func (s *streamTap) Close() error {
	err := s.ReadCloser.Close()
	s.finish()
	return err
}

func (s *streamTap) finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.checked {
		s.checked = true
		s.done(s.buf.Bytes(), s.truncated)
	}
}

// recorder passes everything through and keeps a copy of the body.
type recorder struct {
	http.ResponseWriter
	status    int
	body      bytes.Buffer
	truncated bool
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
	if r.body.Len()+len(b) > maxRecorded {
		r.truncated = true
	} else {
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

// The answers checked in this test binary, by operation key and status.
var (
	coverMu sync.Mutex
	covered = map[string]map[int]int{}
)

func record(op *Operation, status int) {
	coverMu.Lock()
	defer coverMu.Unlock()
	m := covered[op.Key()]
	if m == nil {
		m = map[int]int{}
		covered[op.Key()] = m
	}
	m[status]++
}

// OperationCoverage is what the tests of this binary saw of one operation.
type OperationCoverage struct {
	Operation *Operation
	Seen      map[int]int // status → answers checked
}

// Succeeded reports whether some checked answer was a 2xx (for an operation
// documented without one, whether any answer was checked).
func (c OperationCoverage) Succeeded() bool {
	for s := range c.Seen {
		if s >= 200 && s < 300 {
			return true
		}
	}
	// An operation the document gives no success has none to see: any of its
	// documented answers checked covers it.
	return c.Operation.refusesOnly && len(c.Seen) > 0
}

// Coverage lists every operation of the document with the statuses of the answers
// checked so far in this test binary.
func Coverage() ([]OperationCoverage, error) {
	s, err := Document()
	if err != nil {
		return nil, err
	}
	coverMu.Lock()
	defer coverMu.Unlock()
	out := make([]OperationCoverage, 0, len(s.ops))
	for _, op := range s.ops {
		seen := map[int]int{}
		for st, n := range covered[op.Key()] {
			seen[st] = n
		}
		out = append(out, OperationCoverage{Operation: op, Seen: seen})
	}
	return out, nil
}

// CheckCoverage returns an error naming every operation of the document that no
// checked answer in this test binary exercised successfully (with a 2xx status):
// an operation whose success was never seen has an unchecked success schema.
func CheckCoverage() error {
	cov, err := Coverage()
	if err != nil {
		return err
	}
	var missing []string
	for _, c := range cov {
		if !c.Succeeded() {
			statuses := make([]int, 0, len(c.Seen))
			for st := range c.Seen {
				statuses = append(statuses, st)
			}
			sort.Ints(statuses)
			missing = append(missing, fmt.Sprintf("  %s (%s): answers seen %v", c.Operation.ID, c.Operation.Key(), statuses))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%d operations of api/openapi.yaml were never seen succeeding in a checked answer:\n%s",
			len(missing), strings.Join(missing, "\n"))
	}
	return nil
}

// CoverageReport is a table of the statuses checked per operation.
func CoverageReport() string {
	cov, err := Coverage()
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, c := range cov {
		statuses := make([]int, 0, len(c.Seen))
		for st := range c.Seen {
			statuses = append(statuses, st)
		}
		slices.Sort(statuses)
		parts := make([]string, 0, len(statuses))
		for _, st := range statuses {
			parts = append(parts, fmt.Sprintf("%d×%d", st, c.Seen[st]))
		}
		fmt.Fprintf(&b, "%-22s %-52s %s\n", c.Operation.ID, c.Operation.Key(), strings.Join(parts, " "))
	}
	return b.String()
}
